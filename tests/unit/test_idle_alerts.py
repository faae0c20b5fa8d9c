"""One meaning of idle: GpuAllocatedIdle, the dashboard's list of the pods it names and idle
reclaim's query select the same pods (held GPUs without one active sample over the window, by
engine activity or, where a GPU reports none, utilization), in `promtool test rules`."""

import pytest

from components import monitoring
from components.gpu_reclaim.mixin import EVICTION_ALERT
from components.monitoring import dashboard
from components.platform.config import load_settings
from tests.kit.harness import inputs_of, monitoring_of
from tests.kit.stacks import raw, with_changes
from tests.unit.test_alert_rules import GPU0, fires, run_promtool_tests
from tests.unit.test_gpu_usage_rules import H100, PROFILING, TEAMS, exporter
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
    """GpuAllocatedIdle names a pod once it has held its GPUs for alerts.idleFor (1h) without
    one active sample: by engine activity where the GPU reports it, by utilization where it
    does not; the threshold is monitoring.usage.activeThreshold (5%)."""
    idle = {**NOTEBOOK_LABELS, "severity": "info"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": held_gpu(4),
         "alert_rule_test": [fires("GpuAllocatedIdle", "50m", []),
                             fires("GpuAllocatedIdle", "65m", [idle])]},
        {"interval": "1m", "input_series": held_gpu(6),
         "alert_rule_test": [fires("GpuAllocatedIdle", "170m", [])]},
        # A kernel always running but the engine nearly unused: idle by the engine's measure.
        {"interval": "1m", "input_series": held_gpu(100, 0.01),
         "alert_rule_test": [fires("GpuAllocatedIdle", "65m", [idle])]},
        {"interval": "1m", "input_series": held_gpu(0, 0.2),
         "alert_rule_test": [fires("GpuAllocatedIdle", "170m", [])]},
    ])


@pytest.mark.parametrize("utilization, activity, idle", [
    (4, None, True), (6, None, False), (100, 0.01, True), (0, 0.2, False)])
def test_the_dashboard_the_alert_and_reclaim_agree_on_which_gpus_are_idle(
        promtool_bin, tmp_path, utilization, activity, idle):
    """One definition of idle: the dashboard's list of the alert's pods and reclaim's query (at
    the shipped windows, both 1h) select the pods the alert fires for, on both metric shapes."""
    inputs = monitoring_of(SETTINGS)
    [table] = [panel for panel in dashboard.dashboard(inputs)["panels"]
               if panel["title"] == "Idle for 1h (GpuAllocatedIdle)"]
    listed = table["targets"][0]["expr"]
    for variable in ("$node", "$model", "$namespace"):
        listed = listed.replace(variable, ".*")
    reclaimed = inputs_of(SETTINGS).reclaim.idle_query
    pod = 'namespace="team-a", pod="notebook"'
    gpu = f'gpu_platform:pod_gpus_held:count{{modelName="NVIDIA H100", {pod}, node="n1"}}'
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": held_gpu(utilization, activity),
         "alert_rule_test": [fires("GpuAllocatedIdle", "65m",
                                   [{**NOTEBOOK_LABELS, "severity": "info"}] if idle else [])],
         "promql_expr_test": [
             {"expr": listed, "eval_time": "65m",
              "exp_samples": [{"labels": f"{{{pod}}}", "value": 1}] if idle else []},
             {"expr": reclaimed, "eval_time": "65m",
              "exp_samples": [{"labels": gpu, "value": 1}] if idle else []}]}])


def test_a_pod_reclaim_will_evict_is_announced_to_its_team_with_its_deadline(promtool_bin,
                                                                             tmp_path):
    """research evicts, vision only reports. research's idle `train`, which a run gave a
    deadline, raises GpuIdlePodEvictionScheduled labelled with its team (the team's receivers
    get it) and with when it was reported and when it may go, its value the GPUs it holds; its
    busy `serve`, whose deadline annotation the next run has not cleared yet, raises none, and
    neither does vision's idle notebook, reported but never evicted."""
    settings = load_settings(raw(with_changes(teams=TEAMS, reclaim={
        "enabled": True, "action": "report", "teams": ["research", "vision"],
        "policies": [{"teams": ["research"], "action": "evict"}]})))
    reported, deadline = "2026-01-01T01:00:00Z", "2026-01-01T03:00:00Z"

    def annotated(namespace: str, pod: str, evicts: bool) -> dict:
        labels = (f'namespace="{namespace}", pod="{pod}", job="kube-state-metrics", '
                  f'annotation_gpu_platform_io_idle_reported_at="{reported}"')
        if evicts:
            labels += f', annotation_gpu_platform_io_idle_evict_after="{deadline}"'
        return {"series": f"kube_pod_annotations{{{labels}}}", "values": "1x180"}
    series = [exporter(PROFILING, settings, gpu, "0x180", pod="train") for gpu in (0, 1)]
    series += [exporter(PROFILING, settings, 2, "0.6x180", pod="serve"),
               exporter(PROFILING, settings, 0, "0x180", pod="notebook", namespace="vision",
                        node="n2"),
               annotated("research", "train", True), annotated("research", "serve", True),
               annotated("vision", "notebook", False)]
    announced = {"namespace": "research", "pod": "train", "node": "n1", "modelName": H100,
                 "annotation_gpu_platform_io_idle_reported_at": reported,
                 "annotation_gpu_platform_io_idle_evict_after": deadline,
                 "severity": "warning", "team": "research"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": series,
         "alert_rule_test": [fires(EVICTION_ALERT, "50m", []),
                             fires(EVICTION_ALERT, "90m", [announced])]},
    ], settings=settings)
    # The platform's kube-state-metrics exports the two annotations the alert reads.
    values = monitoring.chart_values(monitoring_of(settings))["kube-state-metrics"]
    assert values["metricAnnotationsAllowList"] == [
        "pods=[gpu-platform.io/idle-evict-after,gpu-platform.io/idle-reported-at]"]
