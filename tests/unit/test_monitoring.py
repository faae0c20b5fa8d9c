"""GPU observability, tested rather than hoped: every PromQL expression parses in Prometheus' own
parser (promtool, the version the stack deploys) and uses only metrics the pinned exporters emit;
alerts reach the receivers of their severity (amtool); the dashboard has what Grafana needs to
load it and answers the platform team's questions. The alert rules' own tests, in `promtool test
rules`, are in test_alert_rules.py."""

import copy
import json
import re
import subprocess
from pathlib import Path

import promql_parser
import pytest
import yaml

from components import monitoring
from components.base.gpu_faults import FAULTS
from components.monitoring import dashboard
from components.monitoring import rules as gpu_rules
from components.platform.config import load_settings
from tests.kit import harness, tools
from tests.kit.harness import monitoring_of
from tests.kit.stacks import TEAMS, raw, with_changes

FIXTURES = harness.FIXTURES
# Teams on, so that Kueue's series are read too, and GPU prices, so that the cost columns are.
PRICES = {"NVIDIA H100 80GB HBM3": 2.5}
SETTINGS = load_settings(raw(with_changes(teams=TEAMS, monitoring={"usage": {
    "pricePerGpuHour": PRICES}})))
WITH_COMPACTION = load_settings(raw(with_changes(compaction={"enabled": True})))
WITH_REMEDIATION = load_settings(raw(with_changes(remediation={"mode": "drain"})))

# Grafana replaces these before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$namespace": ".*", "$node": ".*", "$model": ".*", "$team": "research",
                     "$__range": "6h"}
# Variables Grafana itself defines.
GRAFANA_GLOBALS = {"__all", "__range"}


def dashboard_queries(settings=SETTINGS) -> list[str]:
    exprs = dashboard.queries(dashboard.dashboard(monitoring_of(settings)))
    # label_values(<selector>, label) is Grafana's; its selector is PromQL.
    exprs = [re.sub(r"^label_values\((.*), *\w+\)$", r"\1", e) for e in exprs]
    for variable, value in GRAFANA_VARIABLES.items():
        exprs = [e.replace(variable, value) for e in exprs]
    return exprs


# The serving certificate's expiry in the rule tests (promtool's clock starts at 0): 40 days.
CERT_NOT_AFTER = 40 * 86400


def rule_groups(settings=SETTINGS, annotations: bool = True) -> dict:
    rule = gpu_rules.prometheus_rule(monitoring_of(settings, CERT_NOT_AFTER))
    groups = copy.deepcopy(rule["spec"])
    if not annotations:
        for group in groups["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
    return groups


def rule_exprs(settings=SETTINGS) -> list[str]:
    return [r["expr"] for g in rule_groups(settings)["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    names = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def test_every_expression_parses_in_prometheus(promtool_bin, tmp_path):
    exprs = dashboard_queries() + rule_exprs()
    as_rules = {"groups": [{"name": "parse", "rules": [
        {"record": f"parse:expr_{i}:check", "expr": e} for i, e in enumerate(exprs)]}]}
    (tmp_path / "exprs.yaml").write_text(yaml.safe_dump(as_rules))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups()))
    for name in ("exprs.yaml", "rules.yaml"):
        result = subprocess.run([str(promtool_bin), "check", "rules", str(tmp_path / name)],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    assert len(exprs) >= 30


def test_a_broken_expression_is_caught(promtool_bin, tmp_path):
    broken = {"groups": [{"name": "x", "rules": [{"record": "x:y:z", "expr": "sum by (node"}]}]}
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    result = subprocess.run([str(promtool_bin), "check", "rules", str(tmp_path / "broken.yaml")],
                            capture_output=True, text=True)
    assert result.returncode != 0


def test_only_metrics_the_pinned_exporters_emit():
    exporters = yaml.safe_load((FIXTURES / "exporter-metrics.yaml").read_text())
    when_listed = set(exporters.pop("dcgm-exporter-when-listed"))
    emitted = {name for names in exporters.values() for name in names}
    recorded = {r["record"] for g in rule_groups()["groups"] for r in g["rules"]
                if "record" in r}
    used = set().union(*(metric_names(e) for e in dashboard_queries() + rule_exprs()))
    assert used - emitted - recorded - when_listed == set()
    # A field the default counters leave out is read by a fault that says so, and only there.
    assert {f.metric for f in FAULTS if not f.default_counter} == when_listed
    # Every recorded series the dashboard reads is recorded by the rules, and vice versa.
    assert {n for n in used if ":" in n} == recorded


# --- Alert routing (real amtool) -------------------------------------------------------------

@pytest.fixture(scope="module")
def amtool_bin() -> Path:
    return tools.amtool()


RECEIVERS = [
    {"name": "oncall", "severities": ["critical"], "pagerdutyRoutingKey": "0123abcd"},
    {"name": "gpu-chat", "severities": ["critical", "warning"],
     "slackApiUrl": "https://hooks.slack.example/T0/B0/x", "slackChannel": "#gpu-platform"},
    {"name": "archive", "severities": ["info"], "webhookUrl": "https://alerts.example/in"},
]


def alertmanager_file(tmp_path, settings) -> Path:
    path = tmp_path / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(monitoring.chart_values(monitoring_of(settings))["alertmanager"]["config"]))
    return path


@pytest.mark.parametrize("receivers", [[], RECEIVERS], ids=["none", "three"])
def test_alertmanager_accepts_the_generated_configuration(amtool_bin, tmp_path, receivers):
    settings = load_settings(raw(with_changes(monitoring={"alertmanager": {
        "receivers": receivers}})))
    result = subprocess.run([str(amtool_bin), "check-config",
                             str(alertmanager_file(tmp_path, settings))],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("severity, receivers", [("critical", "oncall,gpu-chat"),
                                                 ("warning", "gpu-chat"),
                                                 ("info", "archive")])
def test_alerts_reach_the_receivers_of_their_severity(amtool_bin, tmp_path, severity, receivers):
    settings = load_settings(raw(with_changes(monitoring={"alertmanager": {
        "receivers": RECEIVERS}})))
    # The severity every alert of the rules carries.
    rules = gpu_rules.alert_rules(monitoring_of(SETTINGS))
    assert severity in {r["labels"]["severity"] for r in rules}
    result = subprocess.run(
        [str(amtool_bin), "config", "routes", "test",
         f"--config.file={alertmanager_file(tmp_path, settings)}",
         f"--verify.receivers={receivers}", "alertname=GpuTemperatureHigh",
         f"severity={severity}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_receivers_alerts_stay_in_alertmanager(amtool_bin, tmp_path):
    result = subprocess.run(
        [str(amtool_bin), "config", "routes", "test",
         f"--config.file={alertmanager_file(tmp_path, SETTINGS)}", "--verify.receivers=null",
         "alertname=GpuFatalXidError", "severity=critical"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- The dashboard ---------------------------------------------------------------------------

def test_dashboard_has_what_grafana_needs_to_load_it():
    board = dashboard.dashboard(monitoring_of(SETTINGS))
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "namespace", "node", "model"} <= variables
    used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", json.dumps(board["panels"])))
    assert used <= variables | GRAFANA_GLOBALS
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["datasource"] == panel["datasource"]
                                        for t in panel["targets"])
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
    assert board["uid"] == dashboard.UID


def test_dashboard_answers_the_platform_teams_questions():
    board = dashboard.dashboard(monitoring_of(SETTINGS))
    by_title = {p["title"]: " ".join(t["expr"] for t in p.get("targets", []))
                for p in board["panels"]}
    expected = {
        "Free GPUs per node": gpu_rules.NODE_FREE,
        "Nodes that can take an N-GPU pod now": ">= 8",
        "Stranded GPUs": gpu_rules.STRANDED,
        "Largest GPU pod that can be placed": f"max({gpu_rules.NODE_FREE}",
        "GPUs allocated by namespace": gpu_rules.NAMESPACE_ALLOCATED,
        "GPU utilization by namespace": "DCGM_FI_DEV_GPU_UTIL",
        "GPUs by pod": gpu_rules.POD_ALLOCATED,
        "GPU memory used by namespace": "sum by (namespace) (DCGM_FI_DEV_FB_USED",
        "GPU memory used by pod": "DCGM_FI_DEV_FB_USED",
        "Idle for 1h (GpuAllocatedIdle)": "max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Temperature per GPU": "DCGM_FI_DEV_GPU_TEMP",
        "Power per GPU": "DCGM_FI_DEV_POWER_USAGE",
        "GPU faults now": "DCGM_FI_DEV_XID_ERRORS",
        "GPU nodes out of service": 'kube_node_spec_taint{key="gpu-platform.io/gpu-fault"}',
        "DCGM exporters up": 'up{job="nvidia-dcgm-exporter"',
        # The API server counts a webhook's denials with error_type="no_error".
        "Requests refused by the GPU admission policy":
            'apiserver_admission_webhook_rejection_count{name=~"gpu-scheduler-policy.gpu-platform.io'
            '|dra.gpu-scheduler-policy.gpu-platform.io|jobs.gpu-scheduler-policy.gpu-platform.io"'
            ', error_type="no_error"}',
        # kube-state-metrics writes label gpu-platform.io/admission-audit as this.
        # The binpack scheduler's own histogram, scraped by the platform's ServiceMonitor.
        "GPU pods preempted per hour":
            'increase(scheduler_preemption_victims_sum{job="gpu-binpack-scheduler"}[1h])',
        "Pods admitted against the rules (audit mode)":
            'kube_pod_labels{label_gpu_platform_io_admission_audit="violation"',
        # The nodes the GPU node alerts fire for.
        "GPU nodes without the GPU taint":
            'unless on (node) kube_node_spec_taint{key="nvidia.com/gpu", value="present", '
            'effect="NoSchedule"}',
        "GPU nodes whose GPUs nothing serves": 'kube_node_status_allocatable{resource=~"nvidia',
        "Nodes with more device plugins than allowed":
            'kube_pod_container_info{container=~"nvidia(-gpu)?-device-plugin.*"}',
    }
    for title, fragment in expected.items():
        assert fragment in by_title[title], title


def test_the_operators_alert_table_lists_every_alert():
    page = harness.ROOT / "docs" / "operators" / "monitoring.md"
    listed = set(re.findall(r"^\| (\w+)", page.read_text(), re.MULTILINE))
    alerts = {r["alert"] for settings in (SETTINGS, WITH_COMPACTION, WITH_REMEDIATION)
              for g in rule_groups(settings)["groups"] for r in g["rules"] if "alert" in r}
    assert alerts - listed == set()
