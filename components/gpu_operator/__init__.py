"""NVIDIA's GPU Operator: its namespace, its quota of critical pods, its pinned Helm release,
and on the DRA path the platform's DeviceClasses."""

from .component import GpuOperator, critical_pods, critical_pods_quota, operator_namespace
from .dra import (
    GPU_DEVICE_CLASS,
    NVIDIA_DRA_DRIVER,
    NVIDIA_DRA_KUBELET_PLUGIN,
    device_classes,
    mig_device_class,
    served_resources,
)
from .inputs import GpuOperatorInputs
from .values import chart_images, chart_values, check_chart_values, gpu_node_tolerations

__all__ = ["GPU_DEVICE_CLASS", "GpuOperator", "GpuOperatorInputs", "NVIDIA_DRA_DRIVER",
           "NVIDIA_DRA_KUBELET_PLUGIN", "chart_images", "chart_values", "check_chart_values",
           "critical_pods", "critical_pods_quota", "device_classes", "gpu_node_tolerations",
           "mig_device_class", "operator_namespace", "served_resources"]
