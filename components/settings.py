"""Stack settings: the schema of the stack file, the single home of every setting.

Settings are read from the stack's config under the `gpu-platform:` namespace, one config key per
section (`gpu-platform:gpuNodes`, `gpu-platform:scheduler`, ...). Keys inside a section are named as
the upstream chart or API names them. Everything is validated here, before any resource is
declared; a bad value raises `SettingsError` naming `gpu-platform:<key>`, the value and what is
allowed. Each section is also what its component takes as its own input (the components' args).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .facts import (
    BINPACK_SCORE_WEIGHTS,
    DEFAULT_SCORE_WEIGHTS,
    DRA_MIN_KUBERNETES,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    MIN_KUBERNETES,
    NVIDIA_DEVICE_CLASS_SUFFIX,
    NVIDIA_RESOURCES,
    mig_resource,
    resource_matches,
    split_registry,
)
from .validation import (
    CRON_FIELD,
    REGISTRY_MIRROR,
    VERSION,
    ChartPath,
    DnsLabel,
    Duration,
    GoDuration,
    ImageTag,
    Invalid,
    NamespaceNames,
    OwnNamespace,
    Repository,
    SettingsError,
    Subject,
    chart_path_field,
    check_dns_label,
    check_label_value,
    check_qualified_name,
    describe,
    go_duration_seconds,
    is_dns_subdomain,
    is_label_value,
    is_qualified_name,
)

CONFIG_NAMESPACE = "gpu-platform"
# A stack's settings, as errors name them: `gpu-platform:<section>.<key>`.
STACK = Subject("stack settings", f"{CONFIG_NAMESPACE}:", "nothing was deployed")


class Model(BaseModel):
    """Settings objects: camelCase keys as written in the stack file, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)


def check_kubernetes_version(value: str) -> str:
    match = VERSION.match(value)
    if not match:
        raise Invalid("not a Kubernetes release",
                      "MAJOR.MINOR.PATCH without a leading v, e.g. 1.35.10 (quote it in YAML)")
    if (int(match[1]), int(match[2])) < MIN_KUBERNETES:
        raise Invalid("Kubernetes older than 1.30 is not supported",
                      "1.30.0 or newer (webhook matchConditions are GA from 1.30)")
    return value


def kubernetes_version_field():
    return Field(description="Kubernetes version of the cluster, MAJOR.MINOR.PATCH (required; "
                             "1.30 or newer). Selects the kube-scheduler image.")


def check_registry_mirror(value: str | None) -> str | None:
    if value is not None and not REGISTRY_MIRROR.match(value):
        raise Invalid("not a registry", "host[:port][/path] without a scheme, e.g. "
                      "registry.example.com:5000/mirror")
    return value


KubernetesVersion = Annotated[str, AfterValidator(check_kubernetes_version)]
RegistryMirror = Annotated[str | None, AfterValidator(check_registry_mirror)]


def mirror_field():
    return Field(
        default=None,
        description="Registry (`host[:port][/path]`) that mirrors every image the platform "
                    "runs: each image's registry host is replaced by it, the path kept "
                    "(`nvcr.io/nvidia/gpu-operator` becomes `<mirror>/nvidia/gpu-operator`). "
                    "Unset: the images' own registries. The `images` output lists what to "
                    "mirror.")


def mirrored(mirror: str | None, repository: str) -> str:
    """An image repository as the nodes pull it: from the mirror when one is set."""
    return f"{mirror}/{split_registry(repository)[1]}" if mirror else repository


TaintKey = Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "taint key"))]
TaintValue = Annotated[str, AfterValidator(lambda v: check_label_value(v, "taint value"))]
LabelKey = Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "label key"))]


class Switch(Model):
    """An operand of the GPU Operator chart that can be turned on or off (`<operand>.enabled`)."""

    enabled: bool = Field(description="Whether the chart deploys this operand.")


def switch(enabled: bool, description: str):
    return Field(default_factory=lambda: Switch(enabled=enabled), description=description)


class Taint(Model):
    """A node taint. In the stack file it may also be written as kubectl does:
    `key=value:Effect`."""

    key: TaintKey = Field(description="The taint's key, such as nvidia.com/gpu.")
    value: TaintValue = Field(default="", description="Its value (may be empty).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="What it does to pods that do not tolerate it.")

    @model_validator(mode="before")
    @classmethod
    def parse_kubectl_form(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        spec, sep, effect = data.rpartition(":")
        if not sep:
            raise Invalid("a taint needs an effect",
                          "key=value:Effect or key:Effect, Effect one of NoSchedule, "
                          "PreferNoSchedule, NoExecute")
        key, _, value = spec.partition("=")
        return {"key": key, "value": value, "effect": effect}


    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value \
            else f"{self.key}:{self.effect}"

    def toleration(self) -> dict:
        """The toleration that lets a pod onto a node with this taint."""
        if self.value:
            return {"key": self.key, "operator": "Equal", "value": self.value,
                    "effect": self.effect}
        return {"key": self.key, "operator": "Exists", "effect": self.effect}

    def as_manifest(self) -> dict:
        taint = {"key": self.key, "effect": self.effect}
        if self.value:
            taint["value"] = self.value
        return taint


class GpuNodesSettings(Model):
    """The GPU nodes: which they are, who taints them, and their taints and labels."""

    tainted_by: Literal["program", "nodePool"] = Field(
        default="program",
        description="`program`: the program taints and labels the nodes in `names`. "
                    "`nodePool`: the cluster's GPU node pools register the taint themselves "
                    "(autoscaled or recreated nodes); the program never patches a node and uses "
                    "the taint only for tolerations and the admission policy. See "
                    "docs/concepts/gpu-node-taints.md.")
    names: list[str] = Field(
        default_factory=list,
        description="Names of the Node objects that carry NVIDIA GPUs (unique; required with "
                    "taintedBy: program, not allowed with nodePool).")
    taint: Taint = Field(
        default_factory=lambda: Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),
        description="Taint that keeps pods without a matching toleration off GPU nodes.")
    extra_taints: list[Taint] = Field(
        default_factory=list,
        description="Other taints the GPU nodes must keep. The program owns the whole taint list "
                    "of each GPU node (the list is atomic in the Kubernetes API), so any taint "
                    "not declared here is removed when `forceTaintOwnership` is on.")
    force_taint_ownership: bool = Field(
        default=False,
        description="Take the taint list over when another field manager (kubelet, a cloud "
                    "controller, kubectl) owns it. Off: such a conflict stops `pulumi up` and "
                    "changes nothing.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels added to every GPU node.")
    gpus_per_node: int | None = Field(
        default=None, ge=1, le=64,
        description="How many GPUs each named GPU node has (1..64); unset: not known. With it, "
                    "the teams' quotas of nvidia.com/gpu are checked against what the named "
                    "nodes hold.")

    @field_validator("names")
    @classmethod
    def names_are_node_names(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if not is_dns_subdomain(name):
                raise Invalid("not a valid node name",
                              "a DNS-1123 subdomain: lowercase a-z, 0-9, '-' and '.', at most "
                              "253 characters", at=(index,), value=name, has_value=True)
            if name in names[:index]:
                raise Invalid("node listed twice", "each node once", at=(index,), value=name,
                              has_value=True)
        return names

    @field_validator("labels")
    @classmethod
    def labels_are_valid(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            check_qualified_name(key, "label key", at=(key,))
            check_label_value(value, "label value", at=(key,))
        return labels

    @model_validator(mode="after")
    def names_fit_the_taint_mode(self) -> GpuNodesSettings:
        if self.tainted_by == "program" and not self.names:
            raise Invalid("the program taints the nodes it is given, and none are",
                          "the names of the GPU nodes, or taintedBy: nodePool when the node "
                          "pools set the taint", at=("names",), value=[], has_value=True)
        if self.tainted_by == "nodePool":
            for key, value in (("names", self.names), ("labels", self.labels),
                               ("forceTaintOwnership", self.force_taint_ownership)):
                if value:
                    raise Invalid("with taintedBy: nodePool the program never patches a node",
                                  f"no {key} (set taints and labels on the node pool), or "
                                  "taintedBy: program", at=(key,), value=value,
                                  has_value=True)
        return self

    @model_validator(mode="after")
    def taints_are_unique(self) -> GpuNodesSettings:
        seen = {(self.taint.key, self.taint.effect)}
        for index, taint in enumerate(self.extra_taints):
            if (taint.key, taint.effect) in seen:
                raise Invalid("a node cannot carry two taints with the same key and effect",
                              "taints unique by key and effect, and distinct from "
                              "gpuNodes.taint", at=("extraTaints", index), value=str(taint),
                              has_value=True)
            seen.add((taint.key, taint.effect))
        return self

    @property
    def taints(self) -> list[Taint]:
        """The complete taint list each GPU node carries."""
        return [self.taint, *self.extra_taints]


_MIG_PROFILE = re.compile(r"^([1-8]c\.)?[1-8]g\.[0-9]+gb([.-][a-z0-9]+)*$")


class ReleaseProtection(Model):
    """What Pulumi may do to a Helm release: delete or replace it, and uninstall it when it
    leaves the stack."""

    protect: bool = Field(description="Pulumi refuses to delete or replace the release (a "
                                      "rename, a replacing change or `pulumi destroy` stops "
                                      "with an error) until this is turned off.")
    retain_on_delete: bool = Field(
        default=False,
        description="Removing the release from the stack leaves it installed in the cluster.")


class MigSettings(Model):
    """How MIG-partitioned GPUs are advertised to pods."""

    strategy: Literal["none", "single", "mixed"] = Field(
        default="single",
        description="How MIG slices are advertised: `single` as `nvidia.com/gpu`, `mixed` as "
                    "`nvidia.com/mig-<profile>`.")
    profiles: list[str] = Field(
        default_factory=list,
        description="With the mixed strategy: the MIG profiles the nodes are partitioned into "
                    "(e.g. 1g.10gb, 3g.40gb); the binpack scheduler scores each "
                    "`nvidia.com/mig-<profile>` as it scores whole GPUs. Required with `mixed`, "
                    "refused otherwise.")

    @field_validator("profiles")
    @classmethod
    def profiles_are_mig_profiles(cls, profiles: list[str]) -> list[str]:
        for index, profile in enumerate(profiles):
            if not _MIG_PROFILE.match(profile) or not is_qualified_name(mig_resource(profile)):
                raise Invalid("not a MIG profile", "a profile name as the device plugin "
                              "advertises it after nvidia.com/mig-, such as 1g.10gb or 3g.40gb",
                              at=(index,), value=profile, has_value=True)
            if profile in profiles[:index]:
                raise Invalid("profile listed twice", "each profile once", at=(index,),
                              value=profile, has_value=True)
        return profiles

    @model_validator(mode="after")
    def profiles_only_with_mixed(self) -> MigSettings:
        if self.strategy == "mixed" and not self.profiles:
            raise Invalid("the mixed strategy advertises each MIG profile as a resource of its "
                          "own, which the binpack scheduler can only score when it is listed",
                          "the profiles in use, such as [1g.10gb, 3g.40gb]", at=("profiles",),
                          value=[], has_value=True)
        if self.strategy != "mixed" and self.profiles:
            raise Invalid(f"the {self.strategy} strategy advertises no nvidia.com/mig-<profile> "
                          "resources", "no profiles, or strategy: mixed", at=("profiles",),
                          value=self.profiles, has_value=True)
        return self

    @property
    def resources(self) -> list[str]:
        """The extended resources MIG slices are advertised as (none unless mixed)."""
        return [mig_resource(p) for p in self.profiles]


class TimeSlicingSettings(Model):
    """Sharing each GPU between pods by time-slicing."""

    replicas: int | None = Field(
        default=None, ge=2, le=64,
        description="Pods that may share one GPU by time-slicing (2..64); unset: no sharing.")


class GpuOperatorSettings(Model):
    """NVIDIA's GPU Operator: its Helm release and the operands it runs on GPU nodes."""

    release_name: DnsLabel = Field(default="gpu-operator", description="Helm release name.")
    namespace: OwnNamespace = Field(default="gpu-operator",
                                    description="Namespace of the operator.")
    repository: Repository = Field(default="https://helm.ngc.nvidia.com/nvidia",
                            description="Helm repository of the chart: https://, or an oci:// "
                                        "registry (a mirror, for example).")
    chart_version: str = Field(default="v26.7.0", description="Pinned chart version.")
    chart_path: ChartPath = chart_path_field()
    gpu_path: Literal["devicePlugin", "dra"] = Field(
        default="devicePlugin",
        description="How pods reach GPUs. `devicePlugin`: NVIDIA's device plugin advertises "
                    "`nvidia.com/gpu` on each node. `dra`: NVIDIA's DRA driver publishes the "
                    "GPUs as ResourceSlices (the chart's GPUCluster), the device plugin, "
                    "toolkit and their managers are not deployed, and the platform declares "
                    "DeviceClasses that serve `nvidia.com/gpu` (and each MIG profile) through "
                    "it, so manifests stay as they are; needs Kubernetes 1.37 or newer and a "
                    "container runtime with CDI (containerd 2.0+, CRI-O 1.27+). See "
                    "docs/concepts/gpu-paths.md.")
    driver: Switch = switch(False, "Install the NVIDIA driver as a container (off: drivers "
                                   "are preinstalled on the nodes).")
    toolkit: Switch = switch(True, "NVIDIA container toolkit.")
    device_plugin: Switch = switch(True, "Device plugin that advertises nvidia.com/gpu.")
    dcgm_exporter: Switch = switch(True, "DCGM exporter (GPU metrics); Monitoring needs it.")
    nfd: Switch = switch(True, "Node Feature Discovery (labels nodes that have NVIDIA PCI "
                               "devices).")
    gfd: Switch = switch(True, "GPU Feature Discovery (GPU model, memory, MIG labels).")
    mig_manager: Switch = switch(False, "MIG manager (repartitions MIG-capable GPUs).")
    sandbox_workloads: Switch = switch(False, "Sandboxed (VM passthrough / vGPU) workloads; "
                                              "needed by the vGPU and VFIO managers.")
    vgpu_manager: Switch = switch(False, "vGPU manager.")
    vgpu_device_manager: Switch = switch(False, "vGPU device manager.")
    vfio_manager: Switch = switch(False, "VFIO manager (GPU passthrough).")
    cdi: Switch = switch(True, "Container Device Interface: GPUs reach containers as CDI "
                               "devices and the nvidia runtime is not the default (the chart's "
                               "default).")
    restrict_visible_devices: bool = Field(
        default=True,
        description="Containers see only the GPUs allocated to them: the toolkit ignores "
                    "NVIDIA_VISIBLE_DEVICES in unprivileged containers (and, without CDI, the "
                    "device plugin passes devices as volume mounts). Off only by choice.")
    mig: MigSettings = Field(default_factory=MigSettings, description="MIG settings.")
    time_slicing: TimeSlicingSettings = Field(default_factory=TimeSlicingSettings,
                                              description="GPU time-slicing.")
    extra_values: dict[str, Any] = Field(
        default_factory=dict,
        description="Further chart values, merged over the generated ones; keys that other "
                    "settings own are refused (`gpuCluster` and `clusterPolicy` follow "
                    "`gpuPath`), and so is `draDriver` unless `gpuPath` is `dra`, where its keys "
                    "are checked against the pinned chart's.")
    protection: ReleaseProtection = Field(
        default_factory=lambda: ReleaseProtection(protect=True),
        description="Protected by default: deleting or replacing the release uninstalls the "
                    "driver, toolkit and device plugin, and every GPU pod stops. See "
                    "docs/operators/day-two.md#what-a-change-replaces.")
    max_cluster_nodes: int = Field(
        default=100, ge=1, le=15000,
        description="The most nodes the cluster may have, GPU nodes or not (1..15000). The "
                    "operator's pods run at a critical priority, which GKE admits outside "
                    "kube-system only under a ResourceQuota of that scope; the operator's "
                    "namespace gets one (critical-pods) sized for a Node Feature Discovery "
                    "worker on each node, the validator and every operand switched on on each "
                    "GPU node (the named ones; with taintedBy: nodePool, every node), and the "
                    "operator, plus room for a rolling update. Past it, new nodes get no "
                    "operands; GpuPlatformQuotaNearlyFull warns at 90%. See "
                    "docs/operators/managed-clusters.md#gke.")


    @model_validator(mode="after")
    def sandbox_operands_need_sandbox_workloads(self) -> GpuOperatorSettings:
        for key in ("vgpuManager", "vgpuDeviceManager", "vfioManager"):
            if getattr(self, to_snake(key)).enabled and not self.sandbox_workloads.enabled:
                raise Invalid("runs only for sandboxed workloads",
                              "gpuOperator.sandboxWorkloads.enabled: true alongside it",
                              at=(key, "enabled"), value=True, has_value=True)
        if self.time_slicing.replicas and not self.device_plugin.enabled:
            raise Invalid("time-slicing is done by the device plugin",
                          "gpuOperator.devicePlugin.enabled: true, or no timeSlicing",
                          at=("timeSlicing", "replicas"), value=self.time_slicing.replicas,
                          has_value=True)
        if self.gpu_path == "dra":
            # GPUCluster, the DRA stack of the pinned chart, runs the DRA driver, DCGM and its
            # exporter only: what the device plugin path does on the node is not there.
            for key, on in (("timeSlicing", bool(self.time_slicing.replicas)),
                            ("migManager", self.mig_manager.enabled),
                            ("sandboxWorkloads", self.sandbox_workloads.enabled)):
                if on:
                    raise Invalid("the DRA path (gpuPath: dra) does not run it", "gpuPath: "
                                  "devicePlugin, or leave it off", at=(key,),
                                  value=getattr(self, to_snake(key)).model_dump(by_alias=True),
                                  has_value=True)
        if self.mig_manager.enabled and self.mig.strategy == "none":
            raise Invalid("the MIG manager needs a MIG strategy", "single or mixed",
                          at=("mig", "strategy"), value="none", has_value=True)
        return self


class ShapePoint(Model):
    """A point of the scoring shape: a node's utilization, percent, and its score."""

    utilization: int = Field(ge=0, le=100, description="Node utilization, percent (0..100).")
    score: int = Field(ge=0, le=10, description="Score at that utilization (0..10).")


class RequestedToCapacityRatio(Model):
    """How a node's utilization maps to its score."""

    shape: list[ShapePoint] = Field(
        default_factory=lambda: [ShapePoint(utilization=0, score=0),
                                 ShapePoint(utilization=100, score=10)],
        min_length=1,
        description="Score by utilization; rising scores favour fuller nodes (binpacking).")

    @field_validator("shape")
    @classmethod
    def utilization_increases(cls, shape: list[ShapePoint]) -> list[ShapePoint]:
        for index in range(1, len(shape)):
            if shape[index].utilization <= shape[index - 1].utilization:
                raise Invalid("utilization must increase strictly from point to point",
                              f"a value above {shape[index - 1].utilization}",
                              at=(index, "utilization"), value=shape[index].utilization,
                              has_value=True)
        return shape


class ResourceWeight(Model):
    """A resource NodeResourcesFit scores, and its weight."""

    name: str = Field(description="A resource: `cpu`, `memory` or an extended resource such as "
                                  "`nvidia.com/gpu`.")
    weight: int = Field(ge=1, le=100, description="Weight of this resource (1..100).")

    @field_validator("name")
    @classmethod
    def name_is_resource_name(cls, value: str) -> str:
        if not is_qualified_name(value):
            raise Invalid("not a resource name", "cpu, memory or an extended resource such as "
                                                 "nvidia.com/gpu")
        return value


class ScoringStrategy(Model):
    """NodeResourcesFit's scoring: which resources count, and how fullness scores."""

    resources: list[ResourceWeight] = Field(
        default_factory=lambda: [ResourceWeight(name=GPU_RESOURCE, weight=10),
                                 ResourceWeight(name="cpu", weight=1),
                                 ResourceWeight(name="memory", weight=1)],
        min_length=1,
        description="Resources whose utilization is scored, with weights.")
    requested_to_capacity_ratio: RequestedToCapacityRatio = Field(
        default_factory=RequestedToCapacityRatio, description="Scoring shape.")

    @field_validator("resources")
    @classmethod
    def resources_unique(cls, resources: list[ResourceWeight]) -> list[ResourceWeight]:
        names = [r.name for r in resources]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise Invalid("resource listed twice", "each resource once",
                              at=(index, "name"), value=name, has_value=True)
        return resources


class ContainerResources(Model):
    """A container's resource requests and limits."""

    requests: dict[str, str] = Field(default_factory=dict,
                                     description="Requested CPU (cores) and memory (bytes, "
                                                 "Kubernetes quantities).")
    limits: dict[str, str] = Field(default_factory=dict,
                                   description="CPU and memory limits (Kubernetes quantities).")


class PreemptibleClassSettings(Model):
    """The PriorityClass GPU pods opt in to preemption with."""

    enabled: bool = Field(
        default=True,
        description="Declare the PriorityClass GPU workloads opt in to preemption with: a GPU "
                    "pod that cannot be placed preempts such pods where that makes room, so a "
                    "job that needs a whole node does not wait for one to drain. See "
                    "docs/concepts/preemptible-gpu-pods.md.")
    name: str = Field(default="gpu-preemptible",
                      description="The PriorityClass's name (pods set it as "
                                  "`priorityClassName`; names starting with `system-` are the "
                                  "API server's).")
    value: int = Field(
        default=-100, ge=-1_000_000_000, le=-1,
        description="Its priority: below 0, the priority of pods that name no class (unless "
                    "the cluster has a globalDefault class), so only pods that opt in are ever "
                    "preempted by GPU pods.")

    @field_validator("name")
    @classmethod
    def class_name(cls, value: str) -> str:
        check_dns_label(value)
        if value.startswith("system-"):
            raise Invalid("the API server reserves names starting with system- for its own "
                          "classes", "a DNS-1123 label such as gpu-preemptible")
        return value


class ClientConnectionSettings(Model):
    """How fast the scheduler may call the API server."""

    qps: int = Field(
        default=200, ge=1, le=5000,
        description="Requests per second the binpack scheduler may send the API server, "
                    "sustained (1..5000): each placement costs about two (the binding and an "
                    "event). kube-scheduler's own default, 50, caps a burst of pending GPU pods "
                    "at about 50 placements a second; docs/benchmarks says what each value "
                    "measured.")
    burst: int = Field(
        default=400, ge=1, le=10000,
        description="Requests it may send at once above `qps` (at least `qps`).")

    @model_validator(mode="after")
    def burst_covers_qps(self) -> ClientConnectionSettings:
        if self.burst < self.qps:
            raise Invalid("a burst below qps would cap the rate at the burst",
                          f"{self.qps} or more", at=("burst",), value=self.burst,
                          has_value=True)
        return self


class LeaderElectionSettings(Model):
    """How the scheduler's replicas elect the one that schedules."""

    lease_duration: GoDuration = Field(
        default="10s",
        description="How long a standby replica waits after the leader's last renewal before "
                    "it takes over (a Go duration): a leader that crashes stops GPU placement "
                    "for about this long plus `retryPeriod`.")
    renew_deadline: GoDuration = Field(
        default="8s",
        description="How long the leader keeps trying to renew before it gives up leading and "
                    "restarts (shorter than `leaseDuration`): the API server may be unreachable "
                    "this long without the scheduler restarting.")
    retry_period: GoDuration = Field(
        default="2s",
        description="How often the leader renews and a standby tries to take over.")


    @model_validator(mode="after")
    def deadlines_in_order(self) -> LeaderElectionSettings:
        # client-go's own rule: leaseDuration > renewDeadline > 1.2 x retryPeriod.
        lease, renew, retry = map(go_duration_seconds, (self.lease_duration, self.renew_deadline,
                                                        self.retry_period))
        if renew >= lease:
            raise Invalid("the leader must give up before its lease expires",
                          f"a duration shorter than leaseDuration ({self.lease_duration})",
                          at=("renewDeadline",), value=self.renew_deadline, has_value=True)
        if renew <= 1.2 * retry:
            raise Invalid("the leader must be able to retry a renewal before its deadline",
                          f"a duration shorter than renewDeadline / 1.2 "
                          f"({renew / 1.2:g}s)", at=("retryPeriod",), value=self.retry_period,
                          has_value=True)
        return self


class SchedulerSettings(Model):
    """The binpack scheduler: a second kube-scheduler that packs GPU pods, and the
    PriorityClass of preemptible GPU pods."""

    name: DnsLabel = Field(default="gpu-binpack-scheduler",
                      description="schedulerName GPU pods must use; also names the scheduler's "
                                  "Deployment, ServiceAccount and leader-election lease.")
    namespace: OwnNamespace = Field(default="gpu-scheduler",
                                    description="Namespace of the scheduler.")
    replicas: int = Field(default=2, ge=1, le=5,
                          description="Scheduler pods (1..5); leader election is on when >1.")
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy,
                                              description="NodeResourcesFit scoring.")
    score_plugin_weights: dict[str, int] = Field(
        default_factory=lambda: dict(BINPACK_SCORE_WEIGHTS),
        description="Weights of kube-scheduler's score plugins in the binpack profile, merged "
                    "over the defaults NodeResourcesBalancedAllocation: 0 and ImageLocality: 0 "
                    "(0 turns a plugin's scoring off); plugins not named keep kube-scheduler's "
                    "weights (TaintToleration 3, NodeAffinity 2, PodTopologySpread 2, "
                    "InterPodAffinity 2, NodeResourcesFit 1). See "
                    "docs/concepts/binpack-scheduler.md.")
    system_default_spread: bool = Field(
        default=False,
        description="Apply kube-scheduler's system default topology spread (hostname maxSkew 3, "
                    "zone maxSkew 5, ScheduleAnyway) to pods a Service, ReplicaSet or "
                    "StatefulSet selects. Off: replicas pack like any GPU pod; spread "
                    "constraints that pods declare themselves still apply.")
    percentage_of_nodes_to_score: int = Field(
        default=100, ge=0, le=100,
        description="Share of feasible nodes kube-scheduler scores before it picks one, percent "
                    "(0: its adaptive default, which above 100 nodes stops early and can miss "
                    "the busiest node).")
    resources: ContainerResources = Field(
        default_factory=lambda: ContainerResources(
            requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"}),
        description="Scheduler container requests and limits.")
    log_level: int = Field(default=2, ge=0, le=10, description="kube-scheduler -v verbosity.")
    preemptible_class: PreemptibleClassSettings = Field(
        default_factory=PreemptibleClassSettings,
        description="The PriorityClass of GPU pods that may be preempted.")
    client_connection: ClientConnectionSettings = Field(
        default_factory=ClientConnectionSettings,
        description="The scheduler's rate of requests to the API server.")
    leader_election: LeaderElectionSettings = Field(
        default_factory=LeaderElectionSettings,
        description="How the replicas elect the one that schedules (with more than one).")


    @field_validator("score_plugin_weights", mode="before")
    @classmethod
    def weights_over_binpack_defaults(cls, weights: Any) -> Any:
        return {**BINPACK_SCORE_WEIGHTS, **weights} if isinstance(weights, dict) else weights

    @field_validator("score_plugin_weights")
    @classmethod
    def weights_of_score_plugins(cls, weights: dict[str, int]) -> dict[str, int]:
        for name, weight in weights.items():
            if name not in DEFAULT_SCORE_WEIGHTS:
                raise Invalid("not a score plugin of kube-scheduler's default profile",
                              ", ".join(DEFAULT_SCORE_WEIGHTS), at=(name,), value=name,
                              has_value=True)
            lowest = 1 if name == "NodeResourcesFit" else 0
            if not lowest <= weight <= 100:
                raise Invalid("weight out of range", f"{lowest}..100" + (
                    " (NodeResourcesFit is the plugin that packs)" if lowest else
                    ", 0 to turn the plugin's scoring off"), at=(name,), value=weight,
                    has_value=True)
        return weights


class ImageSettings(Model):
    """A pinned container image."""

    repository: str = Field(description="Repository, with its registry host unless Docker "
                                        "Hub's.")
    tag: ImageTag = Field(description="Release tag (never `latest`).")



class CompactionSettings(Model):
    """Moving opted-in GPU pods off lightly used GPU nodes with the descheduler, so whole
    nodes come free."""

    enabled: bool = Field(
        default=False,
        description="Run the descheduler's HighNodeUtilization on GPU nodes, so that opted-in "
                    "pods on lightly used GPU nodes move to busier ones and whole nodes come "
                    "free. Off by default: it evicts running pods. See "
                    "docs/concepts/compaction.md.")
    name: DnsLabel = Field(default="gpu-compaction",
                      description="Names the CronJob, its ServiceAccount, ClusterRole and "
                                  "policy ConfigMap.")
    namespace: OwnNamespace = Field(default="gpu-compaction",
                                    description="Namespace of the CronJob.")
    image: ImageSettings = Field(
        default_factory=lambda: ImageSettings(repository="registry.k8s.io/descheduler/descheduler",
                                              tag="v0.36.0"),
        description="Descheduler image (pinned; the integration suite builds this version).")
    schedule: str = Field(
        default="*/15 * * * *",
        description="When a compaction run starts (cron, the cluster's time zone): each run "
                    "evicts at most `maxEvictionsPerRun` pods.")
    opt_in_label: LabelKey = Field(
        default="gpu-platform.io/compaction",
        description="Only pods carrying this label with the value `allowed` are ever moved "
                    "(set it in the pod template of a Deployment, StatefulSet or Job whose "
                    "pods may restart elsewhere).")
    underused_percent: int = Field(
        default=50, ge=1, le=99,
        description="A GPU node whose requested GPUs (and each MIG resource in use) are at or "
                    "below this share of its capacity is emptied onto busier nodes, percent. "
                    "With `planThreshold`, the highest threshold a run may use.")
    plan_threshold: bool = Field(
        default=True,
        description="Before each run, choose the nodes to empty, least used first, replaying "
                    "the descheduler's rules and the binpack scheduler's placements; the run's "
                    "thresholds (GPUs at most `underusedPercent`; pods, CPU and memory) and "
                    "node selector then take just those, and a run that would free no node "
                    "evicts nothing. Off: every run uses `underusedPercent`. See "
                    "docs/concepts/compaction.md#planned-thresholds.")
    plan_image: ImageSettings = Field(
        default_factory=lambda: ImageSettings(repository="docker.io/library/python",
                                              tag="3.13.9-alpine3.22"),
        description="Image that runs the threshold plan (pinned; standard library only).")
    min_pod_age: GoDuration = Field(
        default="2h",
        description="Pods younger than this are never moved (Go duration: 30m, 2h, 1h30m): a "
                    "pod that just started, or just moved, stays put.")
    # With planThreshold a run evicts only the pods of the nodes it empties, so a per-node limit
    # below a node's pod count means that node is never emptied: 8 empties a full 8-GPU node of
    # 1-GPU pods (docs/benchmarks/compaction-study.md: 8 and 8 beat 4 and 2 with planning).
    max_evictions_per_run: int = Field(default=8, ge=1, le=100,
                                       description="Pods evicted per run, at most.")
    max_evictions_per_node: int = Field(default=8, ge=1, le=16,
                                        description="Pods evicted from one node per run, at "
                                                    "most; with planThreshold, a node with more "
                                                    "pods that may move is never emptied.")
    node_selector: str = Field(
        default=f"{GPU_PRESENT_LABEL[0]}={GPU_PRESENT_LABEL[1]}",
        description="Label selector of the nodes compaction looks at: by default the label GPU "
                    "Feature Discovery gives every GPU node.")
    resources: ContainerResources = Field(
        default_factory=lambda: ContainerResources(
            requests={"cpu": "50m", "memory": "128Mi"}, limits={"memory": "512Mi"}),
        description="Descheduler container requests and limits.")


    @field_validator("schedule")
    @classmethod
    def schedule_is_cron(cls, value: str) -> str:
        fields = value.split()
        if len(fields) != 5 or not all(CRON_FIELD.match(f) for f in fields):
            raise Invalid("not a cron schedule",
                          "five fields: minute hour day-of-month month day-of-week, e.g. "
                          "\"*/15 * * * *\"")
        return value


    @field_validator("node_selector")
    @classmethod
    def selector_of_labels(cls, value: str) -> str:
        for term in value.split(","):
            key, equals, label_value = term.partition("=")
            if not equals or not is_qualified_name(key.strip()) or \
                    not is_label_value(label_value.strip()):
                raise Invalid("not a label selector of key=value terms",
                              "key=value[,key=value...], e.g. nvidia.com/gpu.present=true")
        return value

    @property
    def opt_in(self) -> dict[str, str]:
        return {self.opt_in_label: "allowed"}

    @property
    def min_pod_age_hours(self) -> float:
        return go_duration_seconds(self.min_pod_age) / 3600


class CertificateSettings(Model):
    """The lifetimes of the admission webhook's CA and serving certificate."""

    ca_validity_hours: int = Field(default=87600, ge=24,
                                   description="Lifetime of the webhook CA, hours (10 years).")
    server_validity_hours: int = Field(default=8760, ge=24,
                                       description="Lifetime of OPA's serving certificate, "
                                                   "hours (1 year).")
    early_renewal_hours: int = Field(default=720, ge=1,
                                     description="`pulumi up` replaces a certificate this many "
                                                 "hours before it expires (30 days).")

    @model_validator(mode="after")
    def renewal_inside_validity(self) -> CertificateSettings:
        shortest = min(self.ca_validity_hours, self.server_validity_hours)
        if self.early_renewal_hours >= shortest:
            raise Invalid("early renewal must start before the certificate expires",
                          f"fewer hours than the shortest validity ({shortest})",
                          at=("earlyRenewalHours",), value=self.early_renewal_hours,
                          has_value=True)
        return self


def mutating_webhook(webhook_name: str) -> str:
    """The mutating webhook's name (mutate and audit modes), from `admission.webhookName`."""
    return f"mutate.{webhook_name}"


def workloads_webhook(webhook_name: str) -> str:
    """The webhook on a team's Jobs and JobSets' name, from `admission.webhookName`."""
    return f"jobs.{webhook_name}"


def claims_webhook(webhook_name: str) -> str:
    """The webhook on ResourceClaims' name, from `admission.webhookName`."""
    return f"dra.{webhook_name}"


class AdmissionSettings(Model):
    """OPA behind the admission webhooks: which pods are GPU pods, and what is refused."""

    namespace: OwnNamespace = Field(default="gpu-admission", description="Namespace of OPA.")
    webhook_name: str = Field(default="gpu-scheduler-policy.gpu-platform.io",
                              description="Name of the webhook (a DNS subdomain).")
    replicas: int = Field(default=2, ge=2, le=10,
                          description="OPA pods (2..10), kept available by a "
                                      "PodDisruptionBudget.")
    opa: ImageSettings = Field(
        default_factory=lambda: ImageSettings(repository="openpolicyagent/opa",
                                              tag="1.22.2-static"),
        description="OPA image (pinned).")
    mode: Literal["enforce", "mutate", "audit"] = Field(
        default="enforce",
        description="`enforce`: refuse pods that break a rule. `mutate`: set the scheduler and "
                    "the GPU tolerations on GPU pods that lack them, refuse what cannot be "
                    "fixed. `audit`: admit, with a warning to the user and a label the "
                    "dashboard counts. See docs/concepts/admission.md#modes.")
    gpu_resource_names: list[str] = Field(
        default_factory=lambda: [NVIDIA_RESOURCES],
        min_length=1,
        description="Resources that make a pod a GPU pod when it asks for more than zero of "
                    "one; a trailing * matches a prefix. The default covers everything "
                    "NVIDIA's device plugins advertise: `nvidia.com/gpu`, `nvidia.com/gpu.shared` "
                    "(time-slicing or MPS with renaming), `nvidia.com/mig-<profile>` (and "
                    "`.shared`), vGPU types and passthrough devices, and the NICs of NVIDIA's "
                    "Network Operator: a pod that asks only for such a NIC is placed as a GPU "
                    "pod is (the binpack scheduler, the GPU toleration), since the hardware it "
                    "needs is on the GPU nodes. List only GPU resources to treat such pods as "
                    "pods without GPUs.")
    nvidia_runtime_classes: list[str] = Field(
        default_factory=lambda: ["nvidia", "nvidia-cdi", "nvidia-legacy"],
        description="RuntimeClasses of the NVIDIA container runtime (the GPU Operator creates "
                    "these); a pod that names one must request a GPU.")
    exempt_namespaces: NamespaceNames = Field(
        default_factory=list,
        description="Namespaces whose pods are never checked: for node agents that need device "
                    "paths on every node (privileged, host paths under /dev, /proc or /sys, "
                    "hostPID), and for pods trusted with GPUs. kube-system and the platform's "
                    "admission, GPU Operator and monitoring namespaces always are. Whoever may "
                    "create pods in one is trusted with every GPU of the cluster.")
    device_classes: list[str] = Field(
        default_factory=list,
        description="DeviceClasses whose ResourceClaims (Dynamic Resource Allocation) are "
                    "admitted: classes the platform team has checked select no NVIDIA device "
                    "(a claim's own selectors only narrow its class's devices). A claim on any "
                    "other class is refused; NVIDIA's own classes cannot be listed (GPUs "
                    "through DRA are not supported yet).")
    failure_policy: Literal["Fail", "Ignore"] = Field(
        default="Fail",
        description="What the API server does with a pod the policy must see when OPA cannot "
                    "answer (`Ignore` in audit mode, where `Fail` is refused: audit must never "
                    "block a pod).")
    timeout_seconds: int = Field(default=5, ge=1, le=30,
                                 description="Webhook call timeout, seconds (1..30).")
    webhook_port: int = Field(
        default=10250, ge=1024, le=65535,
        description="Port OPA serves the webhook on, in its pod (the API server connects to it "
                    "there). 10250 passes the control-plane firewalls of private GKE clusters "
                    "and of EKS security groups that allow only 443 and 10250 to nodes; OPA "
                    "runs unprivileged, so not below 1024.")
    max_gpu_pod_priority: int = Field(
        default=0, ge=-1_000_000_000, le=2_000_001_000,
        description="Highest priority a pod that may run on a GPU node (a GPU pod, or one "
                    "that tolerates the GPU taint or is bound to a GPU node by name) may have "
                    "through the `priorityClassName` it names: above 0 it would preempt other "
                    "users' GPU pods that never opted in to preemption. Pods that name no "
                    "class are not checked (a cluster's globalDefault class applies to them). "
                    "Raise it where the cluster "
                    "ranks GPU workloads by priority on purpose; it may not be below "
                    "`scheduler.preemptibleClass.value`.")
    decision_logs: bool = Field(default=False,
                                description="Log every admission decision to OPA's stdout.")
    certificate: CertificateSettings = Field(default_factory=CertificateSettings,
                                             description="Webhook TLS.")


    @model_validator(mode="before")
    @classmethod
    def audit_defaults_to_ignore(cls, data: Any) -> Any:
        # Audit admits every pod; an OPA outage must not refuse one either.
        if isinstance(data, dict) and data.get("mode") == "audit" and not (
                {"failurePolicy", "failure_policy"} & data.keys()):
            return {**data, "failurePolicy": "Ignore"}
        return data

    @model_validator(mode="after")
    def mode_fits_failure_policy(self) -> AdmissionSettings:
        if self.mode == "audit" and self.failure_policy == "Fail":
            raise Invalid("audit mode admits every pod, but with Fail an OPA outage would refuse "
                          "GPU pods", "Ignore (the default in audit mode), or mode enforce or "
                          "mutate", at=("failurePolicy",), value="Fail", has_value=True)
        return self

    @property
    def mutating_webhook_name(self) -> str:
        return mutating_webhook(self.webhook_name)

    @property
    def claims_webhook_name(self) -> str:
        return claims_webhook(self.webhook_name)

    @property
    def workloads_webhook_name(self) -> str:
        return workloads_webhook(self.webhook_name)

    @property
    def reachability_webhook_name(self) -> str:
        return f"reachable.{self.webhook_name}"

    @field_validator("nvidia_runtime_classes")
    @classmethod
    def runtime_classes_are_names(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if not is_dns_subdomain(name):
                raise Invalid("not a RuntimeClass name", "DNS-1123 subdomains such as nvidia",
                              at=(index,), value=name, has_value=True)
        return names

    @field_validator("webhook_name")
    @classmethod
    def webhook_name_is_qualified(cls, value: str) -> str:
        # The API server requires a fully qualified name: at least three DNS labels.
        if not is_dns_subdomain(value) or value.count(".") < 2:
            raise Invalid("not a webhook name",
                          "a DNS subdomain of at least three labels, e.g. a.b.io")
        return value

    @field_validator("gpu_resource_names")
    @classmethod
    def resource_patterns(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            # A prefix is valid when some name could complete it.
            example = name[:-1] + "x" if name.endswith("*") else name
            if "*" in example or "/" not in example or not is_qualified_name(example):
                raise Invalid("not an extended resource name or prefix",
                              "a name such as nvidia.com/gpu, or a prefix ending in * such as "
                              "nvidia.com/* or nvidia.com/mig-*", at=(index,), value=name,
                              has_value=True)
        return names

    @field_validator("device_classes")
    @classmethod
    def device_classes_are_not_nvidias(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if not is_dns_subdomain(name):
                raise Invalid("not a DeviceClass name", "DNS-1123 subdomains such as "
                              "nic.example.com", at=(index,), value=name, has_value=True)
            if name.endswith(NVIDIA_DEVICE_CLASS_SUFFIX):
                raise Invalid("an NVIDIA device class hands out GPUs outside the binpack "
                              "scheduler", "classes that select no NVIDIA device",
                              at=(index,), value=name, has_value=True)
        return names



class GrafanaSettings(Model):
    """Grafana's admin account."""

    admin_user: str = Field(default="admin", description="Grafana admin user.")
    admin_password: str | None = Field(
        default=None,
        description="Grafana admin password (set with `pulumi config set --secret --path`); "
                    "unset: generated and kept as a Pulumi secret.")


class AlertSettings(Model):
    """Thresholds of the GPU alerts."""

    gpu_temperature_celsius: int = Field(
        default=85, ge=50, le=110,
        description="GpuTemperatureHigh fires above this GPU temperature, degrees Celsius.")
    gpu_temperature_for: Duration = Field(
        default="10m", description="...for this long (a duration), so a short burst under load "
                                   "does not page.")
    fatal_xid_codes: list[int] = Field(
        default_factory=lambda: [48, 79, 94, 95],
        description="XID codes that mean the GPU needs draining and a reset (48 double-bit ECC, "
                    "79 fallen off the bus, 94/95 contained/uncontained ECC): GpuFatalXidError, "
                    "critical; any other XID is GpuXidError, a warning.")
    idle_utilization_percent: int = Field(
        default=5, ge=1, le=100,
        description="GpuAllocatedIdle: a pod whose GPUs stay below this utilization, percent...")
    idle_for: Duration = Field(default="2h", description="...for this long (a duration).")
    pending_for: Duration = Field(
        default="15m",
        description="GpuPodFragmentationPending: a GPU pod unschedulable this long although "
                    "enough GPUs are free in total (a duration).")
    exporter_down_for: Duration = Field(
        default="10m",
        description="GpuExporterDown: a GPU node without a healthy DCGM exporter this long "
                    "(a duration).")
    unavailable_for: Duration = Field(
        default="5m",
        description="BinpackSchedulerUnavailable, GpuAdmissionUnavailable: no available pod "
                    "this long (a duration).")
    admission_rejections_per_hour: int = Field(
        default=60, ge=1,
        description="GpuAdmissionRejectionsHigh: more requests than this refused by the policy "
                    "in an hour (someone's chart or pipeline keeps breaking the rules).")
    compaction_stale_hours: int = Field(
        default=2, ge=1, le=168,
        description="GpuCompactionNotRunning: no compaction run has succeeded for this many "
                    "hours (with compaction enabled; a run waits for the binpack scheduler).")
    pending_growth_for: Duration = Field(
        default="30m",
        description="GpuPodsPendingGrowing: pending GPU pods more numerous than this long ago "
                    "(a duration), and not fewer since.")



class StorageSettings(Model):
    """Persistent volumes for Prometheus and Alertmanager."""

    enabled: bool = Field(
        default=True,
        description="Persistent volumes for Prometheus and Alertmanager, so samples, `for:` "
                    "timers and silences survive a restart. Off only by choice (then all of it "
                    "is lost whenever a pod moves).")
    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the volumes; unset: the cluster's default.")
    prometheus_size_gib: int = Field(
        default=50, ge=1, le=65536,
        description="Prometheus volume, GiB; Prometheus also deletes the oldest samples once "
                    "they take 90% of it, whatever `retention` says.")
    alertmanager_size_gib: int = Field(default=1, ge=1, le=1024,
                                       description="Alertmanager volume (silences), GiB.")

    @field_validator("storage_class_name")
    @classmethod
    def class_is_a_name(cls, value: str | None) -> str | None:
        if value is not None and not is_dns_subdomain(value):
            raise Invalid("not a StorageClass name", "a DNS-1123 subdomain, or unset for the "
                                                     "cluster's default")
        return value


Severity = Literal["critical", "warning", "info"]


class Receiver(Model):
    """Where Alertmanager sends alerts of some severities."""

    name: DnsLabel = Field(description="Receiver name (a DNS-1123 label).")
    severities: list[Severity] = Field(
        min_length=1, description="Alerts of these severities are sent here.")
    webhook_url: str | None = Field(default=None, description="Generic webhook URL.")
    slack_api_url: str | None = Field(default=None,
                                         description="Slack incoming-webhook URL (a secret).")
    slack_channel: str | None = Field(default=None, description="Slack channel, e.g. #gpu.")
    pagerduty_routing_key: str | None = Field(
        default=None, description="PagerDuty Events v2 routing key (a secret).")


    @field_validator("webhook_url", "slack_api_url")
    @classmethod
    def url_is_https(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise Invalid("not a URL", "an http(s) URL")
        return value

    @model_validator(mode="after")
    def one_destination(self) -> Receiver:
        given = [key for key in ("webhookUrl", "slackApiUrl", "pagerdutyRoutingKey")
                 if getattr(self, to_snake(key))]
        if len(given) != 1:
            raise Invalid("a receiver sends to exactly one destination",
                          "one of webhookUrl, slackApiUrl (with slackChannel) or "
                          "pagerdutyRoutingKey", value=given, has_value=True)
        if self.slack_api_url and not self.slack_channel:
            raise Invalid("a Slack receiver needs a channel", "slackChannel such as #gpu-alerts",
                          at=("slackChannel",), value=None, has_value=True)
        return self


class AlertmanagerSettings(Model):
    """Where alerts go, and how often."""

    receivers: list[Receiver] = Field(
        default_factory=list,
        description="Where alerts go, by severity: each `{name, severities, and one of "
                    "webhookUrl, slackApiUrl with slackChannel, pagerdutyRoutingKey}` (set URLs "
                    "and keys with `pulumi config set --secret --path`). Empty: alerts are only "
                    "shown in Alertmanager. See docs/operators/monitoring.md#where-alerts-go.")
    group_wait: Duration = Field(default="30s", description="Wait before the first notification of "
                                                       "a group.")
    repeat_interval: Duration = Field(default="4h", description="Resend a firing alert this often.")


    @field_validator("receivers")
    @classmethod
    def names_unique(cls, receivers: list[Receiver]) -> list[Receiver]:
        names = [r.name for r in receivers]
        for index, name in enumerate(names):
            if name in names[:index] or name == "null":
                raise Invalid("receiver name used twice or reserved", "unique names, not null",
                              at=(index, "name"), value=name, has_value=True)
        return receivers


class MonitoringSettings(Model):
    """kube-prometheus-stack, the GPU dashboard, recording rules and alerts."""

    release_name: DnsLabel = Field(default="kube-prometheus-stack",
                                   description="Helm release name.")
    namespace: OwnNamespace = Field(default="monitoring", description="Namespace of the stack.")
    repository: Repository = Field(default="https://prometheus-community.github.io/helm-charts",
                            description="Helm repository of the chart: https://, or an oci:// "
                                        "registry (a mirror, for example).")
    chart_version: str = Field(default="88.5.3", description="Pinned chart version.")
    chart_path: ChartPath = chart_path_field()
    scrape_interval: Duration = Field(default="15s", description="Prometheus scrape interval of "
                                                            "the DCGM exporter.")
    retention: Duration = Field(default="15d", description="How long Prometheus keeps samples.")
    grafana: GrafanaSettings = Field(default_factory=GrafanaSettings, description="Grafana.")
    largest_common_request: int = Field(
        default=8, ge=1, le=16,
        description="GPUs of the largest pod the platform should be able to place (GPUs): free "
                    "GPUs on a busy node that cannot take one count as stranded.")
    alerts: AlertSettings = Field(default_factory=AlertSettings, description="Alert thresholds.")
    storage: StorageSettings = Field(default_factory=StorageSettings,
                                     description="Persistent storage.")
    alertmanager: AlertmanagerSettings = Field(default_factory=AlertmanagerSettings,
                                               description="Alert routing.")
    protection: ReleaseProtection = Field(
        default_factory=lambda: ReleaseProtection(protect=False),
        description="As for the operator (`gpuOperator.protection`); not protected by "
                    "default: replacing the release loses no workload (with storage on, its "
                    "volumes are claims of their own).")
    extra_values: dict[str, Any] = Field(
        default_factory=dict,
        description="Further chart values, merged over the generated ones; keys that other "
                    "settings own are refused.")




# What Kueue calls things, as the platform uses them (sigs.k8s.io/kueue v0.19.2), and the
# oldest Kubernetes it supports.
KUEUE_MIN_KUBERNETES = (1, 34)
KUEUE_API = "kueue.x-k8s.io/v1beta2"
# The LocalQueue Kueue gives every workload of a namespace that names no queue.
KUEUE_DEFAULT_QUEUE = "default"
# Who creates the Jobs of a JobSet: its controller, as JobSet's release manifests install it
# (namespace jobset-system, ServiceAccount jobset-controller-manager).
JOBSET_CONTROLLER = "system:serviceaccount:jobset-system:jobset-controller-manager"


class FlavorSettings(Model):
    """A kind of GPU node the teams' quotas are counted on (a Kueue ResourceFlavor)."""

    name: DnsLabel = Field(description="The flavor's name, as the teams' quotas name it.")
    node_labels: dict[str, str] = Field(
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


Quota = dict[str, dict[str, int]]


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


class KueueSettings(Model):
    """Kueue: its pinned Helm release."""

    release_name: DnsLabel = Field(default="kueue", description="Helm release name.")
    namespace: OwnNamespace = Field(default="kueue-system", description="Namespace of Kueue.")
    repository: Repository = Field(default="oci://registry.k8s.io/kueue/charts",
                                   description="Helm repository of the chart: https://, or an "
                                               "oci:// registry (a mirror, for example).")
    chart_version: str = Field(default="0.19.2", description="Pinned chart version.")
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
    extra_values: dict[str, Any] = Field(
        default_factory=dict,
        description="Further chart values, merged over the generated ones; keys that other "
                    "settings own are refused.")


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
    gpu_pods_outside_teams: Literal["refuse", "admit"] = Field(
        default="refuse",
        description="A GPU pod in a namespace of no team: `refuse` (its GPUs would count "
                    "against no quota), or `admit` as without teams, for a migration period.")
    wait_for_pods_ready: GoDuration = Field(
        default="10m",
        description="All-or-nothing admission: a workload whose pods are not all running "
                    "this long after it was admitted gives its GPUs back and is queued again "
                    "(Go duration).")
    workload_controllers: list[str] = Field(
        default_factory=lambda: [JOBSET_CONTROLLER],
        description="Users that create a team's Jobs for a parent Kueue already admitted, which "
                    "Kueue then leaves running (JobSet's controller, as JobSet's release "
                    "manifests name it). Anyone else's Job in a team namespace must start "
                    "suspended and is started by Kueue alone.")
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
        flavors = [f.name for f in self.flavors]
        for index, name in enumerate(flavors):
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


class ClusterSettings(Model):
    """The cluster the stack deploys to: a context of a kubeconfig."""

    context: str = Field(
        description="Context of the stack's cluster in the kubeconfig (required): the program "
                    "never deploys to whatever context happens to be current.")
    kubeconfig: str | None = Field(
        default=None,
        description="Path of the kubeconfig file; unset: `$KUBECONFIG`, else "
                    "`~/.kube/config`, as kubectl reads them.")

    @model_validator(mode="after")
    def context_is_in_the_kubeconfig(self) -> ClusterSettings:
        if self.kubeconfig is None:
            return self
        path = Path(self.kubeconfig).expanduser()
        if not path.is_file():
            raise Invalid("no such kubeconfig file", "the path of a kubeconfig file on the "
                          "machine that runs pulumi, or unset for $KUBECONFIG / ~/.kube/config",
                          at=("kubeconfig",), value=self.kubeconfig, has_value=True)
        try:
            config = yaml.safe_load(path.read_text()) or {}
            contexts = [c["name"] for c in config.get("contexts") or []]
        except (yaml.YAMLError, KeyError, TypeError, AttributeError):
            raise Invalid("not a kubeconfig file", "a kubeconfig (YAML with contexts)",
                          at=("kubeconfig",), value=self.kubeconfig, has_value=True) from None
        if self.context not in contexts:
            raise Invalid(f"no such context in {self.kubeconfig}",
                          f"one of {', '.join(contexts) or '(none defined)'}", at=("context",),
                          value=self.context, has_value=True)
        return self


class StackSettings(Model):
    """A stack's settings: every section of the stack file."""

    cluster: ClusterSettings = Field(description="The cluster the stack deploys to (required).")
    image_registry_mirror: RegistryMirror = mirror_field()
    kubernetes_version: KubernetesVersion = kubernetes_version_field()
    gpu_nodes: GpuNodesSettings = Field(description="GPU nodes (required).")
    gpu_operator: GpuOperatorSettings = Field(
        default_factory=GpuOperatorSettings,
        description="NVIDIA's GPU Operator: its Helm release and the operands it runs on GPU "
                    "nodes.")
    scheduler: SchedulerSettings = Field(
        default_factory=SchedulerSettings,
        description="The binpack scheduler, a second kube-scheduler that packs GPU pods, and "
                    "the PriorityClass of preemptible GPU pods.")
    admission: AdmissionSettings = Field(
        default_factory=AdmissionSettings,
        description="OPA behind the admission webhooks: which pods are GPU pods and what is "
                    "refused.")
    monitoring: MonitoringSettings = Field(
        default_factory=MonitoringSettings,
        description="kube-prometheus-stack, the GPU dashboard, recording rules and alerts.")
    compaction: CompactionSettings = Field(
        default_factory=CompactionSettings,
        description="Moving opted-in GPU pods off lightly used GPU nodes with the descheduler, "
                    "so whole nodes come free.")
    teams: TeamsSettings = Field(
        default_factory=TeamsSettings,
        description="Teams that share the GPUs through Kueue: a quota and a queue per team.")


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
        found = []
        for path in sections:
            section: Any = self
            for key in path:
                section = getattr(section, to_snake(key))
            found.append(((*path, "namespace"), section.namespace))
        return found

    @model_validator(mode="after")
    def dra_needs_kubernetes_1_37(self) -> StackSettings:
        major, minor, _ = (int(n) for n in self.kubernetes_version.split("."))
        if self.gpu_operator.gpu_path == "dra" and (major, minor) < DRA_MIN_KUBERNETES:
            raise Invalid("the DRA path serves nvidia.com/gpu through a DeviceClass's "
                          "extendedResourceName, GA from Kubernetes 1.37; the cluster is "
                          f"{self.kubernetes_version}", "devicePlugin, or kubernetesVersion "
                          "1.37.0 or newer", at=("gpuOperator", "gpuPath"), value="dra",
                          has_value=True)
        return self

    @model_validator(mode="after")
    def teams_run_where_kueue_does(self) -> StackSettings:
        if not self.teams.enabled:
            return self
        major, minor, _ = (int(n) for n in self.kubernetes_version.split("."))
        if (major, minor) < KUEUE_MIN_KUBERNETES:
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

    @model_validator(mode="after")
    def quotas_fit_the_gpu_nodes(self) -> StackSettings:
        nodes = self.gpu_nodes
        if not (self.teams.enabled and nodes.gpus_per_node and nodes.tainted_by == "program"):
            return self
        slices = self.gpu_operator.time_slicing.replicas or 1
        held = len(nodes.names) * nodes.gpus_per_node * slices
        quota = sum(resources.get(GPU_RESOURCE, 0) for team in self.teams.teams
                    for resources in team.quota.values())
        if quota > held:
            per_gpu = f" × {slices} slices" if slices > 1 else ""
            raise Invalid(f"the teams' quotas of {GPU_RESOURCE} add up to {quota}, more than "
                          f"the named GPU nodes hold ({len(nodes.names)} nodes × "
                          f"{nodes.gpus_per_node} GPUs{per_gpu} = {held})",
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


def to_snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def parse_config_value(raw: str) -> Any:
    """Pulumi hands structured config values to the program as JSON text; scalars stay strings."""
    if isinstance(raw, str) and raw.lstrip()[:1] in ("{", "["):
        return json.loads(raw)
    return raw


# Settings of earlier releases that no longer do anything: accepted, ignored and named in a
# warning (retired_settings), so that a stack file written for an earlier release deploys.
RETIRED_SETTINGS = {
    ("admission", "kubeMgmt"): "kube-mgmt no longer runs (OPA loads its policy from its "
                               "ConfigMap itself); remove the key",
}


def _without_retired(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    parsed = {key: parse_config_value(value) for key, value in config.items()}
    found = []
    for (section, key), why in RETIRED_SETTINGS.items():
        if isinstance(parsed.get(section), dict) and key in parsed[section]:
            parsed[section] = {k: v for k, v in parsed[section].items() if k != key}
            found.append(f"{CONFIG_NAMESPACE}:{section}.{key} is ignored: {why}")
    return parsed, found


def retired_settings(config: Mapping[str, Any]) -> list[str]:
    """A warning for each setting of an earlier release the config still sets."""
    return _without_retired(config)[1]


def load_settings(config: Mapping[str, Any]) -> StackSettings:
    """Validate the stack's `gpu-platform:` config (keys without the namespace prefix)."""
    # Pulumi hands a key written without a value (`key:` or `key: ~`) to the program as "".
    empty = [f'{CONFIG_NAMESPACE}:{key} = "": the stack file gives this key no value; allowed: '
             f"a value, or no such key to keep the default" for key, value in config.items()
             if value == ""]
    parsed, _ = _without_retired(config)
    try:
        settings = StackSettings.model_validate({key: value for key, value in parsed.items()
                                                 if value != ""})
    except ValidationError as error:
        # A required key written without a value is reported once, as empty.
        missing = {f"{CONFIG_NAMESPACE}:{key}: required setting is missing"
                   for key, value in config.items() if value == ""}
        raise SettingsError(empty + [problem for problem in (
            describe(e, StackSettings, STACK.root) for e in error.errors())
            if problem not in missing], STACK) from None
    if empty:
        raise SettingsError(empty, STACK)
    return settings
