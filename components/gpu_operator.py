"""NVIDIA GPU Operator: its namespace and the pinned Helm release."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pulumi
import yaml

from . import charts, kube
from .settings import GPU_RESOURCE, StackSettings

CHART = "gpu-operator"

# Facts of the pinned chart (assets/state-dcgm-exporter at v26.7.0): the Service the operator
# creates for the DCGM exporter. The Monitoring component's ServiceMonitor selects it.
DCGM_SERVICE_LABELS = {"app": "nvidia-dcgm-exporter"}
DCGM_METRICS_PORT = "gpu-metrics"

# The chart's NFD worker tolerates control-plane nodes by default; replacing its toleration list
# must keep that, or NFD stops labelling GPU-equipped control-plane nodes.
_CONTROL_PLANE_TOLERATION = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                             "effect": "NoSchedule"}

TIME_SLICING_CONFIG = "time-slicing"

# Chart keys that would hand GPUs out through Dynamic Resource Allocation (gpuCluster.deployCR
# with clusterPolicy.deployCR false, and the driver's own settings), which the admission policy,
# the binpack scheduler's scoring and the dashboard do not cover yet.
DRA_KEYS = ("draDriver", "gpuCluster", "clusterPolicy")
DRA_UNSUPPORTED = ("Dynamic Resource Allocation of GPUs is not supported by this platform yet "
                   "(its pods would bypass the binpack scheduler's scoring, the admission policy "
                   "and the dashboard); allowed: request nvidia.com/gpu through the device plugin")

# Unprivileged containers see only the GPUs allocated to them. The toolkit ignores
# NVIDIA_VISIBLE_DEVICES (which CUDA images set to `all`, and which can arrive through envFrom
# where no policy sees it) unless the container is privileged; the operator's own operands are.
# With CDI (the chart's default) the device plugin hands devices over as CDI devices already;
# without it, as volume mounts instead of that variable.
TOOLKIT_HARDENING = [
    {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]
LEGACY_TOOLKIT_HARDENING = [
    {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"}]
LEGACY_DEVICE_PLUGIN_HARDENING = [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]


def gpu_node_tolerations(settings: StackSettings) -> list[dict]:
    """Tolerations for every taint the program puts on GPU nodes."""
    return [taint.toleration() for taint in settings.gpu_nodes.taints]


def time_slicing_config(replicas: int) -> str:
    """The device plugin's sharing config: each GPU is advertised `replicas` times."""
    return yaml.safe_dump({
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}},
    }, sort_keys=False)


def operator_values(settings: StackSettings) -> dict:
    """Chart values generated from the settings (before the stack's extra values)."""
    op = settings.gpu_operator
    tolerations = gpu_node_tolerations(settings)
    device_plugin: dict = {"enabled": op.device_plugin.enabled}
    toolkit: dict = {"enabled": op.toolkit.enabled}
    if op.restrict_visible_devices:
        toolkit["env"] = TOOLKIT_HARDENING
        if not op.cdi.enabled:
            toolkit["env"] = TOOLKIT_HARDENING + LEGACY_TOOLKIT_HARDENING
            device_plugin["env"] = LEGACY_DEVICE_PLUGIN_HARDENING
    if op.time_slicing.replicas:
        device_plugin["config"] = {
            "create": True,
            "name": TIME_SLICING_CONFIG,
            "default": "default",
            "data": {"default": time_slicing_config(op.time_slicing.replicas)},
        }
    return {
        # Helm installs CRDs but never upgrades them: the chart's pre-upgrade hook applies the
        # new version's CRDs (ClusterPolicy, NVIDIADriver) before the new operator starts.
        "operator": {"upgradeCRD": True},
        "driver": {"enabled": op.driver.enabled},
        "toolkit": toolkit,
        "cdi": {"enabled": op.cdi.enabled},
        "devicePlugin": device_plugin,
        # Monitoring declares the one ServiceMonitor; a second would scrape every GPU twice.
        "dcgmExporter": {"enabled": op.dcgm_exporter.enabled, "serviceMonitor": {"enabled": False}},
        "nfd": {"enabled": op.nfd.enabled},
        "gfd": {"enabled": op.gfd.enabled},
        "migManager": {"enabled": op.mig_manager.enabled},
        "mig": {"strategy": op.mig.strategy},
        "sandboxWorkloads": {"enabled": op.sandbox_workloads.enabled},
        "vgpuManager": {"enabled": op.vgpu_manager.enabled},
        "vgpuDeviceManager": {"enabled": op.vgpu_device_manager.enabled},
        "vfioManager": {"enabled": op.vfio_manager.enabled},
        "daemonsets": {"tolerations": tolerations},
        "node-feature-discovery": {"worker": {"tolerations": [_CONTROL_PLANE_TOLERATION,
                                                              *tolerations]}},
    }


def chart_values(settings: StackSettings) -> dict:
    """The values the release is installed with: generated values plus the stack's extras."""
    return charts.merge_values(operator_values(settings), settings.gpu_operator.extra_values,
                               "gpuOperator.extraValues",
                               unsupported={key: DRA_UNSUPPORTED for key in DRA_KEYS})


def operator_namespace(settings: StackSettings) -> dict:
    # The operands (driver, toolkit, device plugin, DCGM exporter) run privileged on the nodes.
    return kube.namespace(settings.gpu_operator.namespace, "privileged", "gpu-operator")


class GpuOperator(pulumi.ComponentResource):
    """Namespace and pinned `gpu-operator` release (with `values` from `chart_values`);
    installed after the GPU nodes are tainted."""

    def __init__(self, name: str, settings: StackSettings, values: Any,
                 after: Optional[Sequence[pulumi.Resource]] = None,
                 prefix: str = "",
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:GpuOperator", name, None, opts)
        self.child_prefix = prefix
        op = settings.gpu_operator
        self.namespace = kube.declare(operator_namespace(settings), self)
        self.release = charts.release(
            op.release_name, chart=CHART, version=op.chart_version, repository=op.repository,
            namespace=op.namespace, values=values, parent=self, protection=op.protection,
            depends_on=[self.namespace, *(after or [])])
        self.register_outputs({"namespace": op.namespace, "chartVersion": op.chart_version,
                               "releaseStatus": self.release.status})
