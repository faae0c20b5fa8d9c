"""GPU use next to allocation, in `promtool test rules`: which GPUs each pod, namespace and team
holds and uses, the GPU-hours allocated, used and idle over the window, and which pods hold idle
GPUs, for busy, idle, intermittently busy and newly started pods, on both GPU paths, on series
shaped as the pinned DCGM exporter labels them (4.5.3-4.8.2: `gpu`, `UUID`, `pci_bus_id`,
`device`, `modelName`, `Hostname`, the driver version, and the pod's `namespace`, `pod`,
`container`; in DRA mode `hostname` and the claim's `dra_*` labels). Also: the dashboard's
showback tables on the same series, and the settings' errors."""

import re

import pytest

from components.base.validation import SettingsError
from components.monitoring import dashboard
from components.monitoring import usage as gpu_usage
from components.platform.config import load_settings
from tests.kit.harness import monitoring_of
from tests.kit.stacks import raw, with_changes
from tests.unit.test_alert_rules import run_promtool_tests
from tests.unit.test_monitoring import GRAFANA_VARIABLES

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
# Two teams, one with two namespaces; a namespace `other` belongs to none.
TEAMS = {"enabled": True, "teams": [
    {"name": "research", "namespaces": ["research", "research-batch"],
     "quota": {"gpu": {"nvidia.com/gpu": 4}}},
    {"name": "vision", "namespaces": ["vision"], "quota": {"gpu": {"nvidia.com/gpu": 4}}}]}
USAGE = {"pricePerGpuHour": {H100: 2.5}, "currency": "EUR"}
DEVICE_PLUGIN = load_settings(raw(with_changes(teams=TEAMS, monitoring={"usage": USAGE})))
DRA = load_settings(raw(with_changes(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"},
                                     teams=TEAMS, monitoring={"usage": USAGE})))
PATHS = pytest.mark.parametrize("settings", [DEVICE_PLUGIN, DRA], ids=["devicePlugin", "dra"])

PROFILING = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTILIZATION = "DCGM_FI_DEV_GPU_UTIL"


def exporter(metric: str, settings, gpu: int, values: str, pod: str | None = None,
             namespace: str = "research", node: str = "n1", model: str = H100) -> dict:
    """One GPU's series as the platform's ServiceMonitor stores it: the exporter's labels, with
    the pod the GPU is allocated to (none for a free GPU), and `node`."""
    labels = {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "modelName": model, "node": node,
              "job": "nvidia-dcgm-exporter", "instance": f"{node}:9400"}
    if settings.gpu_operator.gpu_path == "dra":
        labels["hostname"] = node
        if pod:
            labels |= {"dra_claim_name": f"{pod}-gpu", "dra_claim_namespace": namespace,
                       "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": node,
                       "dra_device_name": f"gpu-{gpu}"}
    else:
        labels |= {"pci_bus_id": f"00000000:{gpu + 16:02X}:00.0", "device": f"nvidia{gpu}",
                   "Hostname": node, "DCGM_FI_DRIVER_VERSION": "595.91.07"}
    if pod:
        labels |= {"namespace": namespace, "pod": pod, "container": "main"}
    text = ", ".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


def text(labels: dict) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def samples(series: str, at: str, expected: list[tuple[dict, float]],
            select: dict | None = None) -> dict:
    """`series` (only its samples of these labels, with `select`) at `at` holds exactly these
    samples (labels, value)."""
    return {"expr": series + (text(select) if select else ""), "eval_time": at,
            "exp_samples": [{"labels": series + text(labels), "value": value}
                            for labels, value in expected]}


def pod(name: str, namespace: str = "research", node: str = "n1", model: str = H100) -> dict:
    return {"namespace": namespace, "pod": name, "node": node, "modelName": model}


def hours(level: str, at: str, labels: dict, allocated: float, used: float) -> list[dict]:
    """The GPU-hours one pod, namespace or team (`labels`) was allocated and used over the
    window, and those idle."""
    return [samples(gpu_usage.gpu_hours(level, kind), at, [(labels, value)], select=labels)
            for kind, value in (("allocated", allocated), ("used", used),
                                ("idle", allocated - used))]


IDLE = gpu_usage.IDLE_POD_GPUS


@PATHS
def test_a_busy_pod_uses_what_it_holds(promtool_bin, tmp_path, settings):
    """Two GPUs 80% busy for two hours; a third GPU free. Over the one-hour window: 2 GPU-hours
    allocated and used, none idle; the free GPU is nobody's."""
    series = [exporter(PROFILING, settings, 0, "0.8x120", pod="train"),
              exporter(PROFILING, settings, 1, "0.8x120", pod="train"),
              exporter(PROFILING, settings, 2, "0x120")]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            samples(gpu_usage.held("pod"), "90m", [(pod("train"), 2)]),
            samples(gpu_usage.active("pod"), "90m", [(pod("train"), 2)]),
            *hours("pod", "90m", pod("train"), 2, 2),
            samples(gpu_usage.held("namespace"), "90m",
                    [({"namespace": "research", "modelName": H100}, 2)]),
            samples(IDLE, "90m", []),
        ]}], settings=settings)


@PATHS
def test_an_idle_pod_is_in_the_idle_set_once_it_has_held_its_gpu_for_the_window(
        promtool_bin, tmp_path, settings):
    series = [exporter(PROFILING, settings, 0, "0x120", pod="notebook")]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            samples(IDLE, "59m", []),
            samples(IDLE, "60m", [(pod("notebook"), 1)]),
            samples(IDLE, "120m", [(pod("notebook"), 1)]),
            *hours("pod", "90m", pod("notebook"), 1, 0),
        ]}], settings=settings)


@PATHS
def test_an_intermittently_busy_pod_is_never_idle(promtool_bin, tmp_path, settings):
    """Busy 5 minutes of every 30: not idle at any time; 10 of the 60 minute samples in the
    window are active."""
    burst = "0.9x4 0x24 "
    series = [exporter(PROFILING, settings, 0, (burst * 4).strip(), pod="batch")]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            *(samples(IDLE, f"{minute}m", []) for minute in range(60, 120, 7)),
            *hours("pod", "119m", pod("batch"), 60 / 60, 10 / 60),
        ]}], settings=settings)


def test_a_pod_busy_within_the_window_is_not_idle_until_the_window_has_passed(promtool_bin,
                                                                             tmp_path):
    """Busy for its first 20 minutes, then idle: idle only once the busy minutes have left the
    window."""
    series = [exporter(PROFILING, DEVICE_PLUGIN, 0, "0.9x19 0x100", pod="done")]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [samples(IDLE, "78m", []),
                             samples(IDLE, "80m", [(pod("done"), 1)])]}],
        settings=DEVICE_PLUGIN)


def test_a_burst_between_the_minute_samples_still_keeps_a_pod_out_of_the_idle_set(promtool_bin,
                                                                                 tmp_path):
    """Scraped every 15 s: one busy sample at 25m15s, which no minute sample of the usage
    rules sees (no GPU-hour used), still makes the pod busy within the window."""
    series = [exporter(PROFILING, DEVICE_PLUGIN, 0, "0x100 0.9 0x379", pod="spiky")]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "15s", "input_series": series,
        "promql_expr_test": [samples(IDLE, "80m", []),
                             samples(gpu_usage.gpu_hours("pod", "used"), "80m",
                                     [(pod("spiky"), 0)]),
                             samples(IDLE, "86m", [(pod("spiky"), 1)])]}],
        settings=DEVICE_PLUGIN)


@PATHS
def test_a_newly_started_pod_is_judged_only_after_a_whole_window(promtool_bin, tmp_path,
                                                                  settings):
    """Started at minute 70, never active: its idle GPU-hours count from the start, but it joins
    the idle set only an hour after it started."""
    series = [exporter(PROFILING, settings, 0, "0x120"),
              exporter(PROFILING, settings, 1, "_x70 0x60", pod="starting")]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            samples(IDLE, "100m", []),
            *hours("pod", "100m", pod("starting"), 31 / 60, 0),
            samples(IDLE, "129m", []),
            samples(IDLE, "130m", [(pod("starting"), 1)]),
        ]}], settings=settings)


@PATHS
def test_the_profiling_metric_wins_and_utilization_is_the_fallback(promtool_bin, tmp_path,
                                                                   settings):
    """`light` runs a small kernel all the time: 60% utilization, but its engine is busy 2% of
    the time, which the profiling metric shows: idle. Two GPUs report utilization only: 30%
    counts as active, 3% does not."""
    series = [exporter(PROFILING, settings, 0, "0.02x90", pod="light"),
              exporter(UTILIZATION, settings, 0, "60x90", pod="light"),
              exporter(UTILIZATION, settings, 1, "30x90", pod="util-busy"),
              exporter(UTILIZATION, settings, 2, "3x90", pod="util-idle")]

    def gpu(name: str, index: int) -> dict:
        return {"namespace": "research", "pod": name, "node": "n1", "UUID": f"GPU-n1-{index}",
                "modelName": H100}
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            samples(gpu_usage.GPU_ACTIVITY, "5m",
                    [(gpu("light", 0), 0.02), (gpu("util-busy", 1), 0.3),
                     (gpu("util-idle", 2), 0.03)]),
            samples(gpu_usage.GPU_ACTIVE, "5m",
                    [(gpu("light", 0), 0), (gpu("util-busy", 1), 1), (gpu("util-idle", 2), 0)]),
            samples(IDLE, "70m", [(pod("light"), 1), (pod("util-idle"), 1)]),
        ]}], settings=settings)


def shared_cluster(settings) -> list[dict]:
    """research: `a` busy on GPU 0. research-batch: `b` idle on GPU 1; `c` and `d` share GPU 2
    (a shared claim, or time slices), idle. vision: `v` idle on an A100 of node n2. other (no
    team): `o` busy on GPU 3."""
    return [exporter(PROFILING, settings, 0, "0.7x120", pod="a"),
            exporter(PROFILING, settings, 1, "0x120", pod="b", namespace="research-batch"),
            exporter(PROFILING, settings, 2, "0x120", pod="c", namespace="research-batch"),
            exporter(PROFILING, settings, 2, "0x120", pod="d", namespace="research-batch"),
            exporter(PROFILING, settings, 0, "0x120", pod="v", namespace="vision", node="n2",
                     model=A100),
            exporter(PROFILING, settings, 3, "0.5x120", pod="o", namespace="other")]


@PATHS
def test_use_is_summed_per_namespace_and_team_each_shared_gpu_once(promtool_bin, tmp_path,
                                                                   settings):
    def namespace(name, model=H100):
        return {"namespace": name, "modelName": model}

    def team(name, model=H100):
        return {"team": name, "modelName": model}
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": shared_cluster(settings),
        "promql_expr_test": [
            samples(gpu_usage.held("pod"), "90m", [
                (pod("a"), 1), (pod("b", "research-batch"), 1), (pod("c", "research-batch"), 1),
                (pod("d", "research-batch"), 1), (pod("v", "vision", "n2", A100), 1),
                (pod("o", "other"), 1)]),
            samples(gpu_usage.held("namespace"), "90m", [
                (namespace("research"), 1), (namespace("research-batch"), 2),
                (namespace("vision", A100), 1), (namespace("other"), 1)]),
            samples(gpu_usage.active("namespace"), "90m", [
                (namespace("research"), 1), (namespace("research-batch"), 0),
                (namespace("vision", A100), 0), (namespace("other"), 1)]),
            samples(gpu_usage.held("team"), "90m", [(team("research"), 3),
                                                    (team("vision", A100), 1)]),
            samples(gpu_usage.active("team"), "90m", [(team("research"), 1),
                                                      (team("vision", A100), 0)]),
            *hours("team", "90m", team("research"), 3, 1),
            *hours("namespace", "90m", namespace("research-batch"), 2, 0),
            samples(IDLE, "90m", [(pod("b", "research-batch"), 1),
                                  (pod("c", "research-batch"), 1),
                                  (pod("d", "research-batch"), 1),
                                  (pod("v", "vision", "n2", A100), 1)]),
        ]}], settings=settings)


def test_without_teams_there_are_no_team_series():
    settings = load_settings(raw(with_changes()))
    recorded = {rule["record"] for rule in gpu_usage.usage_rules(monitoring_of(settings))}
    assert gpu_usage.held("namespace") in recorded
    assert not {name for name in recorded if ":team_" in name or "_team:" in name}


# --- The dashboard's showback tables, on the same series -------------------------------------

def table_columns(board: dict, title: str) -> dict[str, str]:
    """A table's columns by their display name: the query each shows."""
    panel = next(p for p in board["panels"] if p["title"] == title)
    names = {o["matcher"]["options"].removeprefix("Value #"):
             next(p["value"] for p in o["properties"] if p["id"] == "displayName")
             for o in panel["fieldConfig"]["overrides"]}
    return {names[t["refId"]]: t["expr"] for t in panel["targets"]}


def as_grafana_sends_it(expr: str, time_range: str) -> str:
    for variable, value in {**GRAFANA_VARIABLES, "$__range": time_range}.items():
        expr = expr.replace(variable, value)
    return expr


def test_showback_tables_cost_only_priced_models(promtool_bin, tmp_path):
    """Over a one-hour range ending at 90m: research's busy H100 costs 2.5, with nothing idle;
    research-batch's two idle H100s cost 5, all of it idle; vision's A100 has no price, so no
    cost; the team research sums its namespaces."""
    board = dashboard.dashboard(monitoring_of(DEVICE_PLUGIN))
    tests = []
    for title, by, rows in (
            ("GPU-hours per namespace", "namespace", {
                "research": (1, 1, 0, 2.5, 0), "research-batch": (2, 0, 2, 5, 5),
                "vision": (1, 0, 1, None, None), "other": (1, 1, 0, 2.5, 0)}),
            ("GPU-hours per team", "team", {
                "research": (3, 1, 2, 7.5, 5), "vision": (1, 0, 1, None, None)})):
        columns = table_columns(board, title)
        assert list(columns) == ["GPU-hours allocated", "GPU-hours used", "GPU-hours idle",
                                 "cost", "cost of idle GPUs"]
        for index, expr in enumerate(columns.values()):
            tests.append({"expr": as_grafana_sends_it(expr, "1h"), "eval_time": "90m",
                          "exp_samples": [{"labels": f'{{{by}="{name}"}}', "value": row[index]}
                                          for name, row in rows.items()
                                          if row[index] is not None]})
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": shared_cluster(DEVICE_PLUGIN),
        "promql_expr_test": tests}], settings=DEVICE_PLUGIN)


SPOT = {"karpenter.sh/capacity-type": "spot"}
RESERVED = {"eks.amazonaws.com/nodegroup": "h100-reserved"}
NODE_GROUPS = {"pricePerGpuHour": {H100: 2.5}, "nodeGroupPrices": [
    {"nodeSelector": SPOT, "pricePerGpuHour": {H100: 1.0}},
    {"nodeSelector": RESERVED, "pricePerGpuHour": {H100: 2.0, A100: 1.5}}]}


def node_labels(node: str, labels: dict[str, str], values: str) -> dict:
    """kube_node_labels as kube-state-metrics exports a node's allow-listed labels."""
    exported = {"job": "kube-state-metrics", "node": node} | {
        "label_" + key.replace(".", "_").replace("/", "_").replace("-", "_"): value
        for key, value in labels.items()}
    return {"series": "kube_node_labels" + text(exported), "values": values}


@PATHS
def test_a_gpu_costs_what_the_first_node_group_matching_its_node_says(promtool_bin, tmp_path,
                                                                      settings):
    """Over the hour to 90m, one pod per namespace, H100s at 2.5 an hour, spot nodes' at 1.0,
    the reserved group's at 2.0 (A100s 1.5): research's busy H100 on an unlabelled node costs
    2.5; research-batch's idle H100 on a node both spot and reserved costs 1.0 (spot comes
    first); vision's idle A100 on a reserved node 1.5; other's A100 on an unlabelled node
    nothing (no price for its model there); tools' H100 on a node that turned spot at 60m
    costs 29 minutes at 2.5 and 31 at 1.0 (the minute samples in the range)."""
    priced = load_settings(raw(with_changes(
        kubernetesVersion=settings.kubernetes_version,
        gpuOperator={"gpuPath": settings.gpu_operator.gpu_path}, teams=TEAMS,
        monitoring={"usage": NODE_GROUPS})))
    series = [exporter(PROFILING, priced, 0, "0.7x120", pod="a"),
              exporter(PROFILING, priced, 0, "0x120", pod="b", namespace="research-batch",
                       node="n2"),
              exporter(PROFILING, priced, 0, "0x120", pod="v", namespace="vision", node="n3",
                       model=A100),
              exporter(PROFILING, priced, 0, "0x120", pod="o", namespace="other", node="n4",
                       model=A100),
              exporter(PROFILING, priced, 0, "0x120", pod="t", namespace="tools", node="n5"),
              node_labels("n1", {}, "1x120"), node_labels("n2", SPOT | RESERVED, "1x120"),
              node_labels("n3", RESERVED, "1x120"), node_labels("n4", {}, "1x120"),
              node_labels("n5", {}, "1x59 stale"), node_labels("n5", SPOT, "_x60 1x60")]
    tools = (29 * 2.5 + 31 * 1.0) / 60
    board = dashboard.dashboard(monitoring_of(priced))
    tests = []
    for title, by, rows in (
            ("GPU-hours per namespace", "namespace", {
                "research": (2.5, 0), "research-batch": (1.0, 1.0), "vision": (1.5, 1.5),
                "tools": (tools, tools)}),
            ("GPU-hours per team", "team", {"research": (3.5, 1.0), "vision": (1.5, 1.5)})):
        columns = table_columns(board, title)
        for index, column in enumerate(("cost", "cost of idle GPUs")):
            tests.append({"expr": as_grafana_sends_it(columns[column], "1h"), "eval_time": "90m",
                          "exp_samples": [{"labels": f'{{{by}="{name}"}}', "value": row[index]}
                                          for name, row in rows.items()]})
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series, "promql_expr_test": tests}], settings=priced)


def test_the_idle_pods_table_lists_the_idle_set_with_its_idle_hours(promtool_bin, tmp_path):
    board = dashboard.dashboard(monitoring_of(DEVICE_PLUGIN))
    columns = table_columns(board, "Pods holding idle GPUs now")
    idle_hours = as_grafana_sends_it(columns["GPU-hours idle, last 1h"], "1h")
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": shared_cluster(DEVICE_PLUGIN),
        "promql_expr_test": [{
            "expr": idle_hours, "eval_time": "90m",
            "exp_samples": [{"labels": gpu_usage.gpu_hours("pod", "idle") + text(p),
                             "value": 1}
                            for p in (pod("b", "research-batch"), pod("c", "research-batch"),
                                      pod("d", "research-batch"),
                                      pod("v", "vision", "n2", A100))]}]}],
        settings=DEVICE_PLUGIN)


def test_costs_only_with_prices_and_the_team_table_only_with_teams():
    def titles_and_columns(settings) -> dict[str, list[str]]:
        board = dashboard.dashboard(monitoring_of(settings))
        return {p["title"]: list(table_columns(board, p["title"]))
                for p in board["panels"] if p["title"].startswith("GPU-hours per")}
    plain = titles_and_columns(load_settings(raw(with_changes())))
    assert plain == {"GPU-hours per namespace": ["GPU-hours allocated", "GPU-hours used",
                                                 "GPU-hours idle"]}
    assert set(titles_and_columns(DEVICE_PLUGIN)) == {"GPU-hours per namespace",
                                                       "GPU-hours per team"}


def test_costs_carry_the_stacks_currency():
    board = dashboard.dashboard(monitoring_of(DEVICE_PLUGIN))
    panel = next(p for p in board["panels"] if p["title"] == "GPU-hours per team")
    units = {next(p["value"] for p in o["properties"] if p["id"] == "displayName"):
             next(p["value"] for p in o["properties"] if p["id"] == "unit")
             for o in panel["fieldConfig"]["overrides"]}
    assert units["cost"] == units["cost of idle GPUs"] == "suffix: EUR"


# --- Settings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("usage, setting, value, allowed", [
    ({"window": "5m"}, "monitoring.usage.window", '"5m"', "10m or more"),
    ({"window": "30d"}, "monitoring.usage.window", '"30d"', "15d or less"),
    ({"activeThreshold": 5}, "monitoring.usage.activeThreshold", "5", "0.05 is 5%"),
    ({"pricePerGpuHour": {H100: -1}}, f"monitoring.usage.pricePerGpuHour.{H100}", "-1",
     "0 or more"),
    ({"pricePerGpuHour": {" ": 1}}, "monitoring.usage.pricePerGpuHour", '{" ": 1.0}',
     "the exporter's modelName"),
    ({"nodeGroupPrices": [{"nodeSelector": {}, "pricePerGpuHour": {H100: 1}}]},
     "monitoring.usage.nodeGroupPrices[0].nodeSelector", "{}", "at least 1 item"),
    ({"nodeGroupPrices": [{"nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                           "pricePerGpuHour": {H100: -1}}]},
     f"monitoring.usage.nodeGroupPrices[0].pricePerGpuHour.{H100}", "-1", "0 or more"),
], ids=["window too short", "window past the retention", "a percent for a fraction",
        "a negative price", "a price of no model", "a node group of every node",
        "a negative node group price"])
def test_a_bad_usage_setting_is_named_with_its_value(usage, setting, value, allowed):
    with pytest.raises(SettingsError) as raised:
        load_settings(raw(with_changes(monitoring={"usage": usage})))
    line = next(p for p in raised.value.problems
                if re.match(rf"gpu-platform:{re.escape(setting)}[ :]", p))
    assert value in line and allowed in line, line
