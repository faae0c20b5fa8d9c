"""The alert and recording rules in `promtool test rules`, Prometheus' own rule tester (the
version the stack deploys): each alert fires, and stays quiet, at the edges of its threshold and
duration, with the labels its receivers route on; each recorded series holds what the dashboard
reads from it, on both GPU paths."""

import datetime
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from components import monitoring
from components.base.ksm import ksm_label
from components.monitoring import dashboard
from components.monitoring import rules as gpu_rules
from components.platform.config import load_settings
from tests.kit.harness import monitoring_of
from tests.kit.stacks import TEAMS, raw, with_changes
from tests.unit.test_monitoring import SETTINGS, WITH_COMPACTION, rule_groups

# --- promtool test rules ---------------------------------------------------------------------

GPU0 = 'gpu="0", UUID="GPU-0", modelName="NVIDIA H100", Hostname="n1", node="n1"'


def ksm_node(node: str, gpus: int) -> dict:
    return {"series": f'kube_node_status_allocatable{{node="{node}", resource="nvidia_com_gpu", '
                      f'unit="integer"}}', "values": f"{gpus}x180"}


def ksm_pod(pod: str, node: str, gpus: int, phase: str = "Running",
            unschedulable: bool = False) -> list[dict]:
    labels = f'namespace="team-a", pod="{pod}", uid="{pod}-uid"'
    series = [
        {"series": f'kube_pod_container_resource_requests{{{labels}, container="main", '
                   f'node="{node}", resource="nvidia_com_gpu", unit="integer"}}',
         "values": f"{gpus}x180"},
        {"series": f'kube_pod_status_phase{{{labels}, phase="{phase}"}}', "values": "1x180"},
    ]
    if unschedulable:
        series.append({"series": f"kube_pod_status_unschedulable{{{labels}}}",
                       "values": "1x180"})
    return series


def run_promtool_tests(promtool_bin, tmp_path, tests: list[dict], settings=SETTINGS,
                       annotations: bool = False, evaluation_interval: str = "1m"):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(settings, annotations)))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": evaluation_interval,
        "tests": tests}))
    result = subprocess.run([str(promtool_bin), "test", "rules", str(tmp_path / "tests.yaml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def fires(alert: str, at: str, labels_list: list[dict]) -> dict:
    return {"eval_time": at, "alertname": alert,
            "exp_alerts": [{"exp_labels": labels} for labels in labels_list]}


GPU0_LABELS = {"gpu": "0", "UUID": "GPU-0", "modelName": "NVIDIA H100", "Hostname": "n1",
               "node": "n1"}


def test_temperature_alert_fires_above_the_threshold_after_its_duration(promtool_bin, tmp_path):
    hot = {**GPU0_LABELS, "severity": "warning"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{GPU0}}}", "values": "85x60"}],
         "alert_rule_test": [fires("GpuTemperatureHigh", "30m", [])]},     # at the threshold
        {"interval": "1m", "input_series": [
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{GPU0}}}", "values": "86x60"}],
         "alert_rule_test": [fires("GpuTemperatureHigh", "9m", []),         # not for long enough
                             fires("GpuTemperatureHigh", "10m", [hot])]},
    ])


def test_xid_alerts_split_fatal_codes_from_the_rest(promtool_bin, tmp_path):
    def xid(code):
        return {"interval": "1m", "input_series": [
            {"series": f'DCGM_FI_DEV_XID_ERRORS{{{GPU0}, namespace="team-a", pod="train-0"}}',
             "values": f"{code}x10"}]}

    pod = {"namespace": "team-a", "pod": "train-0"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {**xid(0), "alert_rule_test": [fires("GpuXidError", "1m", []),
                                       fires("GpuFatalXidError", "1m", [])]},
        {**xid(13), "alert_rule_test": [
            fires("GpuXidError", "0m", [{**GPU0_LABELS, **pod, "severity": "warning"}]),
            fires("GpuFatalXidError", "0m", [])]},
        {**xid(79), "alert_rule_test": [
            fires("GpuFatalXidError", "0m", [{**GPU0_LABELS, **pod, "severity": "critical"}]),
            fires("GpuXidError", "0m", [])]},
    ])


def test_gpu_node_without_a_healthy_exporter(promtool_bin, tmp_path):
    up = 'up{job="nvidia-dcgm-exporter", node="n1", instance="10.0.0.1:9400"}'
    down = {"node": "n1", "severity": "warning"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [ksm_node("n1", 8), {"series": up, "values": "1x60"}],
         "alert_rule_test": [fires("GpuExporterDown", "30m", [])]},
        {"interval": "1m", "input_series": [ksm_node("n1", 8), {"series": up, "values": "0x60"}],
         "alert_rule_test": [fires("GpuExporterDown", "9m", []),
                             fires("GpuExporterDown", "10m", [down])]},
        # No exporter scraped at all on a GPU node; a node without GPUs needs none.
        {"interval": "1m", "input_series": [ksm_node("n1", 8), ksm_node("cpu-1", 0)],
         "alert_rule_test": [fires("GpuExporterDown", "10m", [down])]},
    ])


def fragmented_cluster(pending_gpus: int, unschedulable: bool = True) -> list[dict]:
    """Two 4-GPU nodes, each holding a 2-GPU and a 1-GPU pod: 2 GPUs free in total, 1 per node."""
    return [ksm_node("n1", 4), ksm_node("n2", 4),
            *ksm_pod("a2", "n1", 2), *ksm_pod("a1", "n1", 1),
            *ksm_pod("b2", "n2", 2), *ksm_pod("b1", "n2", 1),
            *ksm_pod("finished", "n2", 4, phase="Succeeded"),
            *ksm_pod("waiting", "", pending_gpus, phase="Pending", unschedulable=unschedulable)]


def recorded(series: str, samples: dict[str, float], at: str = "5m") -> dict:
    """A promtool expression test: `series` has these values (by label set) at `at`."""
    return {"expr": series, "eval_time": at,
            "exp_samples": [{"labels": series + labels, "value": value}
                            for labels, value in samples.items()]}


def test_recorded_capacity_of_a_fragmented_cluster(promtool_bin, tmp_path):
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": fragmented_cluster(2),
        "promql_expr_test": [
            recorded(gpu_rules.NODE_FREE, {'{node="n1"}': 1, '{node="n2"}': 1}),
            recorded(gpu_rules.STRANDED, {"": 2}),
            # The finished 4-GPU pod holds nothing; the pending one is not bound.
            recorded(gpu_rules.NAMESPACE_ALLOCATED, {'{namespace="team-a"}': 6}),
        ]}])


def test_empty_node_counts_as_all_free_and_not_stranded(promtool_bin, tmp_path):
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": [ksm_node("n1", 8), ksm_node("n2", 8),
                                           *ksm_pod("p", "n2", 8)],
        "promql_expr_test": [
            recorded(gpu_rules.NODE_FREE, {'{node="n1"}': 8, '{node="n2"}': 0}),
            recorded(gpu_rules.STRANDED, {"": 0}),
        ]}])


def test_fragmentation_alert_when_enough_gpus_are_free_in_total(promtool_bin, tmp_path):
    pending = {"namespace": "team-a", "pod": "waiting", "severity": "warning"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": fragmented_cluster(2),
         "alert_rule_test": [fires("GpuPodFragmentationPending", "14m", []),
                             fires("GpuPodFragmentationPending", "15m", [pending])]},
        # More than is free in total: a capacity problem, not fragmentation.
        {"interval": "1m", "input_series": fragmented_cluster(3),
         "alert_rule_test": [fires("GpuPodFragmentationPending", "30m", [])]},
        # Pending but not (yet) found unschedulable.
        {"interval": "1m", "input_series": fragmented_cluster(2, unschedulable=False),
         "alert_rule_test": [fires("GpuPodFragmentationPending", "30m", [])]},
    ])


@pytest.mark.parametrize("failure_policy, severity", [("Fail", "critical"),
                                                      ("Ignore", "warning")])
def test_scheduler_and_admission_availability(promtool_bin, tmp_path, failure_policy, severity):
    settings = load_settings(raw(with_changes(admission={"failurePolicy": failure_policy})))

    def available(namespace, deployment, values):
        return {"series": f'kube_deployment_status_replicas_available{{namespace="{namespace}", '
                          f'deployment="{deployment}"}}', "values": values}

    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            available("gpu-scheduler", "gpu-binpack-scheduler", "1x20"),
            available("gpu-admission", "opa-g012345678", "2x20")],
         "alert_rule_test": [fires("BinpackSchedulerUnavailable", "10m", []),
                             fires("GpuAdmissionUnavailable", "10m", [])]},
        {"interval": "1m", "input_series": [
            available("gpu-scheduler", "gpu-binpack-scheduler", "0x20"),
            available("gpu-admission", "opa-g012345678", "0x20")],
         "alert_rule_test": [
             fires("BinpackSchedulerUnavailable", "4m", []),
             fires("BinpackSchedulerUnavailable", "5m", [{
                 "namespace": "gpu-scheduler", "deployment": "gpu-binpack-scheduler",
                 "severity": "critical"}]),
             fires("GpuAdmissionUnavailable", "5m", [{
                 "namespace": "gpu-admission", "severity": severity}])]},
        # A new OPA generation starting while the one the webhooks call serves: not down.
        {"interval": "1m", "input_series": [
            available("gpu-scheduler", "gpu-binpack-scheduler", "1x20"),
            available("gpu-admission", "opa-g012345678", "2x20"),
            available("gpu-admission", "opa-gabcdef012", "0x20")],
         "alert_rule_test": [fires("GpuAdmissionUnavailable", "10m", [])]},
    ], settings=settings)


def test_a_critical_pods_quota_nearly_full_is_reported(promtool_bin, tmp_path):
    def quota(namespace, used, hard, name="critical-pods"):
        labels = f'namespace="{namespace}", resourcequota="{name}", resource="pods"'
        return [{"series": f'kube_resourcequota{{{labels}, type="used"}}', "values": f"{used}x30"},
                {"series": f'kube_resourcequota{{{labels}, type="hard"}}', "values": f"{hard}x30"}]
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": quota("gpu-operator", 115, 122),
         "alert_rule_test": [fires("GpuPlatformQuotaNearlyFull", "14m", []),
                             fires("GpuPlatformQuotaNearlyFull", "15m", [{
                                 "namespace": "gpu-operator", "resourcequota": "critical-pods",
                                 "resource": "pods", "severity": "warning"}])]},
        # Room left; and another namespace's or another quota's use is not the platform's.
        {"interval": "1m", "input_series": [*quota("gpu-operator", 100, 122),
                                            *quota("team-a", 10, 10),
                                            *quota("gpu-scheduler", 5, 5, name="other")],
         "alert_rule_test": [fires("GpuPlatformQuotaNearlyFull", "20m", [])]},
    ])


def kueue(metric: str, team: str, value: str, role: str = "leader", **labels: str) -> dict:
    """A Kueue gauge of a team's ClusterQueue, for nvidia.com/gpu unless said otherwise."""
    labels = {"cluster_queue": team, "resource": "nvidia.com/gpu", **labels}
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f'kueue_{metric}{{{text}, replica_role="{role}"}}', "values": value}


def test_a_team_waiting_within_its_own_quota_is_reported(promtool_bin, tmp_path):
    """Research (quota 5) has 2 GPUs pending while it uses 2: they would fit, so after the
    pending duration the alert fires. Vision's pending 3 on top of 2 in use exceeds its quota
    of 3 (it waits to borrow: nothing is wrong), and a follower's stale gauges do not count."""
    waiting = [kueue("cluster_queue_nominal_quota", "research", "5x30", flavor="gpu"),
               kueue("cluster_queue_resource_usage", "research", "2x30", flavor="gpu"),
               kueue("cluster_queue_resource_pending", "research", "2x30"),
               kueue("cluster_queue_nominal_quota", "vision", "3x30", flavor="gpu"),
               kueue("cluster_queue_resource_usage", "vision", "2x30", flavor="gpu"),
               kueue("cluster_queue_resource_pending", "vision", "3x30"),
               kueue("cluster_queue_resource_pending", "vision", "1x30", role="follower")]
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": waiting,
         "alert_rule_test": [fires("GpuTeamWaitsWithQuotaUnused", "14m", []),
                             fires("GpuTeamWaitsWithQuotaUnused", "15m", [{
                                 "cluster_queue": "research", "resource": "nvidia.com/gpu",
                                 "severity": "warning"}])]}])


def test_kueue_down_is_critical(promtool_bin, tmp_path):
    available = 'kube_deployment_status_replicas_available{namespace="kueue-system", ' \
                'deployment="kueue-controller-manager"}'
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [{"series": available, "values": "2x20"}],
         "alert_rule_test": [fires("KueueUnavailable", "10m", [])]},
        {"interval": "1m", "input_series": [{"series": available, "values": "0x20"}],
         "alert_rule_test": [fires("KueueUnavailable", "5m", [{
             "namespace": "kueue-system", "deployment": "kueue-controller-manager",
             "severity": "critical"}])]}])


def test_thresholds_are_stack_settings(promtool_bin, tmp_path):
    settings = load_settings(raw(with_changes(monitoring={"alerts": {
        "gpuTemperatureCelsius": 75, "gpuTemperatureFor": "2m"}})))
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{GPU0}}}", "values": "76x10"}],
         "alert_rule_test": [fires("GpuTemperatureHigh", "2m",
                                   [{**GPU0_LABELS, "severity": "warning"}])]}],
        settings=settings)


def test_alert_descriptions_name_what_a_responder_needs(promtool_bin, tmp_path):
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": fragmented_cluster(2),
        "alert_rule_test": [{"eval_time": "15m", "alertname": "GpuPodFragmentationPending",
                             "exp_alerts": [{
                                 "exp_labels": {"namespace": "team-a", "pod": "waiting",
                                                "severity": "warning"},
                                 "exp_annotations": {
                                     "summary": "GPU pod pending although enough GPUs are free",
                                     "description": next(
                                         r["annotations"]["description"]
                                         for r in gpu_rules.alert_rules(monitoring_of(SETTINGS))
                                         if r["alert"] == "GpuPodFragmentationPending")
                                     .replace("{{ $labels.namespace }}", "team-a")
                                     .replace("{{ $labels.pod }}", "waiting")
                                     .replace("{{ $value }}", "2")}}]}]}],
        annotations=True)
    for rule in every_alert():
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"[0-9]+[smh]", rule["for"])


def test_certificate_alerts_warn_in_the_renewal_window_and_page_a_week_before(promtool_bin,
                                                                             tmp_path):
    # earlyRenewalHours 720 (30 days) before day 40: warn from day 10; page from day 33.
    def at(days, hours=0):
        return f"{days * 24 + hours}h"
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1h", "input_series": [],
         "alert_rule_test": [
             fires("GpuAdmissionCertificateRenewalDue", at(9, 23), []),
             fires("GpuAdmissionCertificateRenewalDue", at(10, 1), [{"severity": "warning"}]),
             fires("GpuAdmissionCertificateExpiring", at(32, 23), []),
             fires("GpuAdmissionCertificateExpiring", at(33, 1), [{"severity": "critical"}])]},
    ], evaluation_interval="1h")


def test_certificate_alerts_follow_the_certificate_the_program_made(example_run):
    rule = example_run.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule",
                           "monitoring/gpu-platform").inputs
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    # The fake provider made the server certificate on 2026-11-01 for 8760 hours.
    not_after = int(datetime.datetime(2027, 11, 1, tzinfo=datetime.UTC).timestamp())
    assert alerts["GpuAdmissionCertificateRenewalDue"]["expr"] == \
        f"vector(time()) > {not_after - 720 * 3600}"
    assert "2027-11-01T00:00:00+00:00" in alerts["GpuAdmissionCertificateExpiring"][
        "annotations"]["description"]


def opa_requests(code: str, per_minute: int) -> dict:
    return {"series": f'http_request_duration_seconds_count{{namespace="gpu-admission", '
                      f'pod="opa-1", handler="v0/data", method="post", code="{code}"}}',
            "values": f"0+{per_minute}x40"}


def rejections(error_type: str, per_minute: int, name="gpu-scheduler-policy.gpu-platform.io",
               metric="apiserver_admission_webhook_rejection_count") -> dict:
    labels = f'name="{name}", type="validating", operation="CREATE"'
    if metric.endswith("rejection_count"):
        labels += f', error_type="{error_type}", rejection_code="403"'
    return {"series": f"{metric}{{{labels}}}", "values": f"0+{per_minute}x120"}


def test_admission_alerts_on_failed_calls_missing_decisions_and_many_refusals(promtool_bin,
                                                                            tmp_path):
    name = {"name": "gpu-scheduler-policy.gpu-platform.io"}
    opa = {"namespace": "gpu-admission", "pod": "opa-1"}
    run_promtool_tests(promtool_bin, tmp_path, [
        # Decisions served: nothing fires.
        {"interval": "1m", "input_series": [opa_requests("200", 10),
                                            rejections("no_error", 0)],
         "alert_rule_test": [fires("GpuAdmissionDecisionErrors", "20m", []),
                             fires("GpuAdmissionWebhookFailing", "20m", []),
                             fires("GpuAdmissionRejectionsHigh", "30m", [])]},
        # No policy loaded: OPA answers 404.
        {"interval": "1m", "input_series": [opa_requests("404", 2)],
         "alert_rule_test": [fires("GpuAdmissionDecisionErrors", "10m",
                                   [{**opa, "severity": "critical"}])]},
        # The API server cannot call the webhook (fail closed), or fails open with Ignore.
        {"interval": "1m", "input_series": [rejections("calling_webhook_error", 3)],
         "alert_rule_test": [fires("GpuAdmissionWebhookFailing", "10m",
                                   [{**name, "severity": "critical"}])]},
        {"interval": "1m", "input_series": [rejections(
            "", 3, metric="apiserver_admission_webhook_fail_open_count")],
         "alert_rule_test": [fires("GpuAdmissionWebhookFailing", "10m",
                                   [{**name, "severity": "critical"}])]},
        # Two refusals a minute: 120 an hour, over the threshold of 60.
        {"interval": "1m", "input_series": [rejections("no_error", 2)],
         "alert_rule_test": [fires("GpuAdmissionRejectionsHigh", "40m", []),
                             fires("GpuAdmissionRejectionsHigh", "90m",
                                   [{"severity": "warning"}])]},
        # Another cluster webhook's refusals are not the platform's.
        {"interval": "1m", "input_series": [rejections("no_error", 5, name="other.example.com")],
         "alert_rule_test": [fires("GpuAdmissionRejectionsHigh", "90m", [])]},
    ])


def test_opa_pods_not_ready_are_reported(promtool_bin, tmp_path):
    def deployment(metric, values):
        return {"series": f'{metric}{{namespace="gpu-admission", deployment="opa-g012345678"}}',
                "values": values}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            deployment("kube_deployment_spec_replicas", "2x30"),
            deployment("kube_deployment_status_replicas_available", "1x30")],
         "alert_rule_test": [fires("GpuAdmissionDegraded", "9m", []),
                             fires("GpuAdmissionDegraded", "10m", [{
                                 "namespace": "gpu-admission", "severity": "warning"}])]},
        {"interval": "1m", "input_series": [
            deployment("kube_deployment_spec_replicas", "2x30"),
            deployment("kube_deployment_status_replicas_available", "2x30")],
         "alert_rule_test": [fires("GpuAdmissionDegraded", "20m", [])]},
    ])


def pending_pods(starts: list[int]) -> list[dict]:
    """GPU pods pending, pod i from minute starts[i] on."""
    series = [ksm_node("n1", 8)]
    for i, first in enumerate(starts):
        labels = f'namespace="team-a", pod="wait-{i}", uid="w{i}"'
        series += [
            {"series": f'kube_pod_container_resource_requests{{{labels}, container="main", '
                       f'node="", resource="nvidia_com_gpu", unit="integer"}}',
             "values": f"_x{first} 1x120" if first else "1x120"},
            {"series": f'kube_pod_status_phase{{{labels}, phase="Pending"}}',
             "values": f"_x{first} 1x120" if first else "1x120"}]
    return series


def test_pending_gpu_pods_piling_up_are_reported_and_a_steady_queue_is_not(promtool_bin,
                                                                        tmp_path):
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": pending_pods([0, 10, 20, 30, 40, 50, 60, 70]),
         "promql_expr_test": [recorded(gpu_rules.GPU_PODS_PENDING, {"": 5}, at="45m")],
         "alert_rule_test": [fires("GpuPodsPendingGrowing", "29m", []),
                             fires("GpuPodsPendingGrowing", "75m", [{"severity": "warning"}])]},
        {"interval": "1m", "input_series": pending_pods([0, 0, 0]),
         "alert_rule_test": [fires("GpuPodsPendingGrowing", "100m", [])]},
    ])


def every_alert() -> list[dict]:
    """Every alert of a stack with each component on, its components' among them."""
    every = load_settings(raw(with_changes(compaction={"enabled": True}, teams=TEAMS,
                                           reclaim={"enabled": True, "namespaces": ["ml"]},
                                           remediation={"mode": "drain"})))
    return [rule for rule in rule_groups(every)["groups"][0]["rules"] if "alert" in rule]


def test_every_alert_is_exercised_by_a_rule_test():
    source = "".join(path.read_text() for pattern in ("test_*alert*.py", "test_reclaim.py")
                     for path in Path(__file__).parent.glob(pattern))
    for rule in every_alert():
        assert f'"{rule["alert"]}"' in source, rule["alert"]


# --- compaction -------------------------------------------------------------------------------

def test_whole_free_nodes_are_counted(promtool_bin, tmp_path):
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": [ksm_node("n1", 8), ksm_node("n2", 8),
                                           ksm_node("n3", 8), ksm_node("cpu-1", 0),
                                           *ksm_pod("p", "n2", 1)],
        "promql_expr_test": [recorded(gpu_rules.WHOLE_FREE_NODES, {"": 2})]}])


def test_compaction_that_stopped_succeeding_is_reported(promtool_bin, tmp_path):
    cron_job = 'namespace="gpu-compaction", cronjob="gpu-compaction"'
    labels = {"namespace": "gpu-compaction", "cronjob": "gpu-compaction", "severity": "warning"}

    def series(metric: str, values: str) -> dict:
        return {"series": f"{metric}{{{cron_job}}}", "values": values}
    run_promtool_tests(promtool_bin, tmp_path, [
        # Created at 0; runs succeeded at minute 15, then never again (the binpack scheduler
        # went down): stale 2 h after the last success.
        {"interval": "1m", "input_series": [
            series("kube_cronjob_created", "0x200"),
            series("kube_cronjob_status_last_successful_time", "_x15 900x185")],
         "alert_rule_test": [fires("GpuCompactionNotRunning", "130m", []),
                             fires("GpuCompactionNotRunning", "136m", [labels])]},
        # Never succeeded since it was created.
        {"interval": "1m", "input_series": [series("kube_cronjob_created", "0x200")],
         "alert_rule_test": [fires("GpuCompactionNotRunning", "110m", []),
                             fires("GpuCompactionNotRunning", "125m", [labels])]},
    ], settings=WITH_COMPACTION)


def test_compaction_alerts_only_with_compaction_on():
    def alerts(settings) -> set[str]:
        return {rule.get("alert") for rule in rule_groups(settings)["groups"][0]["rules"]}
    assert "GpuCompactionNotRunning" in alerts(WITH_COMPACTION)
    assert "GpuCompactionNotRunning" not in alerts(SETTINGS)


# --- the DRA path: GPUs counted from what the DCGM exporter sees -------------------------------

DRA_SETTINGS = load_settings(raw(with_changes(kubernetesVersion="1.37.2",
                                              gpuOperator={"gpuPath": "dra"})))


def dra_gpu(node: str, index: int, pod: str | None = None, container: str = "main") -> dict:
    """A GPU's utilization series as the DCGM exporter's DRA mode labels it (4.6.0-4.8.3): a GPU
    allocated through a claim carries its pod and the claim's device; a free GPU neither."""
    labels = {"gpu": str(index), "UUID": f"GPU-{node}-{index}", "modelName": "NVIDIA H100",
              "hostname": node, "node": node}
    if pod:
        labels |= {"namespace": "team-a", "pod": pod, "container": container,
                   "dra_claim_name": f"{pod}-extended-resources-x1", "dra_claim_namespace":
                   "team-a", "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": node,
                   "dra_device_name": f"gpu-{index}"}
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"DCGM_FI_DEV_GPU_UTIL{{{text}}}", "values": "50x30"}


def test_on_the_dra_path_capacity_and_allocation_come_from_the_exporter(promtool_bin, tmp_path):
    """No node advertises GPUs on the DRA path: two 4-GPU nodes, n1 with a pod of 2 GPUs
    through nvidia.com/gpu (a request and a claim: counted once) and a pod of 1 GPU through a
    claim of its own, whose GPU two containers share; n2 free."""
    series = [dra_gpu("n1", 0, "req2"), dra_gpu("n1", 1, "req2"),
              dra_gpu("n1", 2, "claim1"), dra_gpu("n1", 2, "claim1", container="sidecar"),
              dra_gpu("n1", 3), *(dra_gpu("n2", i) for i in range(4)),
              *ksm_pod("req2", "n1", 2)]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            recorded(gpu_rules.NODE_ALLOCATABLE, {'{node="n1"}': 4, '{node="n2"}': 4}),
            recorded(gpu_rules.NODE_FREE, {'{node="n1"}': 1, '{node="n2"}': 4}),
            recorded(gpu_rules.NAMESPACE_ALLOCATED, {'{namespace="team-a"}': 3}),
            recorded(gpu_rules.WHOLE_FREE_NODES, {"": 1}),
        ]}], settings=DRA_SETTINGS)


def test_on_the_dra_path_a_silent_exporter_is_reported(promtool_bin, tmp_path):
    """A GPU node whose exporter stops: its GPUs vanish with it, so the alert asks whether the
    node had GPUs within the hour."""
    up = 'up{job="nvidia-dcgm-exporter", node="n1"}'
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": [
            {"series": dra_gpu("n1", 0)["series"], "values": "50x10 _x50"},
            {"series": up, "values": "1x10 0x50"}],
        "alert_rule_test": [
            fires("GpuExporterDown", "9m", []),
            fires("GpuExporterDown", "25m", [{"node": "n1", "severity": "warning"}])]}],
        settings=DRA_SETTINGS)


def test_on_the_dra_path_the_exporters_series_keep_their_job():
    monitor = monitoring.dcgm_service_monitor(monitoring_of(DRA_SETTINGS))
    assert monitor["spec"]["selector"]["matchLabels"] == {"app": "nvidia-dcgm-exporter-dra"}
    assert {"targetLabel": "job", "replacement": gpu_rules.DCGM_JOB, "action": "replace"} in \
        monitor["spec"]["endpoints"][0]["relabelings"]


# --- free capacity per network domain -----------------------------------------------------------

RACK = "example.com/rack"
WITH_RACKS = load_settings(raw(with_changes(teams={
    "enabled": True, "topology": {"levels": [RACK]},
    "teams": [{"name": "research", "namespaces": ["research"],
               "quota": {"gpu": {"nvidia.com/gpu": 8}}}]})))


def test_free_gpus_and_whole_free_nodes_are_shown_per_rack(promtool_bin, tmp_path):
    """Racks a (n1 with a 3-GPU pod, n2 free) and b (n3 with a 1-GPU pod); a CPU node without
    a rack. The dashboard's own expressions, on series shaped as kube-state-metrics exports
    the racks' labels once the platform allow-lists them."""
    inputs = monitoring_of(WITH_RACKS)
    assert f"nodes=[nvidia.com/gpu.present,{RACK}]" in monitoring.chart_values(inputs)[
        "kube-state-metrics"]["metricLabelsAllowlist"]
    label = ksm_label(RACK)
    by_title = {p["title"]: p["targets"][0]["expr"]
                for p in dashboard.dashboard(inputs)["panels"] if p.get("targets")}
    free, whole = by_title[f"Free GPUs per {RACK}"], by_title[f"Whole free GPU nodes per {RACK}"]

    def node_labels(node: str, rack: str | None) -> dict:
        racked = f', {label}="{rack}"' if rack else ""
        return {"series": f'kube_node_labels{{node="{node}"{racked}}}', "values": "1x180"}
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m",
        "input_series": [ksm_node("n1", 8), ksm_node("n2", 8), ksm_node("n3", 8),
                         ksm_node("cpu-1", 0), *ksm_pod("p1", "n1", 3), *ksm_pod("p3", "n3", 1),
                         node_labels("n1", "a"), node_labels("n2", "a"),
                         node_labels("n3", "b"), node_labels("cpu-1", None)],
        "promql_expr_test": [
            {"expr": free, "eval_time": "5m",
             "exp_samples": [{"labels": f'{{{label}="a"}}', "value": 13},
                             {"labels": f'{{{label}="b"}}', "value": 7}]},
            {"expr": whole, "eval_time": "5m",
             "exp_samples": [{"labels": f'{{{label}="a"}}', "value": 1}]}]}], WITH_RACKS)


def test_without_a_topology_there_are_no_domain_panels():
    titles = {p["title"] for p in dashboard.dashboard(monitoring_of(SETTINGS))["panels"]}
    assert not [t for t in titles if " per " in t and "rack" in t]
