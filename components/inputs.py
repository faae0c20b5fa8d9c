"""What each component takes: the section of the stack settings it configures, and the facts it
needs from other components as explicit inputs (a scheduler name, the GPU taints, a namespace).

These models validate a component's `args` inside the component, with the errors the stack
settings give. `components/args.py`, the typed args Pulumi's schema analyzer reads, is generated
from them (`scripts/generate.py`); GpuPlatform builds each component's args from the stack
settings (`platform.component_args`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from .facts import ALWAYS_EXEMPT, GPU_RESOURCE, mig_resource
from .settings import (
    AdmissionSettings,
    CompactionSettings,
    GpuNodesSettings,
    GpuOperatorSettings,
    ImageSettings,
    KubernetesVersion,
    Model,
    MonitoringSettings,
    RegistryMirror,
    ResourceWeight,
    SchedulerSettings,
    ScoringStrategy,
    StackSettings,
    Taint,
    TeamsSettings,
    kubernetes_version_field,
    mirror_field,
    mirrored,
)
from .validation import DnsLabel, Invalid, NamespaceNames, is_dns_subdomain


class PulumiInput:
    """Marks an input that may be a pulumi Output (known only once another resource exists);
    the component applies over it. `type_` is its type once known."""

    def __init__(self, type_: type):
        self.type_ = type_


def check_node_names(names: list[str] | None) -> list[str] | None:
    for index, name in enumerate(names or []):
        if not is_dns_subdomain(name):
            raise Invalid("not a valid node name", "DNS-1123 subdomains", at=(index,),
                          value=name, has_value=True)
    if names == []:
        raise Invalid("no GPU node is named", "the GPU nodes' names, or unset when node pools "
                      "set the taint and the names are not known", value=[], has_value=True)
    return names


NodeNames = Annotated[list[str] | None, AfterValidator(check_node_names)]


class GpuNodeFacts(Model):
    """The GPU nodes, as other components need to know them."""

    taints: list[Taint] = Field(
        min_length=1,
        description="The taints every GPU node carries, the GPU taint that keeps other pods "
                    "off first (the GpuNodes component's `taints` output).")
    names: NodeNames = Field(
        default=None,
        description="The GPU nodes' names (the GpuNodes component's `nodeNames` output); unset "
                    "when node pools set the taint and the names are not known.")


def gpu_nodes_field():
    return Field(description="The GPU nodes: their taints and, when known, their names.")


class PulledImages(Model):
    """Inputs of a component that runs images: where the nodes pull them from."""

    image_registry_mirror: RegistryMirror = mirror_field()


    def mirrored(self, repository: str) -> str:
        return mirrored(self.image_registry_mirror, repository)

    def image(self, image: ImageSettings) -> str:
        """A pinned image as the nodes pull it."""
        return f"{self.mirrored(image.repository)}:{image.tag}"


class GpuNodesInputs(Model):
    """The GPU nodes to taint and label."""

    gpu_nodes: GpuNodesSettings = Field(description="The GPU nodes and their taints and labels.")


class GpuOperatorInputs(PulledImages):
    """NVIDIA's GPU Operator, with the GPU nodes' taints its operands tolerate and the GPU
    nodes' names that size its namespace's quota."""

    gpu_operator: GpuOperatorSettings = Field(
        default_factory=GpuOperatorSettings,
        description="NVIDIA's GPU Operator: its Helm release and the operands it runs on GPU "
                    "nodes.")
    gpu_nodes: GpuNodeFacts = gpu_nodes_field()
    secret_values: bool = Field(
        default=False,
        description="Store the release's values as a secret: set it when "
                    "`gpuOperator.extraValues` holds a credential.")



def scored_resources(strategy: ScoringStrategy, mig_resources: list[str]) -> list[ResourceWeight]:
    """What the binpack scheduler's NodeResourcesFit scores: the configured resources, and each
    MIG resource at the GPU weight (unless configured), so a MIG slice packs as a whole GPU
    does."""
    weights = {r.name: r.weight for r in strategy.resources}
    gpu_weight = weights.get(GPU_RESOURCE, max(weights.values()))
    return [*strategy.resources, *(ResourceWeight(name=name, weight=gpu_weight)
                                   for name in mig_resources if name not in weights)]


def mig_resources_field():
    return Field(default_factory=list,
                 description="The MIG resources GPU nodes advertise (`nvidia.com/mig-<profile>`, "
                             "with the GPU Operator's mixed strategy; the GpuOperator "
                             "component's `migResources` output): each is packed as a whole GPU "
                             "is.")


def check_mig_resources(names: list[str]) -> list[str]:
    for index, name in enumerate(names):
        if not name.startswith(mig_resource("")):
            raise Invalid("not a MIG resource", f"{mig_resource('<profile>')} names",
                          at=(index,), value=name, has_value=True)
    return names


MigResources = Annotated[list[str], AfterValidator(check_mig_resources)]


class BinpackSchedulerInputs(PulledImages):
    """The binpack scheduler, with the Kubernetes version that picks its image and the MIG
    resources it packs as it packs GPUs."""

    scheduler: SchedulerSettings = Field(
        default_factory=SchedulerSettings,
        description="The binpack scheduler, a second kube-scheduler that packs GPU pods, and "
                    "the PriorityClass of preemptible GPU pods.")
    kubernetes_version: KubernetesVersion = kubernetes_version_field()
    mig_resources: MigResources = mig_resources_field()


    @property
    def scored_resources(self) -> list[ResourceWeight]:
        return scored_resources(self.scheduler.scoring_strategy, self.mig_resources)

    @property
    def scheduler_image(self) -> str:
        return f"{self.mirrored('registry.k8s.io/kube-scheduler')}:v{self.kubernetes_version}"


GpuPath = Literal["devicePlugin", "dra"]


class AdmittedTeams(Model):
    """The teams, as the admission policy keeps GPU pods in their queues."""

    namespaces: dict[str, str] = Field(
        description="Each team namespace, with its team (the Teams component's "
                    "`teamNamespaces` output): a GPU pod there must come through Kueue.")
    gpu_pods_outside_teams: Literal["refuse", "admit"] = Field(
        default="refuse",
        description="A GPU pod in a namespace of no team (`teams.gpuPodsOutsideTeams`).")
    kueue_user: str = Field(
        description="Kueue's identity in its requests to the API server (the Teams component's "
                    "`kueueUser` output): only Kueue lifts its gates and starts a team's Jobs.")
    workload_controllers: list[str] = Field(
        default_factory=list,
        description="Users that create a team's Jobs for a parent Kueue admitted "
                    "(`teams.workloadControllers`).")


class OpaAdmissionInputs(PulledImages):
    """The admission policy and OPA, with what the policy checks pods against: the binpack
    scheduler's name, the preemptible class, the GPU nodes' taints and names, and the
    namespaces of the platform's other components."""

    admission: AdmissionSettings = Field(
        default_factory=AdmissionSettings,
        description="OPA behind the admission webhooks: which pods are GPU pods and what is "
                    "refused.")
    scheduler_name: DnsLabel = Field(
        description="The schedulerName GPU pods must name: the binpack scheduler's (the "
                    "BinpackScheduler component's `schedulerName` output).")
    preemptible_class: str | None = Field(
        default=None,
        description="The PriorityClass of preemptible GPU pods, when one is declared (the "
                    "BinpackScheduler component's `preemptibleClass` output).")
    gpu_nodes: GpuNodeFacts = gpu_nodes_field()
    gpu_path: GpuPath = Field(
        default="devicePlugin",
        description="How pods reach GPUs (`gpuOperator.gpuPath`; the GpuOperator component's "
                    "`gpuPath` output): on `dra`, claims on NVIDIA's device classes are "
                    "admitted for pods placed as GPU pods are.")
    platform_device_classes: list[str] = Field(
        default_factory=list,
        description="The platform's own DeviceClasses (the GpuOperator component's "
                    "`deviceClasses` output): claims on them are GPU claims, and only the "
                    "program writes them.")
    scheduler_user: str | None = Field(
        default=None,
        description="The binpack scheduler's identity in its requests (its ServiceAccount's "
                    "user name): with the cluster's scheduler, it allocates DRA claims.")
    teams: AdmittedTeams | None = Field(
        default=None,
        description="The teams, when GPUs are shared through Kueue's queues.")
    trusted_namespaces: NamespaceNames = Field(
        default_factory=list,
        description="Namespaces of the platform's other components whose pods run on every "
                    "node or need GPUs (the GPU Operator's, the monitoring stack's): never "
                    "checked, as kube-system and OPA's own are not.")



    @property
    def exempt_namespaces(self) -> list[str]:
        """Every namespace the webhook never sees: the configured ones, kube-system, OPA's own
        and the trusted namespaces of the platform's other components."""
        return sorted({*ALWAYS_EXEMPT, self.admission.namespace, *self.trusted_namespaces,
                       *self.admission.exempt_namespaces})


class MonitoredScheduler(Model):
    """The binpack scheduler, as Monitoring scrapes it and alerts on it."""

    name: str = Field(description="Its name (the BinpackScheduler component's "
                                  "`schedulerName` output).")
    namespace: str = Field(description="Its namespace (the BinpackScheduler component's "
                                       "`namespace` output).")


class MonitoredAdmission(Model):
    """The admission webhooks and OPA, as Monitoring scrapes them and alerts on them."""

    namespace: str = Field(description="OPA's namespace (the OpaAdmission component's "
                                       "`namespace` output).")
    webhook_name: str = Field(description="The webhook's name (the OpaAdmission component's "
                                          "`webhookName` output).")
    failure_policy: Literal["Fail", "Ignore"] = Field(
        description="What the API server does when OPA cannot answer: with `Fail` an outage "
                    "refuses pods, so its alert is critical.")
    certificate_renewal_hours: int = Field(
        description="How many hours before its expiry `pulumi up` renews the webhook's "
                    "serving certificate (`admission.certificate.earlyRenewalHours`).")
    certificate_not_after: Annotated[Any, PulumiInput(str)] = Field(
        default=None,
        description="When the webhook's serving certificate expires, RFC 3339 (the OpaAdmission "
                    "component's `certificateNotAfter` output): alerts warn before it does.")


class MonitoredCompaction(Model):
    """Compaction's CronJob, whose runs Monitoring alerts on."""

    name: str = Field(description="The CronJob's name (`compaction.name`).")
    namespace: str = Field(description="Its namespace (the GpuCompaction component's "
                                       "`namespace` output).")


class MonitoredTeams(Model):
    """Kueue and the teams' queues, as Monitoring scrapes them and alerts on them."""

    namespace: str = Field(description="Kueue's namespace (the Teams component's `namespace` "
                                       "output).")
    release_name: str = Field(description="Kueue's Helm release (`teams.kueue.releaseName`).")


class MonitoringInputs(PulledImages):
    """kube-prometheus-stack, the GPU dashboard, rules and alerts, with the components they
    watch."""

    monitoring: MonitoringSettings = Field(
        default_factory=MonitoringSettings,
        description="kube-prometheus-stack, the GPU dashboard, recording rules and alerts.")
    kubernetes_version: KubernetesVersion = kubernetes_version_field()
    gpu_operator_namespace: str = Field(
        description="The GPU Operator's namespace, where the DCGM exporter Service is (the "
                    "GpuOperator component's `namespace` output).")
    gpu_path: GpuPath = Field(
        default="devicePlugin",
        description="How pods reach GPUs (the GpuOperator component's `gpuPath` output): which "
                    "DCGM exporter to scrape, and where the GPUs' capacity is read from.")
    scheduler: MonitoredScheduler = Field(description="The binpack scheduler.")
    admission: MonitoredAdmission = Field(description="The admission webhooks and OPA.")
    compaction: MonitoredCompaction | None = Field(
        default=None, description="Compaction's CronJob, when compaction is on.")
    teams: MonitoredTeams | None = Field(default=None, description="Kueue, when teams are on.")
    secret_values: bool = Field(
        default=False,
        description="Store the release's values as a secret: set it when "
                    "`monitoring.extraValues` holds a credential.")



class GpuCompactionInputs(PulledImages):
    """Compaction with the descheduler, with the binpack scheduler that places every run and
    the evicted pods, and its scoring."""

    compaction: CompactionSettings = Field(
        default_factory=CompactionSettings,
        description="Moving opted-in GPU pods off lightly used GPU nodes with the descheduler, "
                    "so whole nodes come free (`enabled` is GpuPlatform's switch: this "
                    "component always declares compaction).")
    scheduler_name: DnsLabel = Field(
        description="The binpack scheduler's name (the BinpackScheduler component's "
                    "`schedulerName` output): it places every run, and the pods a run evicts.")
    scoring_strategy: ScoringStrategy = Field(
        default_factory=ScoringStrategy,
        description="The binpack scheduler's scoring (`scheduler.scoringStrategy`), with which "
                    "a run predicts where evicted pods land.")
    mig_resources: MigResources = mig_resources_field()


    @property
    def scored_resources(self) -> list[ResourceWeight]:
        return scored_resources(self.scoring_strategy, self.mig_resources)


class TeamsInputs(PulledImages):
    """Kueue and the teams' queues, with the GPU nodes' taints their flavors tolerate."""

    teams: TeamsSettings = Field(
        description="Teams that share the GPUs through Kueue: a quota and a queue per team "
                    "(`enabled` is GpuPlatform's switch: this component always declares them).")
    gpu_nodes: GpuNodeFacts = gpu_nodes_field()
    device_classes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="On the DRA path, each GPU resource and the DeviceClasses whose claims "
                    "hold it (the GpuOperator component's `servedResources` output): Kueue "
                    "counts a claim on one against the resource's quota.")


class GpuPlatformInputs(StackSettings):
    """The whole platform: every section of the stack settings, and which hold a secret."""

    secret_sections: list[Literal["gpuOperator", "monitoring"]] = Field(
        default_factory=list,
        description="Sections that hold a secret (a credential in extra chart values, the "
                    "Grafana password): their Helm release's values are stored as a secret.")



# Each component's inputs, by the component's name; its args are `<name>Args` in args.py.
COMPONENT_INPUTS: dict[str, type[Model]] = {
    "GpuPlatform": GpuPlatformInputs,
    "GpuNodes": GpuNodesInputs,
    "GpuOperator": GpuOperatorInputs,
    "BinpackScheduler": BinpackSchedulerInputs,
    "OpaAdmission": OpaAdmissionInputs,
    "Monitoring": MonitoringInputs,
    "GpuCompaction": GpuCompactionInputs,
    "Teams": TeamsInputs,
}
