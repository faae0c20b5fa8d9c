"""The `gpuOperator` section of the stack settings."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..base.facts import mig_resource
from ..base.model import Model, ReleaseProtection, to_snake
from ..base.validation import (
    ChartPath,
    DnsLabel,
    Invalid,
    OwnNamespace,
    Repository,
    chart_path_field,
    chart_repository_field,
    chart_version_field,
    is_qualified_name,
    release_name_field,
)


class Switch(Model):
    """An operand of the GPU Operator chart that can be turned on or off (`<operand>.enabled`)."""

    enabled: bool = Field(description="Whether the chart deploys this operand.")


def switch(enabled: bool, description: str):
    return Field(default_factory=lambda: Switch(enabled=enabled), description=description)


MIG_PROFILE = re.compile(r"^([1-8]c\.)?[1-8]g\.[0-9]+gb([.-][a-z0-9]+)*$")


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
            if not MIG_PROFILE.match(profile) or not is_qualified_name(mig_resource(profile)):
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

    release_name: DnsLabel = release_name_field("gpu-operator")
    namespace: OwnNamespace = Field(default="gpu-operator",
                                    description="Namespace of the operator.")
    repository: Repository = chart_repository_field("https://helm.ngc.nvidia.com/nvidia")
    chart_version: str = chart_version_field("v26.7.0")
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
