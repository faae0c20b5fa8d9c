"""What the OpaAdmission component takes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ..base.model import GpuNodeFacts, GpuPath, Model, PulledImages, gpu_nodes_field, section
from ..base.validation import DnsLabel, NamespaceNames
from .facts import ALWAYS_EXEMPT
from .settings import AdmissionSettings


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
        description="Users that create or start a team's Jobs, JobSets, RayClusters and pods "
                    "for a workload Kueue admitted (`teams.workloadControllers`).")
    frameworks: list[str] = Field(
        default_factory=list,
        description="Kueue's framework integrations (`teams.frameworks`): a team's workload "
                    "of those kinds is started by Kueue alone.")
    topology_levels: list[str] = Field(
        default_factory=list,
        description="The topology's levels above the node (from `teams.topology`): Kueue keeps "
                    "only a pod set that asks for GPUs to one domain of these, so a workload "
                    "whose pod set without GPUs asks for one is warned of.")


class PlatformDeviceClass(Model):
    """One of the platform's own DeviceClasses, as the GpuOperator component declares it."""

    name: str = Field(
        description="Its name; `{profile}` in it stands for every profile that "
                    "`profilePattern` matches (one class per MIG profile).")
    spec: dict[str, Any] = Field(
        description="Its spec (selectors, extendedResourceName), with `{profile}` where the "
                    "name has it.")
    profile_pattern: str | None = Field(
        default=None, description="What `{profile}` may stand for (a regular expression).")


class DraWriters(Model):
    """Who outside the control plane writes what the DRA path hands GPUs out by: the GPU
    Operator's ServiceAccounts, named one by one (the GpuOperator component's facts)."""

    device_classes: list[str] = Field(
        default_factory=list,
        description="Users that create NVIDIA's DeviceClasses (the GPU Operator).")
    resource_slices: list[str] = Field(
        default_factory=list,
        description="Users that publish the ResourceSlices of NVIDIA's drivers (the DRA "
                    "driver's kubelet plugin); a node may also publish its own.")
    compute_domains: list[str] = Field(
        default_factory=list,
        description="Users that write the claim templates joining a ComputeDomain's IMEX "
                    "channel (the driver's compute-domain controller).")


class OpaAdmissionInputs(PulledImages):
    """The admission policy and OPA, with what the policy checks pods against: the binpack
    scheduler's name, the preemptible class, the GPU nodes' taints and names, and the
    namespaces of the platform's other components."""

    admission: AdmissionSettings = section(AdmissionSettings)
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
    platform_device_classes: list[PlatformDeviceClass] = Field(
        default_factory=list,
        description="The platform's own DeviceClasses on the DRA path (the GpuOperator "
                    "component's `deviceClassShapes` output): claims on them are GPU claims, "
                    "the resources they serve are GPU resources, and a write of one is "
                    "admitted only with the spec the program gives it.")
    dra_writers: DraWriters = Field(
        default_factory=DraWriters,
        description="The GPU Operator's ServiceAccounts that write NVIDIA's DeviceClasses, "
                    "ResourceSlices and ComputeDomain claim templates.")
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
