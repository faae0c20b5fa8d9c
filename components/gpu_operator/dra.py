"""The DRA path: NVIDIA's DRA driver as the pinned chart runs it, and the platform's
DeviceClasses that serve `nvidia.com/gpu` and each MIG profile through it."""

from ..base import manifests
from ..base.facts import GPU_RESOURCE, mig_resource
from .inputs import GpuOperatorInputs
from .settings import GpuOperatorSettings
from .values import COMPONENT

# NVIDIA's DRA driver (sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0, as GPU Operator v26.7.0 runs
# it): its driver name, the attribute that tells a whole GPU from a MIG device, and the MIG
# device's profile attribute.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
NVIDIA_DRA_KUBELET_PLUGIN = "nvidia-dra-driver-kubeletplugin"
# The namespace label that lets claims there ask for adminAccess (DRA's monitoring access to
# every device), which the operator's DCGM exporter does.
DRA_ADMIN_ACCESS_LABEL = ("resource.kubernetes.io/admin-access", "true")
# The platform's own DeviceClasses on the DRA path: one serves nvidia.com/gpu through the
# whole GPUs NVIDIA's driver publishes, and one each MIG profile's nvidia.com/mig-<profile>.
# The operator's own classes (gpu.nvidia.com, mig.nvidia.com) name no extended resource.
GPU_DEVICE_CLASS = "gpu-platform-gpu.nvidia.com"


def mig_device_class(profile: str) -> str:
    return f"gpu-platform-mig-{profile}.nvidia.com"


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
    if op.gpu_path != "dra":
        return []
    driver = f"device.driver == '{NVIDIA_DRA_DRIVER}'"
    attributes = f"device.attributes['{NVIDIA_DRA_DRIVER}']"
    served = [(GPU_DEVICE_CLASS, GPU_RESOURCE, f"{driver} && {attributes}.type == 'gpu'")]
    served += [(mig_device_class(profile), mig_resource(profile),
                f"{driver} && {attributes}.type == 'mig' && {attributes}.profile == '{profile}'")
               for profile in op.mig.profiles]
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": name, "labels": manifests.labels(name, COMPONENT)},
             "spec": {"selectors": [{"cel": {"expression": selector}}],
                      "extendedResourceName": resource}}
            for name, resource, selector in served]
