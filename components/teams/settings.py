"""The `teams` section of the stack settings."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, model_validator

from ..base.facts import (
    FRAMEWORK_INTEGRATIONS,
    GFD_CLIQUE_LABEL,
    NVIDIA_RESOURCES,
    TOPOGRAPH_ACCELERATOR_LABEL,
    kueue_controller_user,
    service_account_user,
)
from ..base.model import (
    ImageSettings,
    Labels,
    Model,
    ReleaseProtection,
    refuse_chart_settings,
)
from ..base.validation import (
    ChartPath,
    DnsLabel,
    DnsSubdomain,
    GoDuration,
    Invalid,
    NamespaceNames,
    OwnNamespace,
    Repository,
    chart_path_field,
    chart_repository_field,
    chart_version_field,
    check_qualified_name,
    extra_values_field,
)

# What Kueue calls things, as the platform uses them (sigs.k8s.io/kueue v0.19.2), and the
# oldest Kubernetes it supports.
KUEUE_MIN_KUBERNETES = (1, 34)
# Who creates and starts the Jobs, JobSets, RayClusters and pods of a workload Kueue admitted,
# as the frameworks' release manifests install their controllers: JobSet v0.12.0
# (config/default), Kubeflow Trainer v2.2.1 (manifests/base/manager), KubeRay ray-operator
# v1.6.2 (config/default: namespace default; its chart installs into the release's namespace),
# the Kubeflow training operator v1.9.3 (manifests/overlays/standalone).
WORKLOAD_CONTROLLERS = (
    "system:serviceaccount:jobset-system:jobset-controller-manager",
    "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
    "system:serviceaccount:default:kuberay-operator",
    "system:serviceaccount:kubeflow:training-operator",
)
# The ServiceAccount Kueue's own manifests run it as (config/default: namePrefix `kueue-` on
# config/components/manager's `controller-manager`), in their namespace kueue-system.
KUEUE_MANIFESTS_SERVICE_ACCOUNT = "kueue-controller-manager"
# The flavor every team's pods are counted on (teams/queues.py says why): no GPU flavor may
# take its name.
POD_FLAVOR = "any-node"


class FlavorSettings(Model):
    """A kind of GPU node the teams' quotas are counted on (a Kueue ResourceFlavor)."""

    name: DnsLabel = Field(description="The flavor's name, as the teams' quotas name it.")
    node_labels: Labels = Field(
        default_factory=dict,
        description="Labels of this flavor's GPU nodes, such as GPU Feature Discovery's "
                    "`nvidia.com/gpu.product` for one GPU model: a workload admitted on the "
                    "flavor runs only there. Empty: every GPU node.")


class WorkloadPriorityClassSettings(Model):
    """A priority of workloads within a team (a Kueue WorkloadPriorityClass)."""

    name: DnsLabel = Field(description="The class's name: a workload names it with the label "
                                       "`kueue.x-k8s.io/priority-class`.")
    value: int = Field(ge=-1_000_000_000, le=1_000_000_000,
                       description="Its priority: when the team's quota is full, a workload "
                                   "of a higher class preempts the team's workloads of lower "
                                   "ones. A workload that names no class has 0.")
    description: str = Field(default="", description="What the class is for.")


# The node's own level: Kueue allows it only as the lowest level of a Topology.
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Kueue v0.19.2 accepts at most 16 levels in a Topology.
MAX_TOPOLOGY_LEVELS = 16
# The network labels that tools and clouds put on nodes, from the largest domain down (the node
# itself is appended). Where each is documented: docs/concepts/topology.md#presets.
TOPOLOGY_PRESETS: dict[str, tuple[str, ...]] = {
    "topograph": ("network.topology.nvidia.com/core", "network.topology.nvidia.com/spine",
                  "network.topology.nvidia.com/leaf", TOPOGRAPH_ACCELERATOR_LABEL),
    "gke": ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
            "cloud.google.com/gce-topology-host"),
    "eks": ("topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
            "topology.k8s.aws/network-node-layer-3"),
    "nvlink-clique": (GFD_CLIQUE_LABEL,),
}


class TopologySettings(Model):
    """The levels of the GPU nodes' network, each a node label, from the largest domain to the
    node: a job can require or prefer one domain of a level for all its pods."""

    preset: Literal["none", "topograph", "gke", "eks", "nvlink-clique"] = Field(
        default="none",
        description="The labels a tool or cloud puts on the nodes: `topograph` (NVIDIA "
                    "topograph: core, spine, leaf switch, accelerator domain), `gke` (block, "
                    "subblock, host), `eks` (network node layers 1..3), `nvlink-clique` (GPU "
                    "Feature Discovery's multi-node NVLink clique). `none`: the levels "
                    "`levels` lists, or no topology.")
    levels: list[str] = Field(
        default_factory=list,
        description="The node labels of the levels, from the largest domain (a block, a "
                    "rack) to the smallest, with `preset: none`. The node itself "
                    "(`kubernetes.io/hostname`) is always the last level; empty, with no "
                    "preset: no topology, and Kueue does not choose nodes.")

    @model_validator(mode="after")
    def levels_form_a_hierarchy(self) -> TopologySettings:
        if self.preset != "none" and self.levels:
            raise Invalid(f"levels listed next to `preset: {self.preset}`",
                          "a preset, or levels with `preset: none`", at=("levels",),
                          value=self.levels, has_value=True)
        for index, label in enumerate(self.levels):
            check_qualified_name(label, "node label key", at=("levels", index))
            if label in self.levels[:index]:
                raise Invalid("a level listed twice", "each node label once",
                              at=("levels", index), value=label, has_value=True)
            if label == HOSTNAME_LABEL and index != len(self.levels) - 1:
                raise Invalid("the node's own label above another level",
                              f"{HOSTNAME_LABEL} only last (it is added there anyway)",
                              at=("levels", index), value=label, has_value=True)
        if len(self.node_levels) > MAX_TOPOLOGY_LEVELS:
            raise Invalid("more levels than Kueue allows",
                          f"at most {MAX_TOPOLOGY_LEVELS - 1} above the node",
                          at=("levels",), value=self.levels, has_value=True)
        return self

    @property
    def node_levels(self) -> list[str]:
        """The levels as Kueue's Topology lists them, the node last; empty: no topology."""
        levels = list(TOPOLOGY_PRESETS.get(self.preset, ())) or list(self.levels)
        if not levels:
            return []
        return levels if levels[-1] == HOSTNAME_LABEL else [*levels, HOSTNAME_LABEL]


Quota = dict[str, dict[str, int]]


# Kueue's queueing strategies (ClusterQueue spec.queueingStrategy) and the teams' default.
QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]
QUEUEING_STRATEGIES: tuple[str, ...] = get_args(QueueingStrategy)
DEFAULT_QUEUEING_STRATEGY: QueueingStrategy = "BestEffortFIFO"


class TeamSettings(Model):
    """A team: its namespaces, its share of the GPUs, and how it shares them."""

    name: DnsLabel = Field(description="The team's name; also its ClusterQueue's.")
    namespaces: NamespaceNames = Field(
        min_length=1,
        description="The team's namespaces: GPU workloads there are queued for the team's "
                    "quota. The program creates them if need be, and leaves them in place when "
                    "the team or the stack is removed.")
    quota: Quota = Field(
        min_length=1,
        description="The team's nominal quota: per flavor, per GPU resource, how many it is "
                    "guaranteed, e.g. `{gpu: {nvidia.com/gpu: 16}}`. A resource counts as "
                    "the dashboard counts it: with time-slicing, `nvidia.com/gpu` counts "
                    "slices; with the mixed MIG strategy, each `nvidia.com/mig-<profile>` "
                    "counts slices of that profile. CPU and memory are not counted (see "
                    "docs/concepts/teams.md#what-a-quota-counts).")
    borrowing_limit: Quota = Field(
        default_factory=dict,
        description="How many more than its quota the team may borrow from other teams' idle "
                    "quota, per flavor and resource; unset: as many as are idle.")
    lending_limit: Quota = Field(
        default_factory=dict,
        description="How much of its quota other teams may borrow while the team leaves it "
                    "idle, per flavor and resource; unset: all of it. The team gets what it "
                    "lent back when it needs it: the borrowers' workloads are preempted.")
    fair_sharing_weight: int = Field(
        default=1, ge=1, le=1000,
        description="The team's weight when every team wants more than it has: GPUs beyond "
                    "the nominal quotas are shared in proportion to the weights (1..1000).")
    queueing_strategy: QueueingStrategy = Field(
        default=DEFAULT_QUEUEING_STRATEGY,
        description="How the team's queue lets its workloads pass one another (Kueue's "
                    "queueingStrategy): `BestEffortFIFO` admits a workload that fits while an "
                    "older one does not; `StrictFIFO` holds every workload behind the oldest "
                    "of the highest priority until that one is admitted. See "
                    "docs/concepts/teams.md#queueing-strategy.")

    @model_validator(mode="after")
    def limits_within_the_quota(self) -> TeamSettings:
        for key, limits in (("borrowingLimit", self.borrowing_limit),
                            ("lendingLimit", self.lending_limit)):
            for flavor, resources in limits.items():
                for resource, limit in resources.items():
                    nominal = self.quota.get(flavor, {}).get(resource)
                    if nominal is None:
                        raise Invalid("a limit of a resource the team has no quota of",
                                      "flavors and resources of `quota`",
                                      at=(key, flavor, resource), value=limit, has_value=True)
                    if limit < 0 or (key == "lendingLimit" and limit > nominal):
                        raise Invalid("a lending limit is part of the quota" if limit >= 0
                                      else "a negative limit",
                                      f"0..{nominal}" if key == "lendingLimit" else "0 or more",
                                      at=(key, flavor, resource), value=limit, has_value=True)
        for flavor, resources in self.quota.items():
            for resource, count in resources.items():
                if count < 0:
                    raise Invalid("a negative quota", "0 or more",
                                  at=("quota", flavor, resource), value=count, has_value=True)
        return self


class ExistingKueueSettings(Model):
    """The Kueue the cluster already runs, which the teams' queues go into (`mode: existing`)."""

    service_account: DnsSubdomain = Field(
        default=KUEUE_MANIFESTS_SERVICE_ACCOUNT,
        description="The ServiceAccount it runs as, in `teams.kueue.namespace` (Kueue's own "
                    "manifests name it so): the admission policy lets only this identity lift "
                    "Kueue's gates and start a team's Jobs, and a preview finds Kueue's "
                    "Deployment, its version and its Configuration by it.")


# Settings of the chart the program installs, which say nothing with `mode: existing`.
# (`releaseName` still does: the teams' mixin finds Kueue's metrics Service and Deployment by it.)
CHART_ONLY = ("repository", "chartVersion", "chartPath", "image", "replicas", "protection",
              "extraValues")


class KueueSettings(Model):
    """Kueue: its pinned Helm release, or the Kueue the cluster already runs."""

    mode: Literal["install", "existing"] = Field(
        default="install",
        description="`install`: the program installs Kueue from its pinned chart in "
                    "`teams.kueue.namespace`. `existing`: the cluster already runs a supported "
                    "Kueue there; the program installs no chart and declares only the teams' "
                    "flavors, queues and priorities into it, and a preview refuses a Kueue of "
                    "another version or whose Configuration lacks what the teams need (see "
                    "docs/operators/teams.md#using-the-clusters-kueue).")
    existing: ExistingKueueSettings = Field(
        default_factory=ExistingKueueSettings,
        description="With `mode: existing`: the Kueue the teams use.")
    release_name: DnsLabel = Field(
        default="kueue",
        description="Helm release name; with `mode: existing`, the cluster's Kueue's, by whose "
                    "chart names the platform's scrape and the KueueUnavailable alert find its "
                    "metrics Service and Deployment.")
    namespace: OwnNamespace = Field(
        default="kueue-system",
        description="Namespace of Kueue: where the program installs it, or where the cluster's "
                    "Kueue runs (`mode: existing`; Kueue's own manifests use this one).")
    repository: Repository = chart_repository_field("oci://registry.k8s.io/kueue/charts")
    chart_version: str = chart_version_field("0.19.2")
    chart_path: ChartPath = chart_path_field()
    image: ImageSettings = Field(
        default_factory=lambda: ImageSettings(repository="registry.k8s.io/kueue/kueue",
                                              tag="v0.19.2"),
        description="Kueue's image (pinned; the integration suite builds this version).")
    replicas: int = Field(
        default=2, ge=1, le=5,
        description="Kueue pods (1..5), kept available by a PodDisruptionBudget: pods in team "
                    "namespaces cannot be created while none answers its webhooks.")
    protection: ReleaseProtection = Field(
        default_factory=lambda: ReleaseProtection(protect=True),
        description="Protected by default: the chart holds Kueue's CRDs, so uninstalling it "
                    "deletes every queue and the workloads queued in them.")
    extra_values: dict[str, Any] = extra_values_field()

    @model_validator(mode="after")
    def chart_settings_need_the_chart(self) -> KueueSettings:
        if self.mode == "existing":
            refuse_chart_settings(self, CHART_ONLY, "Kueue", "mode: existing",
                                  "the cluster's Kueue keeps its own")
        return self

    @property
    def installs_chart(self) -> bool:
        """Whether the program installs Kueue (else it uses the cluster's)."""
        return self.mode == "install"

    @property
    def controller_user(self) -> str:
        """Kueue's identity in its requests to the API server: its ServiceAccount's user name."""
        if self.installs_chart:
            return kueue_controller_user(self.namespace, self.release_name)
        return service_account_user(self.namespace, self.existing.service_account)


class TeamsSettings(Model):
    """Teams that share the GPUs through Kueue: a quota per team, borrowing and reclaim, fair
    sharing and all-or-nothing admission."""

    enabled: bool = Field(
        default=False,
        description="Run Kueue and give each team a queue with its quota. Needs Kubernetes "
                    "1.34 or newer. See docs/concepts/teams.md.")
    kueue: KueueSettings = Field(default_factory=KueueSettings,
                                 description="Kueue's release.")
    cohort: DnsLabel = Field(default="gpu-platform",
                             description="The Kueue cohort the teams' queues form: they "
                                         "borrow from and lend to each other.")
    flavors: list[FlavorSettings] = Field(
        default_factory=lambda: [FlavorSettings(name="gpu")], min_length=1,
        description="The kinds of GPU node quotas are counted on, one per GPU model where "
                    "the nodes differ. A flavor's workloads tolerate the GPU taints.")
    teams: list[TeamSettings] = Field(default_factory=list,
                                      description="The teams (required when on).")
    topology: TopologySettings = Field(
        default_factory=TopologySettings,
        description="The network levels of the GPU nodes: with a topology, Kueue admits a "
                    "job that requires or prefers one domain of a level only where all its "
                    "pods fit, and chooses every pod's node (docs/concepts/topology.md). On "
                    "the device plugin path only: on the DRA path Kueue counts no GPU by "
                    "node.")
    gpu_pods_outside_teams: Literal["refuse", "admit"] = Field(
        default="refuse",
        description="A GPU pod in a namespace of no team: `refuse` (its GPUs would count "
                    "against no quota), or `admit` as without teams, for a migration period.")
    wait_for_pods_ready: GoDuration = Field(
        default="10m",
        description="All-or-nothing admission: a workload whose pods are not all running "
                    "this long after it was admitted gives its GPUs back and is queued again "
                    "(Go duration).")
    frameworks: list[str] = Field(
        default_factory=lambda: [f.name for f in FRAMEWORK_INTEGRATIONS],
        description="Kueue's integrations of the frameworks' kinds (Kueue's names: "
                    + ", ".join(f"`{f.name}`" for f in FRAMEWORK_INTEGRATIONS)
                    + "), besides Jobs, pods, Deployments and StatefulSets, which are always "
                    "on. Kueue admits such a workload whole, and only Kueue starts one in a "
                    "team namespace. The platform installs none of their CRDs or controllers; "
                    "an integration whose CRD the cluster lacks starts once the CRD appears, "
                    "and the preview names it. A framework left out is queued pod by pod.")
    workload_controllers: list[str] = Field(
        default_factory=lambda: list(WORKLOAD_CONTROLLERS),
        description="Users that create or start a team's Jobs, JobSets, RayClusters and pods "
                    "for a workload Kueue already admitted, which Kueue then leaves running: "
                    "the controllers of JobSet, Kubeflow Trainer, KubeRay and the Kubeflow "
                    "training operator, as their release manifests name them (change a "
                    "namespace where yours runs elsewhere). Anyone else's workload of those "
                    "kinds in a team namespace must start suspended and is started by Kueue "
                    "alone.")
    workload_priority_classes: list[WorkloadPriorityClassSettings] = Field(
        default_factory=lambda: [
            WorkloadPriorityClassSettings(name="team-high", value=1000,
                                          description="Urgent work of a team."),
            WorkloadPriorityClassSettings(name="team-low", value=-1000,
                                          description="Work a team may postpone.")],
        description="Priorities within a team (Kueue WorkloadPriorityClasses).")

    @model_validator(mode="after")
    def teams_fit_together(self) -> TeamsSettings:
        if self.enabled and not self.teams:
            raise Invalid("teams are on, but none is declared", "at least one team",
                          at=("teams",), value=[], has_value=True)
        known = [f.name for f in FRAMEWORK_INTEGRATIONS]
        for index, framework in enumerate(self.frameworks):
            if framework not in known:
                raise Invalid("not a Kueue integration the platform knows",
                              f"one of {', '.join(known)}", at=("frameworks", index),
                              value=framework, has_value=True)
        flavors = [f.name for f in self.flavors]
        for index, name in enumerate(flavors):
            if name == POD_FLAVOR:
                raise Invalid("the name of the flavor the platform counts every team's pods on",
                              "another name", at=("flavors", index, "name"), value=name,
                              has_value=True)
            if name in flavors[:index]:
                raise Invalid("flavor declared twice", "unique names", at=("flavors", index),
                              value=name, has_value=True)
        owners: dict[str, str] = {}
        for index, team in enumerate(self.teams):
            if team.name in [t.name for t in self.teams[:index]]:
                raise Invalid("team declared twice", "unique names", at=("teams", index, "name"),
                              value=team.name, has_value=True)
            for namespace in team.namespaces:
                if namespace in owners:
                    raise Invalid(f"already a namespace of team {owners[namespace]}",
                                  "each namespace in one team",
                                  at=("teams", index, "namespaces"), value=namespace,
                                  has_value=True)
                owners[namespace] = team.name
            for flavor, resources in team.quota.items():
                if flavor not in flavors:
                    raise Invalid("no such flavor", f"one of {', '.join(flavors)}",
                                  at=("teams", index, "quota", flavor), value=resources,
                                  has_value=True)
                for resource in resources:
                    if not resource.startswith(NVIDIA_RESOURCES.rstrip("*")):
                        raise Invalid("teams' quotas count GPUs only",
                                      "NVIDIA's resources: nvidia.com/gpu, "
                                      "nvidia.com/mig-<profile>, ...",
                                      at=("teams", index, "quota", flavor, resource),
                                      value=resources[resource], has_value=True)
        return self

    @property
    def team_namespaces(self) -> dict[str, str]:
        """Each team namespace, with its team."""
        return {namespace: team.name for team in self.teams for namespace in team.namespaces}
