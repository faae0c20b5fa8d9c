"""NVIDIA GPU Operator: its namespace and the pinned Helm release."""

from dataclasses import dataclass

import pulumi
import yaml

from . import charts, kube
from .args import GpuOperatorArgs
from .facts import (
    DRA_ADMIN_ACCESS_LABEL,
    DRA_DRIVER_VALUES,
    GPU_RESOURCE,
    NVIDIA_DRA_DRIVER,
    mig_resource,
)
from .inputs import GpuOperatorInputs
from .settings import STACK, GpuOperatorSettings, to_snake
from .validation import Subject

CHART = "gpu-operator"
COMPONENT = "gpu-operator"

# Facts of the pinned chart (assets/state-dcgm-exporter, and manifests/state-dcgm-exporter for
# the DRA stack, at v26.7.0): the Service the operator creates for the DCGM exporter, on each
# GPU path. The Monitoring component's ServiceMonitor selects it.
DCGM_SERVICE_LABELS = {"devicePlugin": {"app": "nvidia-dcgm-exporter"},
                       "dra": {"app": "nvidia-dcgm-exporter-dra"}}
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
# The GPUCluster (DRA) stack (manifests/state-dra-driver, state-dra-validation): the DRA
# driver's kubelet plugin and validator on each GPU node, and the compute-domain controller.
DRA_OPERANDS = 2
DRA_DEPLOYMENTS = 1
NFD_PER_NODE = 1                # the NFD worker, on every node
NFD_DEPLOYMENTS = 2             # NFD master and garbage collector, one replica each
OPERATOR_REPLICAS = 1


@dataclass(frozen=True)
class ChartImage:
    """An image of the pinned chart: where its `repository` value is, that repository, the
    image name and tag (None: the chart's version), the switch that deploys it, and the GPU
    path it runs on (None: both)."""
    path: tuple[str, ...]
    repository: str
    image: str
    tag: str | None
    switch: str | None
    gpu_path: str | None = None

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
    ChartImage(("toolkit",), "nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0", "toolkit",
               "devicePlugin"),
    ChartImage(("devicePlugin",), "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0",
               "devicePlugin", "devicePlugin"),
    ChartImage(("draDriver",), "nvcr.io/nvidia", "dra-driver-nvidia-gpu", "v0.5.0", None,
               "dra"),
    ChartImage(("dcgmExporter",), "nvcr.io/nvidia/k8s", "dcgm-exporter",
               "4.6.0-4.8.3-distroless", "dcgmExporter"),
    ChartImage(("gfd",), "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0", "gfd",
               "devicePlugin"),
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
    """The chart's images this stack's GPU path and switches deploy."""
    op = inputs.gpu_operator
    return [image for image in CHART_IMAGES
            if image.gpu_path in (None, op.gpu_path)
            and (image.switch is None or getattr(op, to_snake(image.switch)).enabled)]


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

# The DRA driver's values, on the device plugin path: they would start NVIDIA's DRA driver beside
# the device plugin, handing the same GPUs out twice.
DRA_ON_DEVICE_PLUGIN_PATH = ("the DRA driver's settings take effect only on the DRA path, and "
                             "beside the device plugin it would hand the same GPUs out twice; "
                             "allowed: gpuOperator.gpuPath: dra to run it instead")
# The toolkit's NRI plugin injects the CDI devices a pod's annotation names
# (nvidia.cdi.k8s.io/...), a way to a GPU other than the GPU resource; the admission policy
# refuses the annotation, and the chart value that turns the plugin on is refused here.
NRI_UNSUPPORTED = ("the container toolkit's NRI plugin injects the GPUs a pod annotation names, "
                   "outside the binpack scheduler and the GPU resource; allowed: leave it off "
                   "(GPUs reach containers through the device plugin)")
UNSUPPORTED_VALUES: dict[tuple[str, ...], str] = {("cdi", "nriPluginEnabled"): NRI_UNSUPPORTED}

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


def gpu_path_values(inputs: GpuOperatorInputs) -> dict:
    """Which of the chart's two stacks it deploys: the ClusterPolicy (device plugin, toolkit and
    their managers) or the GPUCluster (NVIDIA's DRA driver, DCGM and its exporter). With the
    DRA stack a driver the operator installs comes from an NVIDIADriver resource (the chart
    refuses the driver otherwise)."""
    op = inputs.gpu_operator
    dra = op.gpu_path == "dra"
    values: dict = {"clusterPolicy": {"deployCR": not dra}, "gpuCluster": {"deployCR": dra}}
    if dra and op.driver.enabled:
        values["driver"] = {"nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": True}}
    return values


def unknown_dra_values(extra: dict, known: dict | None = None,
                       path: tuple[str, ...] = ("draDriver",)) -> list[tuple[str, ...]]:
    """The keys under `draDriver` that the pinned chart does not have, each as its path."""
    known = DRA_DRIVER_VALUES if known is None else known
    unknown = []
    for key, value in extra.items():
        if key not in known:
            unknown.append((*path, key))
        elif isinstance(known[key], dict) and isinstance(value, dict):
            unknown += unknown_dra_values(value, known[key], (*path, key))
    return unknown


def chart_values(inputs: GpuOperatorInputs, subject: Subject = STACK) -> dict:
    """The values the release is installed with: generated values plus the stack's extras."""
    op = inputs.gpu_operator
    generated = charts.deep_merge(operator_values(inputs), gpu_path_values(inputs))
    if inputs.image_registry_mirror:
        generated = charts.deep_merge(generated, mirror_values(inputs))
    unsupported = dict(UNSUPPORTED_VALUES)
    extra_dra = op.extra_values.get("draDriver")
    if op.gpu_path == "devicePlugin":
        unsupported[("draDriver",)] = DRA_ON_DEVICE_PLUGIN_PATH
    elif isinstance(extra_dra, dict):
        known = ", ".join(sorted(DRA_DRIVER_VALUES))
        unsupported |= {path: f"the pinned chart ({CHART} {op.chart_version}) has no such "
                              f"DRA driver value; allowed under draDriver: {known}"
                        for path in unknown_dra_values(extra_dra)}
    return charts.merge_values(generated, op.extra_values, "gpuOperator.extraValues", subject,
                               unsupported=unsupported)


def critical_pods(inputs: GpuOperatorInputs) -> int:
    """The operator namespace's pods of the critical priority classes, at most: each operand
    on each GPU node, an NFD worker on each node, the Deployments; and as many again of each
    DaemonSet and Deployment as a rolling update replaces at a time (one pod each), since a
    pod still terminating counts."""
    op = inputs.gpu_operator
    if op.gpu_path == "dra":
        # The GPUCluster stack: the DRA driver's kubelet plugin and validator on each GPU node,
        # the DCGM exporter and the driver when on; its compute-domain controller.
        operands = DRA_OPERANDS + sum(OPERANDS_PER_SWITCH[switch] for switch in
                                      ("driver", "dcgmExporter")
                                      if getattr(op, to_snake(switch)).enabled)
    else:
        operands = ALWAYS_ON_OPERANDS + sum(count for switch, count in OPERANDS_PER_SWITCH.items()
                                            if getattr(op, to_snake(switch)).enabled)
    names = inputs.gpu_nodes.names
    gpu_nodes = len(names) if names is not None else op.max_cluster_nodes
    nodes = max(op.max_cluster_nodes, gpu_nodes)
    nfd = op.nfd.enabled
    per_node_kinds = operands + (NFD_PER_NODE if nfd else 0)
    deployments = (OPERATOR_REPLICAS + (NFD_DEPLOYMENTS if nfd else 0)
                   + (DRA_DEPLOYMENTS if op.gpu_path == "dra" else 0))
    running = operands * gpu_nodes + (NFD_PER_NODE * nodes if nfd else 0) + deployments
    return running + per_node_kinds + deployments


def critical_pods_quota(inputs: GpuOperatorInputs) -> dict:
    return kube.critical_pods_quota(inputs.gpu_operator.namespace, COMPONENT,
                                    critical_pods(inputs),
                                    (kube.NODE_CRITICAL_PRIORITY, kube.CRITICAL_PRIORITY))


def operator_namespace(inputs: GpuOperatorInputs) -> dict:
    # The operands (driver, toolkit, device plugin, DCGM exporter) run privileged on the nodes.
    namespace = kube.namespace(inputs.gpu_operator.namespace, "privileged", COMPONENT)
    if inputs.gpu_operator.gpu_path == "dra":
        # The DCGM exporter claims every GPU with adminAccess (to read them all), which the API
        # server allows only in a namespace labelled so; the operator labels it, and the
        # program declares it so that the two agree.
        namespace["metadata"]["labels"][DRA_ADMIN_ACCESS_LABEL[0]] = DRA_ADMIN_ACCESS_LABEL[1]
    return namespace


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
             "metadata": {"name": name, "labels": kube.labels(name, COMPONENT)},
             "spec": {"selectors": [{"cel": {"expression": selector}}],
                      "extendedResourceName": resource}}
            for name, resource, selector in served]


class GpuOperator(kube.Component):
    """NVIDIA's GPU Operator: its namespace, the namespace's quota of critical pods, and the
    pinned Helm release."""

    namespace: str
    "The operator's namespace, where the DCGM exporter Service is."
    mig_resources: list[str]
    ("The MIG resources GPU nodes advertise (`nvidia.com/mig-<profile>`, with the mixed "
     "strategy): the binpack scheduler packs them as GPUs.")
    gpu_path: str
    "How pods reach GPUs: `devicePlugin` or `dra`."
    served_resources: dict[str, list[str]]
    ("On the DRA path, each GPU resource and the DeviceClasses whose claims hold it (the "
     "platform's own first).")

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
        kube.declare_all(device_classes(inputs), self)
        self.namespace = op.namespace
        self.mig_resources = op.mig.resources
        self.gpu_path = op.gpu_path
        self.served_resources = served_resources(op)
        self.register_outputs({"namespace": self.namespace, "migResources": self.mig_resources,
                               "gpuPath": self.gpu_path,
                               "servedResources": self.served_resources})
