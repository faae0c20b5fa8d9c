"""One meaning of idle: GpuAllocatedIdle, the dashboard's list of the pods it names and idle
reclaim's query select the same pods (held GPUs without one active sample over the window, by
engine activity or, where a GPU reports none, utilization), in `promtool test rules`."""

import pytest

from components.monitoring import dashboard
from tests.kit.harness import inputs_of, monitoring_of
from tests.unit.test_alert_rules import GPU0, fires, run_promtool_tests
from tests.unit.test_monitoring import SETTINGS

NOTEBOOK = f'{GPU0}, namespace="team-a", pod="notebook"'
NOTEBOOK_LABELS = {"namespace": "team-a", "pod": "notebook"}


def held_gpu(utilization: int, activity: float | None = None) -> list[dict]:
    """The notebook's GPU for three hours: its utilization (percent) and, where the GPU reports
    it, its engine activity (a fraction)."""
    series = [{"series": f"DCGM_FI_DEV_GPU_UTIL{{{NOTEBOOK}}}", "values": f"{utilization}x180"}]
    if activity is not None:
        series.append({"series": f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{NOTEBOOK}}}",
                       "values": f"{activity}x180"})
    return series


def test_allocated_idle_gpus_are_reported_after_the_idle_window(promtool_bin, tmp_path):
    """GpuAllocatedIdle names a pod once it has held its GPUs for alerts.idleFor (2h) without
    one active sample: by engine activity where the GPU reports it, by utilization where it
    does not; the threshold is monitoring.usage.activeThreshold (5%)."""
    idle = {**NOTEBOOK_LABELS, "severity": "info"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": held_gpu(4),
         "alert_rule_test": [fires("GpuAllocatedIdle", "110m", []),
                             fires("GpuAllocatedIdle", "125m", [idle])]},
        {"interval": "1m", "input_series": held_gpu(6),
         "alert_rule_test": [fires("GpuAllocatedIdle", "170m", [])]},
        # A kernel always running but the engine nearly unused: idle by the engine's measure.
        {"interval": "1m", "input_series": held_gpu(100, 0.01),
         "alert_rule_test": [fires("GpuAllocatedIdle", "125m", [idle])]},
        {"interval": "1m", "input_series": held_gpu(0, 0.2),
         "alert_rule_test": [fires("GpuAllocatedIdle", "170m", [])]},
    ])


@pytest.mark.parametrize("utilization, activity, idle", [
    (4, None, True), (6, None, False), (100, 0.01, True), (0, 0.2, False)])
def test_the_dashboard_the_alert_and_reclaim_agree_on_which_gpus_are_idle(
        promtool_bin, tmp_path, utilization, activity, idle):
    """One definition of idle: the dashboard's list of the alert's pods and reclaim's query (at
    the shipped windows, both 2h) select the pods the alert fires for, on both metric shapes."""
    inputs = monitoring_of(SETTINGS)
    [table] = [panel for panel in dashboard.dashboard(inputs)["panels"]
               if panel["title"] == "Idle for 2h (GpuAllocatedIdle)"]
    listed = table["targets"][0]["expr"]
    for variable in ("$node", "$model", "$namespace"):
        listed = listed.replace(variable, ".*")
    reclaimed = inputs_of(SETTINGS).reclaim.idle_query
    pod = 'namespace="team-a", pod="notebook"'
    gpu = f'gpu_platform:pod_gpus_held:count{{modelName="NVIDIA H100", {pod}, node="n1"}}'
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": held_gpu(utilization, activity),
         "alert_rule_test": [fires("GpuAllocatedIdle", "125m",
                                   [{**NOTEBOOK_LABELS, "severity": "info"}] if idle else [])],
         "promql_expr_test": [
             {"expr": listed, "eval_time": "125m",
              "exp_samples": [{"labels": f"{{{pod}}}", "value": 1}] if idle else []},
             {"expr": reclaimed, "eval_time": "125m",
              "exp_samples": [{"labels": gpu, "value": 1}] if idle else []}]}])
