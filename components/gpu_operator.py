"""NVIDIA GPU Operator: its namespace and the pinned Helm release."""

from dataclasses import dataclass

import pulumi
import yaml

from . import charts, kube
from .args import GpuOperatorArgs
from .facts import GPU_RESOURCE
from .inputs import GpuOperatorInputs
from .settings import STACK, to_snake
from .validation import Subject

CHART = "gpu-operator"
COMPONENT = "gpu-operator"

# Facts of the pinned chart (assets/state-dcgm-exporter at v26.7.0): the Service the operator
# creates for the DCGM exporter. The Monitoring component's ServiceMonitor selects it.
DCGM_SERVICE_LABELS = {"app": "nvidia-dcgm-exporter"}
DCGM_METRICS_PORT = "gpu-metrics"

# The chart's NFD worker tolerates control-plane nodes by default; replacing its toleration list
# must keep that, or NFD stops labelling GPU-equipped control-plane nodes.
_CONTROL_PLANE_TOLERATION = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                             "effect": "NoSchedule"}

TIME_SLICING_CONFIG = "time-slicing"

# Facts of the pinned chart (v26.7.0): every pod it runs in the operator's namespace has the
# priority system-node-critical (operator.priorityClassName, daemonsets.priorityClassName for
# each operand DaemonSet in assets/state-*, node-feature-discovery's priorityClassName for its
# master, worker and garbage collector). On each GPU node: the validator, and the operand
# DaemonSets each switch turns on (sandboxWorkloads: the sandbox device plugin and validator).
OPERANDS_PER_SWITCH = {"driver": 1, "toolkit": 1, "devicePlugin": 1, "dcgmExporter": 1,
                       "gfd": 1, "migManager": 1, "sandboxWorkloads": 2, "vgpuManager": 1,
                       "vgpuDeviceManager": 1, "vfioManager": 1}
ALWAYS_ON_OPERANDS = 1          # nvidia-operator-validator
NFD_PER_NODE = 1                # the NFD worker, on every node
NFD_DEPLOYMENTS = 2             # NFD master and garbage collector, one replica each
OPERATOR_REPLICAS = 1


@dataclass(frozen=True)
class ChartImage:
    """An image of the pinned chart: where its `repository` value is, that repository, the
    image name and tag (None: the chart's version), and the switch that deploys it."""
    path: tuple[str, ...]
    repository: str
    image: str
    tag: str | None
    switch: str | None

    def ref(self, inputs: GpuOperatorInputs) -> str:
        tag = self.tag or inputs.gpu_operator.chart_version
        name = f"{self.repository}/{self.image}" if self.image else self.repository
        return f"{inputs.mirrored(name)}:{tag}"


# Facts of the pinned chart (deployments/gpu-operator/values.yaml and the vendored
# node-feature-discovery 0.19.0 chart at v26.7.0). The driver image gets the node's OS appended
# to its tag by the operator (595.91.07-ubuntu24.04, ...); mirror every OS the nodes run.
CHART_IMAGES = (
    ChartImage(("operator",), "nvcr.io/nvidia", "gpu-operator", None, None),
    ChartImage(("validator",), "nvcr.io/nvidia", "gpu-operator", None, None),
    ChartImage(("driver",), "nvcr.io/nvidia", "driver", "595.91.07", "driver"),
    ChartImage(("driver", "manager"), "nvcr.io/nvidia/cloud-native", "k8s-driver-manager",
               "v0.12.0", "driver"),
    ChartImage(("toolkit",), "nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0", "toolkit"),
    ChartImage(("devicePlugin",), "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0",
               "devicePlugin"),
    ChartImage(("dcgmExporter",), "nvcr.io/nvidia/k8s", "dcgm-exporter",
               "4.6.0-4.8.3-distroless", "dcgmExporter"),
    ChartImage(("gfd",), "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0", "gfd"),
    ChartImage(("migManager",), "nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.15.0",
               "migManager"),
    ChartImage(("vgpuDeviceManager",), "nvcr.io/nvidia/cloud-native", "vgpu-device-manager",
               "v0.5.0", "vgpuDeviceManager"),
    ChartImage(("vfioManager",), "nvcr.io/nvidia/cloud-native", "k8s-driver-manager",
               "v0.12.0", "vfioManager"),
    ChartImage(("sandboxDevicePlugin",), "nvcr.io/nvidia", "kubevirt-gpu-device-plugin",
               "v1.6.0", "sandboxWorkloads"),
    ChartImage(("node-feature-discovery", "image"), "registry.k8s.io/nfd/node-feature-discovery",
               "", "v0.19.0", "nfd"),
)


def chart_images(inputs: GpuOperatorInputs) -> list[ChartImage]:
    """The chart's images this stack's switches deploy."""
    op = inputs.gpu_operator
    return [image for image in CHART_IMAGES
            if image.switch is None or getattr(op, to_snake(image.switch)).enabled]


def mirror_values(inputs: GpuOperatorInputs) -> dict:
    """Every image repository of the chart pointed at the mirror (all of them, so that an
    operand switched on later is pulled from it too)."""
    values: dict = {}
    for image in CHART_IMAGES:
        node = values
        for key in image.path:
            node = node.setdefault(key, {})
        node["repository"] = inputs.mirrored(image.repository)
    return values

# Chart keys that would hand GPUs out through Dynamic Resource Allocation (gpuCluster.deployCR
# with clusterPolicy.deployCR false, and the driver's own settings), which the admission policy,
# the binpack scheduler's scoring and the dashboard do not cover yet.
DRA_KEYS = ("draDriver", "gpuCluster", "clusterPolicy")
DRA_UNSUPPORTED = ("Dynamic Resource Allocation of GPUs is not supported by this platform yet "
                   "(its pods would bypass the binpack scheduler's scoring, the admission policy "
                   "and the dashboard); allowed: request nvidia.com/gpu through the device plugin")
# The toolkit's NRI plugin injects the CDI devices a pod's annotation names
# (nvidia.cdi.k8s.io/...), a way to a GPU other than the GPU resource; the admission policy
# refuses the annotation, and the chart value that turns the plugin on is refused here.
NRI_UNSUPPORTED = ("the container toolkit's NRI plugin injects the GPUs a pod annotation names, "
                   "outside the binpack scheduler and the GPU resource; allowed: leave it off "
                   "(GPUs reach containers through the device plugin)")
UNSUPPORTED_VALUES = {**{(key,): DRA_UNSUPPORTED for key in DRA_KEYS},
                      ("cdi", "nriPluginEnabled"): NRI_UNSUPPORTED}

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


def gpu_node_tolerations(inputs: GpuOperatorInputs) -> list[dict]:
    """Tolerations for every taint the GPU nodes carry."""
    return [taint.toleration() for taint in inputs.gpu_nodes.taints]


def time_slicing_config(replicas: int) -> str:
    """The device plugin's sharing config: each GPU is advertised `replicas` times."""
    return yaml.safe_dump({
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}},
    }, sort_keys=False)


def operator_values(inputs: GpuOperatorInputs) -> dict:
    """Chart values generated from the settings (before the stack's extra values)."""
    op = inputs.gpu_operator
    tolerations = gpu_node_tolerations(inputs)
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
        "cdi": {"enabled": op.cdi.enabled, "nriPluginEnabled": False},
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


def chart_values(inputs: GpuOperatorInputs, subject: Subject = STACK) -> dict:
    """The values the release is installed with: generated values plus the stack's extras."""
    generated = operator_values(inputs)
    if inputs.image_registry_mirror:
        generated = charts.deep_merge(generated, mirror_values(inputs))
    return charts.merge_values(generated, inputs.gpu_operator.extra_values,
                               "gpuOperator.extraValues", subject,
                               unsupported=UNSUPPORTED_VALUES)


def critical_pods(inputs: GpuOperatorInputs) -> int:
    """The operator namespace's pods of the critical priority classes, at most: each operand
    on each GPU node, an NFD worker on each node, the Deployments; and as many again of each
    DaemonSet and Deployment as a rolling update replaces at a time (one pod each), since a
    pod still terminating counts."""
    op = inputs.gpu_operator
    operands = ALWAYS_ON_OPERANDS + sum(count for switch, count in OPERANDS_PER_SWITCH.items()
                                        if getattr(op, to_snake(switch)).enabled)
    names = inputs.gpu_nodes.names
    gpu_nodes = len(names) if names is not None else op.max_cluster_nodes
    nodes = max(op.max_cluster_nodes, gpu_nodes)
    nfd = op.nfd.enabled
    per_node_kinds = operands + (NFD_PER_NODE if nfd else 0)
    deployments = OPERATOR_REPLICAS + (NFD_DEPLOYMENTS if nfd else 0)
    running = operands * gpu_nodes + (NFD_PER_NODE * nodes if nfd else 0) + deployments
    return running + per_node_kinds + deployments


def critical_pods_quota(inputs: GpuOperatorInputs) -> dict:
    return kube.critical_pods_quota(inputs.gpu_operator.namespace, COMPONENT,
                                    critical_pods(inputs),
                                    (kube.NODE_CRITICAL_PRIORITY, kube.CRITICAL_PRIORITY))


def operator_namespace(inputs: GpuOperatorInputs) -> dict:
    # The operands (driver, toolkit, device plugin, DCGM exporter) run privileged on the nodes.
    return kube.namespace(inputs.gpu_operator.namespace, "privileged", COMPONENT)


class GpuOperator(kube.Component):
    """NVIDIA's GPU Operator: its namespace, the namespace's quota of critical pods, and the
    pinned Helm release."""

    namespace: str
    "The operator's namespace, where the DCGM exporter Service is."
    mig_resources: list[str]
    ("The MIG resources GPU nodes advertise (`nvidia.com/mig-<profile>`, with the mixed "
     "strategy): the binpack scheduler packs them as GPUs.")

    def __init__(self, name: str, args: GpuOperatorArgs,
                 opts: pulumi.ResourceOptions | None = None):
        inputs = self.inputs(GpuOperatorInputs, args)
        values = chart_values(inputs, self.args_subject())
        super().__init__(name, opts)
        op = inputs.gpu_operator
        namespace = kube.declare(operator_namespace(inputs), self)
        # The quota first: where critical-priority pods need one, they are refused without it.
        quota = kube.declare(critical_pods_quota(inputs), self, [namespace])
        self.release = charts.release(
            op.release_name, chart=CHART, version=op.chart_version, repository=op.repository,
            namespace=op.namespace, values=charts.values_input(values, inputs.secret_values),
            parent=self, protection=op.protection, chart_path=op.chart_path,
            depends_on=[namespace, quota])
        self.namespace = op.namespace
        self.mig_resources = op.mig.resources
        self.register_outputs({"namespace": self.namespace, "migResources": self.mig_resources})
