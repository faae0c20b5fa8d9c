"""The alerts on GPU nodes outside the platform's rules, in `promtool test rules`: a GPU node
without the GPU taint, one whose GPUs nothing serves, one with more device plugins than the GPU
path allows; each fires for the bad node and stays quiet for the good ones, on both GPU paths,
on series shaped as kube-state-metrics v2.20.0 and the DCGM exporter emit them."""

import pytest

from components import monitoring
from components.monitoring import rules as gpu_rules
from components.platform.config import load_settings
from tests.kit.harness import monitoring_of
from tests.kit.stacks import raw, with_changes
from tests.unit.test_alert_rules import DRA_SETTINGS, dra_gpu, fires, run_promtool_tests
from tests.unit.test_monitoring import SETTINGS

PATHS = pytest.mark.parametrize("settings", [SETTINGS, DRA_SETTINGS], ids=["devicePlugin", "dra"])


def node(name: str, gpu_node: bool = True, taints: tuple[str, ...] = (),
         allocatable: dict[str, int] | None = None) -> list[dict]:
    """A node's series: kube_node_labels with the GPU label when it has GPUs (allow-listed),
    a kube_node_spec_taint per `key=value:Effect`, and its allocatable resources."""
    label = ', label_nvidia_com_gpu_present="true"' if gpu_node else ""
    series = [{"series": f'kube_node_labels{{node="{name}"{label}}}', "values": "1x40"}]
    for taint in taints:
        spec, effect = taint.rsplit(":", 1)
        key, _, value = spec.partition("=")
        series.append({"series": f'kube_node_spec_taint{{node="{name}", key="{key}", '
                                 f'value="{value}", effect="{effect}"}}', "values": "1x40"})
    for resource, amount in {"cpu": 32, **(allocatable or {})}.items():
        unit = "core" if resource == "cpu" else "integer"
        series.append({"series": f'kube_node_status_allocatable{{node="{name}", '
                                 f'resource="{resource}", unit="{unit}"}}',
                       "values": f"{amount}x40"})
    return series


GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"


@PATHS
def test_a_gpu_node_without_the_gpu_taint_is_reported(promtool_bin, tmp_path, settings):
    series = [*node("tainted", taints=(GPU_TAINT, "example.com/reserved=ml:NoExecute")),
              *node("untainted"),
              # The GPU pods' toleration names the value: another one repels them.
              *node("other-value", taints=("nvidia.com/gpu=yes:NoSchedule",)),
              *node("cpu-1", gpu_node=False)]
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": series,
         "alert_rule_test": [
             fires("GpuNodeUntainted", "9m", []),
             fires("GpuNodeUntainted", "10m", [
                 {"node": "untainted", "severity": "warning"},
                 {"node": "other-value", "severity": "warning"}])]}], settings=settings)


def test_the_gpu_taint_is_the_stacks(promtool_bin, tmp_path):
    settings = load_settings(raw(with_changes(gpuNodes={
        "names": ["gpu-1"], "taint": "example.com/gpu=dedicated:NoExecute"})))
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m",
         "input_series": [*node("default-taint", taints=(GPU_TAINT,)),
                          *node("stack-taint", taints=("example.com/gpu=dedicated:NoExecute",))],
         "alert_rule_test": [fires("GpuNodeUntainted", "10m", [
             {"node": "default-taint", "severity": "warning"}])]}], settings=settings)


@pytest.mark.parametrize("taint_mode, fix", [
    ({"names": ["gpu-1"]}, "add it to gpuNodes.names and run `pulumi up`"),
    ({"taintedBy": "nodePool", "names": []},
     "kubectl taint nodes {{ $labels.node }} nvidia.com/gpu=present:NoSchedule")])
def test_the_untainted_alert_names_the_fix_of_the_taint_mode(taint_mode, fix):
    settings = load_settings(raw(with_changes(gpuNodes=taint_mode)))
    alert = next(r for r in gpu_rules.alert_rules(monitoring_of(settings))
                 if r["alert"] == "GpuNodeUntainted")
    assert fix in alert["annotations"]["description"]


def test_on_the_device_plugin_path_a_gpu_node_advertising_no_gpu_is_reported(promtool_bin,
                                                                            tmp_path):
    unserved = [{"node": "zero", "severity": "warning"}, {"node": "absent", "severity": "warning"}]
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            *node("served", allocatable={"nvidia_com_gpu": 8}),
            *node("zero", allocatable={"nvidia_com_gpu": 0}),
            *node("absent"),
            # Every GPU MIG-partitioned, mixed strategy: served as slices.
            *node("mig", allocatable={"nvidia_com_gpu": 0, "nvidia_com_mig_1g_10gb": 7}),
            *node("cpu-1", gpu_node=False, allocatable={"nvidia_com_gpu": 0})],
         "alert_rule_test": [fires("GpuNodeGpusNotServed", "29m", []),
                             fires("GpuNodeGpusNotServed", "30m", unserved)]}])


def test_on_the_dra_path_a_gpu_node_the_exporter_reports_no_gpu_for_is_reported(promtool_bin,
                                                                               tmp_path):
    # No node advertises GPUs in its status on the DRA path: the exporter's GPUs count.
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            *node("served", allocatable={"nvidia_com_gpu": 0}),
            *({**dra_gpu("served", i), "values": "50x40"} for i in range(2)),
            *node("unpublished", allocatable={"nvidia_com_gpu": 0}),
            *node("cpu-1", gpu_node=False)],
         "alert_rule_test": [
             fires("GpuNodeGpusNotServed", "29m", []),
             fires("GpuNodeGpusNotServed", "30m",
                   [{"node": "unpublished", "severity": "warning"}])]}],
        settings=DRA_SETTINGS)


def pod(node_name: str, name: str, containers: dict[str, str], phase: str = "Running"
        ) -> list[dict]:
    """A pod's series: kube_pod_info with its node, kube_pod_status_phase, and
    kube_pod_container_info for each container (name: image)."""
    labels = f'namespace="kube-system", pod="{name}", uid="{name}-uid"'
    series = [
        {"series": f'kube_pod_info{{{labels}, host_ip="10.0.0.1", pod_ip="10.1.0.9", '
                   f'node="{node_name}", created_by_kind="DaemonSet", created_by_name='
                   f'"{name.rsplit("-", 1)[0]}", priority_class="system-node-critical", '
                   f'host_network="false"}}', "values": "1x40"},
        *({"series": f'kube_pod_status_phase{{{labels}, phase="{each}"}}',
           "values": f"{int(each == phase)}x40"} for each in ("Pending", "Running")),
    ]
    for container, image in containers.items():
        series.append({"series": f'kube_pod_container_info{{{labels}, container="{container}", '
                                 f'image_spec="{image}", image="{image}", image_id="{image}@sha'
                                 f'256:0", container_id="containerd://{name}-{container}"}}',
                       "values": "1x40"})
    return series


PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
OPERATORS_PLUGIN = {"nvidia-device-plugin": PLUGIN_IMAGE, "config-manager": PLUGIN_IMAGE}
# NVIDIA's own chart: the plugin and its config sidecar in one pod.
CHARTS_PLUGIN = {"nvidia-device-plugin-ctr": PLUGIN_IMAGE,
                 "nvidia-device-plugin-sidecar": PLUGIN_IMAGE}
GKES_PLUGIN = {"nvidia-gpu-device-plugin": "gke.gcr.io/nvidia-gpu-device-plugin:v1.0"}
# GPU Feature Discovery runs from the device plugin's image and serves nothing.
GFD = {"gpu-feature-discovery": PLUGIN_IMAGE}


def test_on_the_device_plugin_path_a_second_device_plugin_is_reported(promtool_bin, tmp_path):
    series = [*pod("chart", "nvidia-device-plugin-daemonset-a", OPERATORS_PLUGIN),
              *pod("chart", "nvidia-device-plugin-b", CHARTS_PLUGIN),
              *pod("gke", "nvidia-device-plugin-daemonset-c", OPERATORS_PLUGIN),
              *pod("gke", "nvidia-gpu-device-plugin-d", GKES_PLUGIN),
              *pod("one", "nvidia-device-plugin-daemonset-e", OPERATORS_PLUGIN),
              *pod("one", "gpu-feature-discovery-f", GFD),
              # A replacement not yet running.
              *pod("rolling", "nvidia-device-plugin-daemonset-g", OPERATORS_PLUGIN),
              *pod("rolling", "nvidia-device-plugin-daemonset-h", OPERATORS_PLUGIN,
                   phase="Pending")]
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": series,
         "alert_rule_test": [
             fires("GpuNodeExtraDevicePlugin", "14m", []),
             fires("GpuNodeExtraDevicePlugin", "15m", [
                 {"node": "chart", "severity": "warning"},
                 {"node": "gke", "severity": "warning"}])]}])


def test_on_the_dra_path_any_device_plugin_is_reported(promtool_bin, tmp_path):
    dra_driver = {"gpus": "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            *pod("plugin", "nvidia-device-plugin-daemonset-a", OPERATORS_PLUGIN),
            *pod("plugin", "nvidia-dra-driver-gpu-kubelet-plugin-b", dra_driver),
            *pod("dra-only", "nvidia-dra-driver-gpu-kubelet-plugin-c", dra_driver)],
         "alert_rule_test": [
             fires("GpuNodeExtraDevicePlugin", "14m", []),
             fires("GpuNodeExtraDevicePlugin", "15m",
                   [{"node": "plugin", "severity": "warning"}])]}], settings=DRA_SETTINGS)


def test_kube_state_metrics_is_told_to_carry_the_label_the_alerts_read():
    """The series above carry label_nvidia_com_gpu_present only if kube-state-metrics is told
    to keep the node label."""
    values = monitoring.chart_values(monitoring_of(SETTINGS))
    assert "nodes=[nvidia.com/gpu.present]" in \
        values["kube-state-metrics"]["metricLabelsAllowlist"]
