"""The GPU Operator chart's values: the operands each switch and GPU path deploys, the
mirror, hardening, and the DRA driver's values checked against the pinned chart's."""

from dataclasses import dataclass

import yaml

from ..base import charts
from ..base.facts import GPU_RESOURCE
from ..base.model import to_snake
from ..base.validation import STACK, Subject
from .inputs import GpuOperatorInputs
from .settings import GpuOperatorSettings

CHART = "gpu-operator"
COMPONENT = "gpu-operator"

# The pinned chart's DRA values (deployments/gpu-operator/values.yaml of v26.7.0): the keys
# under draDriver a stack may set. The GPUCluster resource deploys the DRA driver when
# gpuCluster.deployCR is on and clusterPolicy.deployCR off.
DRA_DRIVER_VALUES = {"repository": None, "image": None, "version": None,
                     "imagePullPolicy": None, "imagePullSecrets": None, "featureGates": None,
                     "gpus": {"kubeletPlugin": None},
                     "computeDomains": {"enabled": None, "controller": None,
                                        "kubeletPlugin": None}}
# The chart's NFD worker tolerates control-plane nodes by default; replacing its toleration list
# must keep that, or NFD stops labelling GPU-equipped control-plane nodes.
_CONTROL_PLANE_TOLERATION = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                             "effect": "NoSchedule"}
TIME_SLICING_CONFIG = "time-slicing"


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

    def deployed(self, op: GpuOperatorSettings) -> bool:
        """Whether a stack of these settings runs it: its GPU path, and its switch on."""
        return (self.gpu_path in (None, op.gpu_path)
                and (self.switch is None or getattr(op, to_snake(self.switch)).enabled))


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
    return [image for image in CHART_IMAGES if image.deployed(inputs.gpu_operator)]


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
    tolerations = gpu_node_tolerations(inputs) + [
        {"key": taint.key, "operator": "Exists", "effect": "NoSchedule"}
        for taint in inputs.gpu_nodes.passing_taints]
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


def generated_values(inputs: GpuOperatorInputs) -> dict:
    """The values the program derives from the settings."""
    generated = charts.deep_merge(operator_values(inputs), gpu_path_values(inputs))
    if inputs.image_registry_mirror:
        generated = charts.deep_merge(generated, mirror_values(inputs))
    return generated


def chart_values(inputs: GpuOperatorInputs) -> dict:
    """The values the release is installed with: generated values plus the stack's extras
    (which check_chart_values has checked)."""
    return charts.deep_merge(generated_values(inputs), inputs.gpu_operator.extra_values)


def check_chart_values(inputs: GpuOperatorInputs, subject: Subject = STACK) -> None:
    """The stack's extra values may be merged over the generated ones (SettingsError naming
    each key that may not)."""
    op = inputs.gpu_operator
    unsupported = dict(UNSUPPORTED_VALUES)
    extra_dra = op.extra_values.get("draDriver")
    if op.gpu_path == "devicePlugin":
        unsupported[("draDriver",)] = DRA_ON_DEVICE_PLUGIN_PATH
    elif isinstance(extra_dra, dict):
        known = ", ".join(sorted(DRA_DRIVER_VALUES))
        unsupported |= {path: f"the pinned chart ({CHART} {op.chart_version}) has no such "
                              f"DRA driver value; allowed under draDriver: {known}"
                        for path in unknown_dra_values(extra_dra)}
    charts.check_extra_values(generated_values(inputs), op.extra_values,
                              "gpuOperator.extraValues", subject, unsupported=unsupported)
