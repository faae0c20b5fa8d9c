"""`monitoring.stack: existing` beside a kube-prometheus-stack the cluster already runs, built as
the chart builds it (prometheus_operator.py): the real Prometheus Operator of the pinned chart
turns what the platform declares into Prometheus' configuration and rule files, and a preview
reads the same cluster through a kubeconfig context."""

import json
from dataclasses import dataclass

import pytest

from components.base.model import Findings
from components.monitoring import existing_stack
from components.monitoring.settings import CHART_ONLY
from components.platform.settings import ClusterSettings, StackSettings
from components.preview import existing_stacks
from components.preview.cluster import ClusterReader
from tests.kit import harness
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, apply_declared
from tests.kit.cluster.prometheus_operator import (
    NAMESPACE,
    NODE_EXPORTER,
    NODE_EXPORTER_PORT,
    PROMETHEUS,
    RELEASE,
    RELEASE_LABELS,
    PrometheusOperator,
    chart_image,
    chart_node_exporter,
    chart_prometheus,
    generated_configuration,
    rule_files,
    scrape_jobs,
)

MONITORING_KEY = "gpu-platform:monitoring"
MONITORING_COMPONENT = "gpu-platform:index:Monitoring"
MONITOR_KINDS = {"ServiceMonitor": "serviceMonitor", "PodMonitor": "podMonitor"}
# A label the platform does not set, for a Prometheus whose rule selector asks for it.
TEAM_LABEL = {"team": "observability"}


@dataclass
class Joining:
    """A run of the program joining the existing stack."""
    settings: StackSettings
    recording: harness.Recording
    monitoring: list[dict]      # the Monitoring component's objects

    def of_kind(self, kind: str) -> list[dict]:
        return [o for o in self.monitoring if o["kind"] == kind]


def joining(cp: ControlPlane, **existing) -> Joining:
    """The example stack with `monitoring.stack: existing` (and `existing` merged into
    monitoring.existing), run under mocks, its context this control plane's. The chart's
    settings are left out: that mode refuses them."""
    config = harness.example_config()
    monitoring = {k: v for k, v in json.loads(config[MONITORING_KEY]).items()
                  if k not in CHART_ONLY}
    monitoring |= {"stack": "existing", "existing": {**monitoring["existing"], **existing}}
    config[MONITORING_KEY] = harness.engine_value(monitoring)
    recording = harness.run_program(config)
    [component] = [r.urn for r in recording.registrations if r.type == MONITORING_COMPONENT]
    objects = [harness.integral_numbers(r.inputs) for r in recording.registrations
               if r.parent == component and r.type.startswith("kubernetes:")]
    settings = harness.settings_of(config).model_copy(update={"cluster": ClusterSettings(
        context="test", kubeconfig=str(cp.kubeconfig("preview")))})
    return Joining(settings, recording, objects)


def kube_state_metrics(allowlist: str) -> dict:
    """kube-state-metrics' Deployment as the chart's subchart makes it, exporting the labels of
    `allowlist` (the chart's `kube-state-metrics.metricLabelsAllowlist`)."""
    labels = {"app.kubernetes.io/name": "kube-state-metrics", "app.kubernetes.io/instance": RELEASE}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"{RELEASE}-kube-state-metrics", "namespace": NAMESPACE,
                     "labels": {**labels, **RELEASE_LABELS}},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{
                "name": "kube-state-metrics",
                "image": chart_image("kube-state-metrics/kube-state-metrics"),
                "args": ["--port=8080", f"--metric-labels-allowlist={allowlist}"]}]}}},
    }


@pytest.fixture(scope="module")
def operator(control_plane):
    """The existing stack: the operator, the chart's Prometheus, node-exporter and
    kube-state-metrics (configured as monitoring.md asks)."""
    running = PrometheusOperator(control_plane).start()
    kube = control_plane.admin
    kube.apply(chart_prometheus(), TEST_MANAGER)
    kube.apply(chart_node_exporter(), TEST_MANAGER)
    kube.apply(kube_state_metrics("pods=[gpu-platform.io/admission-audit],"
                                  "nodes=[nvidia.com/gpu.present,karpenter.sh/capacity-type]"),
               TEST_MANAGER)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def joined(control_plane, operator) -> Joining:
    """What the program declares for the existing stack, applied."""
    run = joining(control_plane)
    apply_declared(control_plane.admin, run.monitoring)
    return run


def jobs_of(monitor: dict) -> list[str]:
    """The scrape jobs the operator names after a monitor: one per endpoint."""
    meta, spec = monitor["metadata"], monitor["spec"]
    endpoints = spec.get("endpoints") or spec.get("podMetricsEndpoints") or []
    return [f"{MONITOR_KINDS[monitor['kind']]}/{meta['namespace']}/{meta['name']}/{index}"
            for index in range(len(endpoints))]


def platform_rule_files(cp: ControlPlane) -> dict[str, dict]:
    """The rule files the operator wrote from the platform's PrometheusRule (keyed
    `<namespace>-<name>-<uid>.yaml` in the rule-file ConfigMaps)."""
    return {key: rules for key, rules in rule_files(cp.admin).items()
            if key.split("/", 1)[1].startswith(f"{NAMESPACE}-gpu-platform-")}


def preview_problems(settings: StackSettings) -> list[str]:
    """What a preview's check of the existing stack refuses, read through the stack's
    kubeconfig context."""
    try:
        existing_stacks.check_existing_stacks(settings)
    except existing_stacks.ExistingStackError as refused:
        return str(refused).splitlines()[1:]
    return []


# --- what is declared ------------------------------------------------------------------------

def test_the_platform_declares_no_chart_operator_node_exporter_or_crds(control_plane, joined):
    declared = joined.recording.manifests()
    charts = {r.inputs["chart"] for r in joined.recording.of_type(
        "kubernetes:helm.sh/v3:Release")}
    assert "kube-prometheus-stack" not in charts
    assert not [o for o in declared if o["kind"] == "CustomResourceDefinition"]
    images = [c["image"] for o in declared
              for c in (o.get("spec", {}).get("template", {}).get("spec", {})
                        .get("containers") or [])]
    assert not [i for i in images if "prometheus-operator" in i or "node-exporter" in i], images
    host_ports = [p["hostPort"] for o in declared
                  for c in (o.get("spec", {}).get("template", {}).get("spec", {})
                            .get("containers") or [])
                  for p in c.get("ports") or [] if p.get("hostPort")]
    assert NODE_EXPORTER_PORT not in host_ports
    assert NAMESPACE not in [o["metadata"]["name"] for o in declared if o["kind"] == "Namespace"]
    assert {o["kind"] for o in joined.monitoring} == {"ServiceMonitor", "PodMonitor",
                                                     "PrometheusRule", "ConfigMap"}
    # On the cluster, node-exporter is still the chart's alone.
    daemonsets = control_plane.admin.request("GET", "/apis/apps/v1/daemonsets")["items"]
    on_9100 = [d["metadata"]["name"] for d in daemonsets
               for c in d["spec"]["template"]["spec"]["containers"]
               for p in c.get("ports") or [] if p.get("hostPort") == NODE_EXPORTER_PORT]
    assert on_9100 == [NODE_EXPORTER]


# --- what the real operator makes of it ---------------------------------------------------------

def test_every_monitor_the_platform_declares_is_a_scrape_job(control_plane, operator, joined):
    monitors = [o for o in joined.monitoring if o["kind"] in MONITOR_KINDS]
    wanted = [job for monitor in monitors for job in jobs_of(monitor)]
    def scraped() -> dict[str, dict]:
        found = scrape_jobs(generated_configuration(control_plane.admin))
        return found if all(job in found for job in wanted) else {}

    def explain() -> str:
        found = scrape_jobs(generated_configuration(control_plane.admin))
        return f"jobs: {sorted(found)}\n{operator.log()}"

    jobs = wait_until(scraped, "the operator's configuration to scrape the platform's monitors",
                      timeout=60, explain=explain)
    # Each scrapes the namespace of what it monitors, as the stack's settings place them.
    settings = joined.settings
    expected = {
        "serviceMonitor/monitoring/nvidia-dcgm-exporter/0": settings.gpu_operator.namespace,
        f"serviceMonitor/monitoring/{settings.scheduler.name}/0": settings.scheduler.namespace,
        "podMonitor/monitoring/gpu-admission-opa/0": settings.admission.namespace,
        "serviceMonitor/monitoring/kueue/0": settings.teams.kueue.namespace,
    }
    assert sorted(wanted) == sorted(expected)
    for job, namespace in expected.items():
        [discovery] = jobs[job]["kubernetes_sd_configs"]
        assert discovery["namespaces"]["names"] == [namespace], job


def test_the_platform_s_rules_are_in_the_rule_files_prometheus_loads(control_plane, operator,
                                                                      joined):
    [declared] = joined.of_kind("PrometheusRule")
    files = wait_until(lambda: platform_rule_files(control_plane),
                       "the operator to write the platform's rule file", timeout=60,
                       explain=operator.log)
    [(key, rules)] = files.items()
    assert rules["groups"] == declared["spec"]["groups"]
    # The configuration loads the ConfigMap the rule file is in.
    config_map = key.split("/", 1)[0]
    loaded = generated_configuration(control_plane.admin)["rule_files"]
    assert any(f"/{config_map}/" in path for path in loaded), loaded


# --- the preview --------------------------------------------------------------------------------

def test_the_preview_finds_nothing_wrong_with_the_chart_s_prometheus(joined):
    with ClusterReader(joined.settings.cluster) as reader:
        found = existing_stack.survey(
            reader, harness.inputs_of(joined.settings).monitoring)
    assert found == Findings()
    assert preview_problems(joined.settings) == []


def test_a_prometheus_denying_file_access_loses_the_token_monitors_and_the_preview_says_so(
        control_plane, operator, joined):
    """The scheduler's and Kueue's monitors read Prometheus' ServiceAccount token from its file,
    which the operator refuses for a Prometheus with arbitraryFSAccessThroughSMs.deny."""
    kube, settings = control_plane.admin, joined.settings
    token_jobs = {f"serviceMonitor/monitoring/{settings.scheduler.name}/0",
                  "serviceMonitor/monitoring/kueue/0"}
    other_jobs = {"serviceMonitor/monitoring/nvidia-dcgm-exporter/0",
                  "podMonitor/monitoring/gpu-admission-opa/0"}

    def deny(denied: bool) -> None:
        kube.merge_patch("monitoring.coreos.com/v1", "Prometheus", PROMETHEUS,
                         {"spec": {"arbitraryFSAccessThroughSMs": {"deny": denied}}}, NAMESPACE)

    def jobs() -> set[str]:
        return set(scrape_jobs(generated_configuration(kube)))

    deny(True)
    try:
        problems = preview_problems(settings)
        assert len(problems) == 2
        for job in token_jobs:
            monitor = job.split("/")[2]
            assert any(f"rejects ServiceMonitor monitoring/{monitor}," in p for p in problems)
        wait_until(lambda: not jobs() & token_jobs and other_jobs <= jobs(),
                   "the operator to drop the monitors that read the token", timeout=60,
                   explain=lambda: f"jobs: {sorted(jobs())}\n{operator.log()}")
    finally:
        deny(False)
    wait_until(lambda: token_jobs | other_jobs <= jobs(), "the monitors to be scraped again",
               timeout=60, explain=operator.log)
    assert preview_problems(settings) == []


def test_a_narrower_rule_selector_stops_the_preview_and_the_labels_it_names_fix_it(
        control_plane, operator, joined):
    kube = control_plane.admin
    kube.merge_patch("monitoring.coreos.com/v1", "Prometheus", PROMETHEUS,
                     {"spec": {"ruleSelector": {"matchLabels": TEAM_LABEL}}}, NAMESPACE)
    [problem] = preview_problems(joined.settings)
    assert "spec.ruleSelector" in problem and "PrometheusRule monitoring/gpu-platform" in problem
    assert "monitoring.existing.labels" in problem
    # The operator agrees: the rule is no longer Prometheus'.
    wait_until(lambda: not platform_rule_files(control_plane),
               "the operator to drop the platform's rule file", timeout=60,
               explain=operator.log)

    labelled = joining(control_plane, labels={**RELEASE_LABELS, **TEAM_LABEL})
    apply_declared(kube, labelled.monitoring)
    assert preview_problems(labelled.settings) == []
    [declared] = labelled.of_kind("PrometheusRule")
    files = wait_until(lambda: platform_rule_files(control_plane),
                       "the operator to pick the relabelled rule up", timeout=60,
                       explain=operator.log)
    [rules] = files.values()
    assert rules["groups"] == declared["spec"]["groups"]
    # The monitors, labelled alike, are still scraped.
    jobs = scrape_jobs(generated_configuration(kube))
    assert all(job in jobs for monitor in labelled.monitoring if monitor["kind"] in MONITOR_KINDS
               for job in jobs_of(monitor))
