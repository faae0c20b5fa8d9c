"""A stack's settings: every section of the stack file, each the section of its component,
and the rules that span sections."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ..base.facts import (
    DRA_MIN_KUBERNETES,
    GPU_RESOURCE,
    RESERVED_NAMESPACES,
    mig_resource,
    resource_matches,
)
from ..base.model import (
    KubernetesVersion,
    Model,
    RegistryMirror,
    kubernetes_version_field,
    minor_release,
    mirror_field,
    section,
    to_snake,
)
from ..base.validation import CONFIG_NAMESPACE, Invalid, duration_seconds
from ..binpack_scheduler.preemption import dra_preemption_warning
from ..binpack_scheduler.settings import SchedulerSettings
from ..gpu_compaction.scored_share import scored_share_warning
from ..gpu_compaction.settings import CompactionSettings
from ..gpu_nodes.settings import GpuNodesSettings
from ..gpu_operator.settings import GpuOperatorSettings
from ..gpu_reclaim.settings import ReclaimSettings
from ..gpu_remediation.settings import RemediationSettings, unscraped_faults_warning
from ..gpu_reservation.settings import ReservationSettings
from ..monitoring.settings import MonitoringSettings
from ..opa_admission.settings import AdmissionSettings
from ..teams.settings import KUEUE_MIN_KUBERNETES, TeamsSettings

# What `pulumi preview` finds running on the cluster beside what the stack would install, each
# by the id its message names (components/preview/conflicts.py looks for each).
ConflictId = Literal["other-device-plugin", "preinstalled-driver", "preinstalled-toolkit",
                     "other-prometheus-operator", "other-node-exporter", "other-kueue",
                     "untainted-gpu-nodes", "more-nodes-than-quota"]


class ClusterSettings(Model):
    """The cluster the stack deploys to: a context of a kubeconfig."""

    context: str = Field(
        description="Context of the stack's cluster in the kubeconfig (required): the program "
                    "never deploys to whatever context happens to be current.")
    kubeconfig: str | None = Field(
        default=None,
        description="Path of the kubeconfig file; unset: `$KUBECONFIG`, else "
                    "`~/.kube/config`, as kubectl reads them.")
    acknowledged_conflicts: list[ConflictId] = Field(
        default_factory=list,
        description="Conflicts with what the cluster already runs that `pulumi preview` is to "
                    "report without failing, by the ids its message names: for what you have "
                    "decided to install beside. See "
                    "docs/operators/adopting.md#before-you-install-on-a-live-cluster.")


class StackSettings(Model):
    """A stack's settings: every section of the stack file."""

    cluster: ClusterSettings = section(ClusterSettings, required=True)
    image_registry_mirror: RegistryMirror = mirror_field()
    kubernetes_version: KubernetesVersion = kubernetes_version_field()
    gpu_nodes: GpuNodesSettings = section(GpuNodesSettings, required=True)
    gpu_operator: GpuOperatorSettings = section(GpuOperatorSettings)
    scheduler: SchedulerSettings = section(SchedulerSettings)
    admission: AdmissionSettings = section(AdmissionSettings)
    monitoring: MonitoringSettings = section(MonitoringSettings)
    compaction: CompactionSettings = section(CompactionSettings)
    teams: TeamsSettings = section(TeamsSettings)
    reclaim: ReclaimSettings = section(ReclaimSettings)
    reservation: ReservationSettings = section(ReservationSettings)
    remediation: RemediationSettings = section(RemediationSettings)


    @model_validator(mode="after")
    def namespaces_are_apart(self) -> StackSettings:
        owners: dict[str, str] = {}
        for at, namespace in self.platform_namespaces:
            if namespace in owners:
                raise Invalid(f"already used by {owners[namespace]}",
                              "a separate namespace per component", at=at, value=namespace,
                              has_value=True)
            owners[namespace] = ".".join(at)
        for index, team in enumerate(self.teams.teams if self.teams.enabled else []):
            for namespace in team.namespaces:
                clash = owners.get(namespace) or ("admission.exemptNamespaces" if namespace in
                                                  self.admission.exempt_namespaces else None)
                if clash:
                    raise Invalid(f"already {clash}: a team's GPU pods must be checked",
                                  "a namespace of the team's own",
                                  at=("teams", "teams", index, "namespaces"), value=namespace,
                                  has_value=True)
        return self

    @model_validator(mode="after")
    def prometheus_known_to_its_readers(self) -> StackSettings:
        """Reclaim and remediation query Prometheus: with an existing stack, its address is
        theirs to give."""
        if self.monitoring.stack != "existing":
            return self
        for reader, reads, enabled in (
                ("reclaim", "GPU activity", self.reclaim.enabled),
                ("remediation", "GPU faults", self.remediation.enabled)):
            if enabled and getattr(self, reader).prometheus_url is None:
                raise Invalid(f"{reader} reads {reads} from Prometheus, and the existing "
                              "monitoring stack's address is not known to the program",
                              "the URL of its Prometheus HTTP API as its pod reaches it, e.g. "
                              "http://prometheus-operated.<monitoring.namespace>.svc:9090",
                              at=(reader, "prometheusUrl"), value=None, has_value=True)
        return self

    @property
    def platform_namespaces(self) -> list[tuple[tuple[str, ...], str]]:
        """(setting, namespace) of every namespace of the platform's own components."""
        sections: list[tuple[str, ...]] = [(section,) for section in (
            "gpuOperator", "scheduler", "admission",
            "monitoring")]
        if self.compaction.enabled:
            sections.append(("compaction",))
        if self.teams.enabled:
            sections.append(("teams", "kueue"))
        if self.reclaim.enabled:
            sections.append(("reclaim",))
        if self.reservation.enabled:
            sections.append(("reservation",))
        if self.remediation.enabled:
            sections.append(("remediation",))
        found = []
        for path in sections:
            section: Any = self
            for key in path:
                section = getattr(section, to_snake(key))
            found.append(((*path, "namespace"), section.namespace))
        return found

    @property
    def reclaim_exempt_namespaces(self) -> dict[str, str]:
        """Namespaces idle reclaim never touches, each with why: Kubernetes' own, the
        platform's own and admission's exempt namespaces."""
        exempt = {namespace: "Kubernetes' own" for namespace in RESERVED_NAMESPACES
                  if namespace != "default"}
        exempt |= {namespace: "admission.exemptNamespaces"
                   for namespace in self.admission.exempt_namespaces}
        return exempt | {namespace: ".".join(at) for at, namespace in self.platform_namespaces}

    @model_validator(mode="after")
    def dra_needs_kubernetes_1_37(self) -> StackSettings:
        if (self.gpu_operator.gpu_path == "dra"
                and minor_release(self.kubernetes_version) < DRA_MIN_KUBERNETES):
            raise Invalid("the DRA path serves nvidia.com/gpu through a DeviceClass's "
                          "extendedResourceName, GA from Kubernetes 1.37; the cluster is "
                          f"{self.kubernetes_version}", "devicePlugin, or kubernetesVersion "
                          "1.37.0 or newer", at=("gpuOperator", "gpuPath"), value="dra",
                          has_value=True)
        return self

    @model_validator(mode="after")
    def topology_counts_gpus_where_nodes_list_them(self) -> StackSettings:
        if self.teams.enabled and self.teams.topology.node_levels \
                and self.gpu_operator.gpu_path == "dra":
            raise Invalid("Kueue's topology-aware scheduling (v0.19) counts a node's GPUs from "
                          "its status' allocatable, which on the DRA path (gpuOperator.gpuPath: "
                          "dra) lists none, so no team workload that asks for nvidia.com/gpu "
                          "would be admitted",
                          "no topology on the DRA path (a ComputeDomain's pods select an NVLink "
                          "clique with a nodeSelector), or gpuOperator.gpuPath devicePlugin",
                          at=("teams", "topology"),
                          value=self.teams.topology.preset if self.teams.topology.preset != "none"
                          else self.teams.topology.levels, has_value=True)
        return self

    @model_validator(mode="after")
    def compaction_counts_gpus_where_nodes_list_them(self) -> StackSettings:
        if self.compaction.enabled and self.gpu_operator.gpu_path == "dra":
            raise Invalid("the descheduler and the compaction plan count a node's GPUs from "
                          "its status' allocatable, which on the DRA path lists none "
                          "(gpuOperator.gpuPath: dra), so no run would empty a node",
                          "false, or gpuOperator.gpuPath devicePlugin",
                          at=("compaction", "enabled"), value=True, has_value=True)
        return self

    @property
    def warnings(self) -> list[str]:
        """What the settings declare that will not do all it says, named in every run."""
        found = [dra_preemption_warning(self.scheduler.preemptible_class,
                                        self.gpu_operator.gpu_path, self.kubernetes_version),
                 scored_share_warning(self.compaction.enabled,
                                      self.scheduler.percentage_of_nodes_to_score),
                 self._unchecked_quota_warning(),
                 unscraped_faults_warning(self.remediation, bool(
                     ((self.gpu_operator.extra_values.get("dcgmExporter") or {}).get("config")
                      or {}).get("name")))]
        return [f"{CONFIG_NAMESPACE}: {warning}" for warning in found if warning]

    def _unchecked_quota_warning(self) -> str | None:
        nodes = self.gpu_nodes
        if not self.teams.enabled or (nodes.gpus_per_node and nodes.node_count):
            return None
        missing = " and ".join(
            f"gpuNodes.{key}" for key, value in (("maxNodes", nodes.node_count),
                                                 ("gpusPerNode", nodes.gpus_per_node))
            if not value)
        return (f"the teams' quotas of {GPU_RESOURCE} (adding up to {self.teams_gpu_quota}) "
                f"were not checked against what the GPU nodes hold: {missing} not set; set "
                f"{'them' if ' and ' in missing else 'it'} to have a quota beyond the nodes "
                f"refused")

    @model_validator(mode="after")
    def teams_run_where_kueue_does(self) -> StackSettings:
        if not self.teams.enabled:
            return self
        if minor_release(self.kubernetes_version) < KUEUE_MIN_KUBERNETES:
            raise Invalid(f"Kueue {self.teams.kueue.chart_version} supports Kubernetes 1.34 "
                          f"and newer; the cluster is {self.kubernetes_version}",
                          "false, or kubernetesVersion 1.34.0 or newer", at=("teams", "enabled"),
                          value=True, has_value=True)
        mig = set(self.gpu_operator.mig.resources)
        for index, team in enumerate(self.teams.teams):
            for flavor, resources in team.quota.items():
                for resource, count in resources.items():
                    at = ("teams", "teams", index, "quota", flavor, resource)
                    if not any(resource_matches(resource, pattern)
                               for pattern in self.admission.gpu_resource_names):
                        raise Invalid("pods that ask for it are not GPU pods to the admission "
                                      "policy, so nothing keeps them in the queue",
                                      "a resource of admission.gpuResourceNames", at=at,
                                      value=count, has_value=True)
                    if resource.startswith(mig_resource("")) and resource not in mig:
                        raise Invalid("the GPU nodes advertise no such MIG resource",
                                      f"one of {', '.join(sorted(mig)) or '(none: the mixed '}"
                                      f"{'' if mig else 'MIG strategy is off)'}", at=at,
                                      value=count, has_value=True)
        return self

    @property
    def teams_gpu_quota(self) -> int:
        """The teams' quotas of nvidia.com/gpu, added up."""
        return sum(resources.get(GPU_RESOURCE, 0) for team in self.teams.teams
                   for resources in team.quota.values())

    @model_validator(mode="after")
    def quotas_fit_the_gpu_nodes(self) -> StackSettings:
        nodes = self.gpu_nodes
        if not (self.teams.enabled and nodes.gpus_per_node and nodes.node_count):
            return self
        slices = self.gpu_operator.time_slicing.replicas or 1
        held = nodes.node_count * nodes.gpus_per_node * slices
        quota = self.teams_gpu_quota
        if quota > held:
            per_gpu = f" × {slices} slices" if slices > 1 else ""
            which = ("the named GPU nodes hold" if nodes.tainted_by == "program"
                     else "the GPU node pools hold at most (gpuNodes.maxNodes)")
            raise Invalid(f"the teams' quotas of {GPU_RESOURCE} add up to {quota}, more than "
                          f"{which}: {nodes.node_count} nodes × {nodes.gpus_per_node} "
                          f"GPUs{per_gpu} = {held}",
                          f"quotas that add up to {held} or less, or more GPU nodes",
                          at=("teams", "teams"), value=quota, has_value=True)
        return self

    @model_validator(mode="after")
    def quota_covers_the_gpu_nodes(self) -> StackSettings:
        if len(self.gpu_nodes.names) > self.gpu_operator.max_cluster_nodes:
            raise Invalid(f"the cluster has at least the {len(self.gpu_nodes.names)} GPU nodes "
                          "named in gpuNodes.names", f"{len(self.gpu_nodes.names)} or more",
                          at=("gpuOperator", "maxClusterNodes"),
                          value=self.gpu_operator.max_cluster_nodes, has_value=True)
        return self

    @model_validator(mode="after")
    def monitoring_has_an_exporter(self) -> StackSettings:
        if not self.gpu_operator.dcgm_exporter.enabled:
            raise Invalid("the GPU dashboard and ServiceMonitor read the DCGM exporter",
                          "true", at=("gpuOperator", "dcgmExporter", "enabled"), value=False,
                          has_value=True)
        return self

    @model_validator(mode="after")
    def scheduler_scores_gpus(self) -> StackSettings:
        scored = {r.name for r in self.scheduler.scoring_strategy.resources}
        if not any(resource_matches(name, pattern) for name in scored
                   for pattern in self.admission.gpu_resource_names):
            raise Invalid("the binpack scheduler must score GPUs to pack them",
                          f"a resource list that includes {GPU_RESOURCE}",
                          at=("scheduler", "scoringStrategy", "resources"),
                          value=sorted(scored), has_value=True)
        return self

    @model_validator(mode="after")
    def preemptible_pods_are_admitted(self) -> StackSettings:
        preemptible = self.scheduler.preemptible_class
        if preemptible.enabled and preemptible.value > self.admission.max_gpu_pod_priority:
            raise Invalid(f"GPU pods in the preemptible class (priority {preemptible.value}) "
                          "would be refused", f"at least {preemptible.value}",
                          at=("admission", "maxGpuPodPriority"),
                          value=self.admission.max_gpu_pod_priority, has_value=True)
        return self

    @model_validator(mode="after")
    def reclaim_applies_where_it_may(self) -> StackSettings:
        reclaim = self.reclaim
        if not reclaim.enabled:
            return self
        teams = [team.name for team in self.teams.teams] if self.teams.enabled else []
        for index, team in enumerate(reclaim.teams):
            if team not in teams:
                raise Invalid("no such team" + ("" if self.teams.enabled else
                                                " (teams.enabled is false)"),
                              f"one of {', '.join(teams)}" if teams else
                              "no teams, or teams.enabled: true with this team",
                              at=("reclaim", "teams", index), value=team, has_value=True)
        exempt = self.reclaim_exempt_namespaces
        for index, namespace in enumerate(reclaim.namespaces):
            if namespace in exempt:
                raise Invalid(f"a namespace reclaim never touches ({exempt[namespace]})",
                              "a namespace of GPU workloads, not exempt and not the "
                              "platform's own", at=("reclaim", "namespaces", index),
                              value=namespace, has_value=True)
        team_of = self.teams.team_namespaces if self.teams.enabled else {}
        opted_in = set(reclaim.namespaces) | {namespace for namespace, team in team_of.items()
                                              if team in reclaim.teams}
        for index, policy in enumerate(reclaim.policies):
            for position, namespace in enumerate(policy.namespaces):
                at = ("reclaim", "policies", index, "namespaces", position)
                if namespace not in opted_in:
                    raise Invalid("a namespace that did not opt in to reclaim",
                                  "a namespace of reclaim.namespaces or of a team in "
                                  "reclaim.teams", at=at, value=namespace, has_value=True)
                # Another policy through the namespace's team, or one naming it before.
                others = [(other, how) for other, how in reclaim.policies_applying(
                    namespace, team_of.get(namespace))
                    if other != index and (how != "by name" or other < index)]
                if others:
                    other, how = others[0]
                    raise Invalid(f"a namespace with a policy already (reclaim.policies"
                                  f"[{other}], {how})", "one policy per namespace", at=at,
                                  value=namespace, has_value=True)
        monitoring = self.monitoring
        if (monitoring.stack == "install"
                and duration_seconds(reclaim.idle_for) > duration_seconds(monitoring.retention)):
            raise Invalid(f"longer than Prometheus keeps samples (monitoring.retention, "
                          f"{monitoring.retention})", f"{monitoring.retention} or less",
                          at=("reclaim", "idleFor"), value=reclaim.idle_for, has_value=True)
        return self

    @model_validator(mode="after")
    def receivers_of_teams_that_exist(self) -> StackSettings:
        teams = [team.name for team in self.teams.teams] if self.teams.enabled else []
        for index, receiver in enumerate(self.monitoring.alertmanager.receivers):
            for at, team in enumerate(receiver.teams):
                if team not in teams:
                    raise Invalid("no such team: no alert would carry it",
                                  f"one of {', '.join(teams)}" if teams else
                                  "no teams (teams.enabled is false)",
                                  at=("monitoring", "alertmanager", "receivers", index, "teams",
                                      at), value=team, has_value=True)
        return self
