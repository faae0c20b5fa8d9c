"""The whole GPU platform: five components wired by the dependencies of the design."""

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime import config as runtime_config

from . import charts, cluster_version, gpu_operator, kube, monitoring, teams
from .args import AdmittedTeams as AdmittedTeamsArgs
from .args import (
    BinpackSchedulerArgs,
    GpuCompactionArgs,
    GpuNodesArgs,
    GpuOperatorArgs,
    GpuPlatformArgs,
    MonitoringArgs,
    OpaAdmissionArgs,
    TeamsArgs,
)
from .args import GpuNodeFacts as GpuNodeFactsArgs
from .args import MonitoredAdmission as MonitoredAdmissionArgs
from .args import MonitoredCompaction as MonitoredCompactionArgs
from .args import MonitoredScheduler as MonitoredSchedulerArgs
from .args import MonitoredTeams as MonitoredTeamsArgs
from .args import Taint as TaintArgs
from .binpack_scheduler import BinpackScheduler
from .gpu_compaction import GpuCompaction
from .gpu_nodes import GpuNodes
from .gpu_operator import GpuOperator
from .inputs import (
    BinpackSchedulerInputs,
    GpuCompactionInputs,
    GpuNodesInputs,
    GpuOperatorInputs,
    GpuPlatformInputs,
    MonitoringInputs,
    OpaAdmissionInputs,
    TeamsInputs,
)
from .monitoring import Monitoring
from .opa_admission import OpaAdmission
from .settings import (
    CONFIG_NAMESPACE,
    STACK,
    StackSettings,
    load_settings,
    retired_settings,
)
from .teams import Teams, controller_user
from .validation import SettingsError, Subject

# The config keys whose settings may hold secrets (free-form chart values, the Grafana password),
# with the inputs that then carry them: those Helm releases' values, marked secret as a whole.
SECRET_CAPABLE = ("gpuOperator", "monitoring")

# The platform's name in a program that declares one.
PLATFORM_NAME = "gpu-platform"


def stack_config() -> dict[str, Any]:
    """The stack's `gpu-platform:` config, keys without the prefix.

    Every key is read, not only known ones, so that a misspelt setting is reported rather than
    silently ignored. The engine hands config over either in the PULUMI_CONFIG environment or
    through the runtime's config map; both are read.
    """
    prefix = f"{CONFIG_NAMESPACE}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    return {key[len(prefix):]: runtime_config.get_config(key)
            for key in sorted(keys) if key.startswith(prefix)}


def stack_secret_keys() -> set[str]:
    """The `gpu-platform:` config keys stored as secrets (prefix removed): a key holds a secret
    when any value under it was set with `pulumi config set --secret --path`."""
    prefix = f"{CONFIG_NAMESPACE}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    secret = {key for key in keys if runtime_config.is_config_secret(key)}
    secret |= set(runtime_config.get_config_secret_keys_env())
    return {key[len(prefix):] for key in secret if key.startswith(prefix)}


def check_secret_keys(secret_keys: Collection[str]) -> None:
    """A secret in a section whose values reach ConfigMaps, node patches or webhook
    configurations would leave the program in plain text: refused, naming the key."""
    problems = [
        f"{CONFIG_NAMESPACE}:{key}: stored as a secret, but none of its settings takes one, so "
        f"its values would reach the cluster and the state in plain text; allowed: plain values "
        f"here, and secrets only under "
        f"{' and '.join(CONFIG_NAMESPACE + ':' + k for k in SECRET_CAPABLE)}"
        for key in sorted(secret_keys) if key not in SECRET_CAPABLE]
    if problems:
        raise SettingsError(problems, STACK)


@dataclass(frozen=True)
class ComponentArgs:
    """Each component's args, as the platform declares it."""

    gpu_nodes: GpuNodesArgs
    gpu_operator: GpuOperatorArgs
    scheduler: BinpackSchedulerArgs
    admission: OpaAdmissionArgs
    monitoring: MonitoringArgs
    compaction: GpuCompactionArgs
    teams: TeamsArgs


def component_args(settings: StackSettings, secret_sections: Collection[str] = ()
                   ) -> ComponentArgs:
    """What the platform hands each component: its section of the settings, and the facts it
    needs from the others, each from the one setting that holds it. (Monitoring's certificate
    expiry is added once the admission component has it.)"""
    nodes = settings.gpu_nodes
    op, sched, adm = settings.gpu_operator, settings.scheduler, settings.admission
    mirror = {"image_registry_mirror": settings.image_registry_mirror}
    gpu_nodes = GpuNodeFactsArgs(
        taints=[TaintArgs(**taint.model_dump()) for taint in nodes.taints],
        names=list(nodes.names) if nodes.tainted_by == "program" else None)
    compaction, teams = settings.compaction, settings.teams
    return ComponentArgs(
        gpu_nodes=GpuNodesArgs(gpu_nodes=dump(nodes)),
        gpu_operator=GpuOperatorArgs(
            gpu_operator=dump(op), gpu_nodes=gpu_nodes,
            secret_values="gpuOperator" in secret_sections, **mirror),
        scheduler=BinpackSchedulerArgs(
            scheduler=dump(sched), kubernetes_version=settings.kubernetes_version,
            mig_resources=op.mig.resources, **mirror),
        admission=OpaAdmissionArgs(
            admission=dump(adm), scheduler_name=sched.name,
            preemptible_class=(sched.preemptible_class.name
                               if sched.preemptible_class.enabled else None),
            gpu_nodes=gpu_nodes,
            teams=(AdmittedTeamsArgs(namespaces=teams.team_namespaces,
                                     gpu_pods_outside_teams=teams.gpu_pods_outside_teams,
                                     kueue_user=controller_user(
                                         teams.kueue.namespace, teams.kueue.release_name),
                                     workload_controllers=list(teams.workload_controllers))
                   if teams.enabled else None),
            gpu_path=op.gpu_path,
            platform_device_classes=[c for c, _ in own_device_classes(op)],
            scheduler_user=f"system:serviceaccount:{sched.namespace}:{sched.name}",
            trusted_namespaces=[op.namespace, settings.monitoring.namespace], **mirror),
        monitoring=MonitoringArgs(
            monitoring=dump(settings.monitoring), kubernetes_version=settings.kubernetes_version,
            gpu_operator_namespace=op.namespace, gpu_path=op.gpu_path,
            scheduler=MonitoredSchedulerArgs(name=sched.name, namespace=sched.namespace),
            admission=MonitoredAdmissionArgs(
                namespace=adm.namespace, webhook_name=adm.webhook_name,
                failure_policy=adm.failure_policy,
                certificate_renewal_hours=adm.certificate.early_renewal_hours),
            compaction=(MonitoredCompactionArgs(name=compaction.name,
                                                namespace=compaction.namespace)
                        if compaction.enabled else None),
            teams=(MonitoredTeamsArgs(namespace=teams.kueue.namespace,
                                      release_name=teams.kueue.release_name)
                   if teams.enabled else None),
            secret_values="monitoring" in secret_sections, **mirror),
        # Declared only when compaction.enabled, and teams.enabled.
        compaction=GpuCompactionArgs(
            compaction=dump(compaction), scheduler_name=sched.name,
            scoring_strategy=dump(sched.scoring_strategy), mig_resources=op.mig.resources,
            **mirror),
        teams=TeamsArgs(teams=dump(teams), gpu_nodes=gpu_nodes,
                        device_classes=gpu_operator.served_resources(op), **mirror),
    )


def own_device_classes(op: Any) -> list[tuple[str, str]]:
    """The platform's own DeviceClasses on the DRA path, each with the resource it serves."""
    return [(classes[0], resource)
            for resource, classes in gpu_operator.served_resources(op).items()]


def dump(section: Any) -> Any:
    """A settings section as args take it (keys by their Python names)."""
    return section.model_dump()


@dataclass(frozen=True)
class ComponentInputs:
    """Each component's inputs, validated as the component validates its args."""

    gpu_nodes: GpuNodesInputs
    gpu_operator: GpuOperatorInputs
    scheduler: BinpackSchedulerInputs
    admission: OpaAdmissionInputs
    monitoring: MonitoringInputs
    compaction: GpuCompactionInputs
    teams: TeamsInputs


def component_inputs(args: ComponentArgs) -> ComponentInputs:
    """Each component's args validated as the component validates them."""
    return ComponentInputs(
        gpu_nodes=GpuNodes.inputs(GpuNodesInputs, args.gpu_nodes),
        gpu_operator=GpuOperator.inputs(GpuOperatorInputs, args.gpu_operator),
        scheduler=BinpackScheduler.inputs(BinpackSchedulerInputs, args.scheduler),
        admission=OpaAdmission.inputs(OpaAdmissionInputs, args.admission),
        monitoring=Monitoring.inputs(MonitoringInputs, args.monitoring),
        compaction=GpuCompaction.inputs(GpuCompactionInputs, args.compaction),
        teams=Teams.inputs(TeamsInputs, args.teams))


def check_chart_values(inputs: ComponentInputs, subject: Subject) -> None:
    """The extra chart values merge over the generated ones (raises SettingsError naming each
    that may not)."""
    gpu_operator.chart_values(inputs.gpu_operator, subject)
    monitoring.chart_values(inputs.monitoring, subject)
    if inputs.teams.teams.enabled:
        teams.chart_values(inputs.teams, subject)


class GpuPlatform(kube.Component):
    """The whole GPU platform on one cluster: GPU nodes, GPU Operator, binpack scheduler,
    admission, monitoring and (when on) compaction, wired by the dependencies of the design,
    through a Kubernetes provider of the stack's cluster."""

    cluster_context: str
    "The kubeconfig context of the cluster the platform is on."
    scheduler_name: str
    "The schedulerName GPU pods name (BinpackScheduler's `schedulerName`)."
    preemptible_class: str | None
    "BinpackScheduler's `preemptibleClass`."
    webhook_name: str
    "OpaAdmission's `webhookName`."
    ca_certificate: pulumi.Output[str]
    "OpaAdmission's `caCertificate`: the webhook CA's certificate, PEM."
    grafana_url: str
    "Monitoring's `grafanaUrl`."
    grafana_port_forward: str
    "Monitoring's `grafanaPortForward`: the command that opens Grafana on localhost:3000."
    grafana_admin_password: pulumi.Output[str]
    "Monitoring's `grafanaAdminPassword` (a secret)."
    gpu_nodes: list[str]
    "GpuNodes' `nodeNames`: the GPU nodes the program taints (none with node pools)."
    compaction_schedule: str | None
    "GpuCompaction's `schedule`, when compaction is on."
    images: list[str]
    "Every image the platform runs, as the nodes pull them: what a mirror must hold."
    charts: list[str]
    "The Helm charts it installs, and where from."

    def __init__(self, name: str, args: GpuPlatformArgs,
                 opts: pulumi.ResourceOptions | None = None):
        subject = self.args_subject()
        settings = self.inputs(GpuPlatformInputs, args)
        # Every component's inputs and chart values are checked before anything is registered,
        # so bad args leave the run with nothing declared.
        components = component_args(settings, settings.secret_sections)
        inputs = component_inputs(components)
        check_chart_values(inputs, subject)
        # Two platforms in one program (one per cluster) name their resources apart; the one of
        # the default name keeps the names every existing stack has.
        prefix = "" if name == PLATFORM_NAME else f"{name}-"
        super().__init__(name, opts, child_prefix=prefix)
        # Every Kubernetes object and release goes to the stack's cluster through this provider
        # (the example stack disables the default one, so nothing reaches the cluster that
        # happens to be current). Server-side apply: a preview is the API server's dry run.
        cluster = settings.cluster
        self.provider = k8s.Provider(
            self.child_name("cluster"), context=cluster.context, kubeconfig=cluster.kubeconfig,
            enable_server_side_apply=True, opts=pulumi.ResourceOptions(parent=self))

        def child(*after: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, providers={"kubernetes": self.provider},
                                          depends_on=list(after))

        # Taint the nodes before the operator's DaemonSets and the first GPU pods arrive.
        self.nodes = GpuNodes(self.child_name("gpu-nodes"), components.gpu_nodes, child())
        self.operator = GpuOperator(self.child_name("gpu-operator"), components.gpu_operator,
                                    child(self.nodes))
        self.scheduler = BinpackScheduler(self.child_name("binpack-scheduler"),
                                          components.scheduler, child())
        # Kueue's webhooks answer before the policy sends GPU pods in team namespaces to them.
        self.teams = (Teams(self.child_name("teams"), components.teams, child())
                      if settings.teams.enabled else None)
        # Never force GPU pods onto a scheduler that is not running.
        self.admission = OpaAdmission(self.child_name("opa-admission"), components.admission,
                                      child(self.scheduler, *([self.teams] if self.teams else [])))
        # The DCGM exporter Service the ServiceMonitor selects is created by the operator.
        monitored_admission: MonitoredAdmissionArgs = {
            **components.monitoring["admission"],
            "certificate_not_after": self.admission.certificate_not_after}
        self.monitoring = Monitoring(
            self.child_name("monitoring"),
            MonitoringArgs(**{**components.monitoring, "admission": monitored_admission}),
            child(self.operator))
        # Evictions only once the scheduler that places the evicted pods again is there.
        self.compaction = (GpuCompaction(self.child_name("gpu-compaction"),
                                         components.compaction, child(self.scheduler))
                           if settings.compaction.enabled else None)

        self.cluster_context = cluster.context
        self.scheduler_name = self.scheduler.scheduler_name
        self.preemptible_class = self.scheduler.preemptible_class
        self.webhook_name = self.admission.webhook_name
        self.ca_certificate = self.admission.ca_certificate
        self.grafana_url = self.monitoring.grafana_url
        self.grafana_port_forward = self.monitoring.grafana_port_forward
        self.grafana_admin_password = self.monitoring.grafana_admin_password
        self.gpu_nodes = self.nodes.node_names
        self.compaction_schedule = self.compaction.schedule if self.compaction else None
        self.images = required_images(inputs)
        self.charts = required_charts(inputs)
        self.outputs = {
            "clusterContext": self.cluster_context,
            "schedulerName": self.scheduler_name,
            "preemptibleClass": self.preemptible_class,
            "webhookName": self.webhook_name,
            "caCertificate": self.ca_certificate,
            "grafanaUrl": self.grafana_url,
            "grafanaPortForward": self.grafana_port_forward,
            "grafanaAdminPassword": self.grafana_admin_password,
            "gpuNodes": self.gpu_nodes,
            "compactionSchedule": self.compaction_schedule,
            # What a mirror must hold before an air-gapped install.
            "images": self.images,
            "charts": self.charts,
        }
        self.register_outputs(self.outputs)


def required_images(inputs: ComponentInputs) -> list[str]:
    """The images the program and the two charts run, as the nodes will pull them (from the
    mirror, when set)."""
    compaction_images = []
    if (compaction := inputs.compaction).compaction.enabled:
        compaction_images.append(compaction.image(compaction.compaction.image))
        if compaction.compaction.plan_threshold:
            compaction_images.append(compaction.image(compaction.compaction.plan_image))
    if (teams_ := inputs.teams).teams.enabled:
        compaction_images.append(teams_.image(teams_.teams.kueue.image))
    operator = inputs.gpu_operator
    return sorted({inputs.scheduler.scheduler_image,
                   inputs.admission.image(inputs.admission.admission.opa), *compaction_images,
                   *(image.ref(operator) for image in gpu_operator.chart_images(operator)),
                   *monitoring.chart_images(inputs.monitoring)})


def required_charts(inputs: ComponentInputs) -> list[str]:
    releases = [(gpu_operator.CHART, inputs.gpu_operator.gpu_operator),
                (monitoring.CHART, inputs.monitoring.monitoring)]
    if inputs.teams.teams.enabled:
        releases.append((teams.CHART, inputs.teams.teams.kueue))
    return [charts.chart_reference(chart, release.chart_version, release.repository,
                                   release.chart_path) for chart, release in releases]


def check_cluster(settings: StackSettings) -> None:
    """In a preview (and the preview step of `pulumi up`): the stack's cluster must be reachable,
    and a version skew between it and kubernetesVersion is reported as a warning."""
    try:
        warnings = cluster_version.preview_warnings(settings)
    except cluster_version.ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    for warning in warnings:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: {warning}")


def platform_args(settings: StackSettings, secret_keys: Collection[str] = ()
                  ) -> GpuPlatformArgs:
    """The platform's args from a stack's settings and the sections stored as secrets."""
    return GpuPlatformArgs(**dump(settings), secret_sections=sorted(secret_keys))


class ClusterError(Exception):
    """The stack's cluster is not there: raised before anything is declared."""

    def __init__(self, problem: str):
        super().__init__(f"the stack's cluster cannot be reached (nothing was deployed):\n"
                         f"  - {problem}")


def deploy(config: Mapping[str, Any], secret_keys: Collection[str] = ()) -> GpuPlatform:
    """Validate the settings, check the cluster (in previews), then declare the platform and
    export its outputs."""
    # A secret where values reach the cluster in plain text is named before anything else.
    check_secret_keys(secret_keys)
    settings = load_settings(config)
    # Extra chart values that clash are named as the stack file names them.
    check_chart_values(component_inputs(component_args(settings)), STACK)
    for warning in retired_settings(config):
        pulumi.log.warn(warning)
    if pulumi.runtime.is_dry_run():
        check_cluster(settings)
    platform = GpuPlatform(PLATFORM_NAME, platform_args(settings, secret_keys))
    for key, value in platform.outputs.items():
        pulumi.export(key, value)
    return platform
