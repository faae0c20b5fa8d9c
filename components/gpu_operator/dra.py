"""The DRA path: NVIDIA's DRA driver as the pinned chart runs it, and the platform's
DeviceClasses that serve `nvidia.com/gpu` and each MIG profile through it."""

from ..base import manifests
from ..base.facts import GPU_RESOURCE, PROFILE_PLACEHOLDER, mig_resource, service_account_user
from .inputs import GpuOperatorInputs
from .settings import MIG_PROFILE, GpuOperatorSettings
from .values import COMPONENT

# NVIDIA's DRA driver (sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0, as GPU Operator v26.7.0 runs
# it): its driver name, the attribute that tells a whole GPU from a MIG device, and the MIG
# device's profile attribute.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
# The driver's ServiceAccounts in the operator's namespace (manifests/state-dra-driver of
# v26.7.0): the kubelet plugin publishes each node's ResourceSlices (of gpu.nvidia.com and
# compute-domain.nvidia.com); the compute-domain controller makes the claim templates that join
# a ComputeDomain's pods to its IMEX channel. The operator itself creates NVIDIA's
# DeviceClasses (gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, compute-domain-*).
NVIDIA_DRA_KUBELET_PLUGIN = "nvidia-dra-driver-kubeletplugin"
NVIDIA_DRA_CONTROLLER = "nvidia-dra-driver-controller"
GPU_OPERATOR_SERVICE_ACCOUNT = "gpu-operator"
# The namespace label that lets claims there ask for adminAccess (DRA's monitoring access to
# every device), which the operator's DCGM exporter does.
DRA_ADMIN_ACCESS_LABEL = ("resource.kubernetes.io/admin-access", "true")
# The platform's own DeviceClasses on the DRA path: one serves nvidia.com/gpu through the
# whole GPUs NVIDIA's driver publishes, and one each MIG profile's nvidia.com/mig-<profile>.
# The operator's own classes (gpu.nvidia.com, mig.nvidia.com) name no extended resource.
GPU_DEVICE_CLASS = "gpu-platform-gpu.nvidia.com"


def mig_device_class(profile: str) -> str:
    return f"gpu-platform-mig-{profile}.nvidia.com"


def _device_class(name: str, resource: str, selector: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "labels": manifests.labels(name, COMPONENT)},
            "spec": {"selectors": [{"cel": {"expression": selector}}],
                     "extendedResourceName": resource}}


def _served(profiles: list[str]) -> list[dict]:
    """The platform's classes: whole GPUs, and one class per MIG profile."""
    driver = f"device.driver == '{NVIDIA_DRA_DRIVER}'"
    attributes = f"device.attributes['{NVIDIA_DRA_DRIVER}']"
    return [_device_class(GPU_DEVICE_CLASS, GPU_RESOURCE,
                          f"{driver} && {attributes}.type == 'gpu'"),
            *(_device_class(mig_device_class(profile), mig_resource(profile),
                            f"{driver} && {attributes}.type == 'mig' && "
                            f"{attributes}.profile == '{profile}'")
              for profile in profiles)]


def device_class_shapes() -> list[dict]:
    """What the platform's DeviceClasses are, whatever the stack's MIG profiles: each name with
    its spec, the MIG class once with PROFILE_PLACEHOLDER in place of the profile (and the MIG
    settings' own check of what it may stand for). The admission policy admits a write of one
    of these names only with this spec, so that adding a profile is admitted before the policy
    hears of it."""
    return [{"name": c["metadata"]["name"], "spec": c["spec"],
             **({"profile_pattern": MIG_PROFILE.pattern}
                if PROFILE_PLACEHOLDER in c["metadata"]["name"] else {})}
            for c in _served([PROFILE_PLACEHOLDER])]


def dra_writers(op: GpuOperatorSettings) -> dict[str, list[str]]:
    """The operator's ServiceAccounts that write what the DRA path hands GPUs out by."""
    def user(account: str) -> str:
        return service_account_user(op.namespace, account)
    return {"device_classes": [user(GPU_OPERATOR_SERVICE_ACCOUNT)],
            "resource_slices": [user(NVIDIA_DRA_KUBELET_PLUGIN)],
            "compute_domains": [user(NVIDIA_DRA_CONTROLLER)]}


def served_resources(op: GpuOperatorSettings) -> dict[str, list[str]]:
    """On the DRA path, each GPU resource the platform serves and the DeviceClasses whose claims
    hold it: the platform's own class for it, and for whole GPUs NVIDIA's `gpu.nvidia.com`."""
    if op.gpu_path != "dra":
        return {}
    return {GPU_RESOURCE: [GPU_DEVICE_CLASS, NVIDIA_DRA_DRIVER],
            **{mig_resource(p): [mig_device_class(p)] for p in op.mig.profiles}}


def device_classes(inputs: GpuOperatorInputs) -> list[dict]:
    """On the DRA path, the DeviceClasses that serve the GPU resources pods ask for: a pod that
    requests `nvidia.com/gpu` is given that many whole GPUs of NVIDIA's driver, a pod that
    requests `nvidia.com/mig-<profile>` that many MIG devices of the profile."""
    op = inputs.gpu_operator
    return _served(op.mig.profiles) if op.gpu_path == "dra" else []
