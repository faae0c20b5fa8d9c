"""`monitoring.stack: existing`: the platform joins the Prometheus Operator stack a cluster
already runs. What is declared (no chart, no operator, no CRDs, no namespace), how the objects
are labelled, and what `pulumi preview` finds on the cluster: the existing Prometheus' selectors,
evaluated as the Prometheus Operator evaluates them, and kube-state-metrics' exported labels."""

import pytest

from components.base.model import Findings
from components.base.validation import SettingsError
from components.monitoring import existing_stack
from components.platform.config import load_settings
from components.preview import existing_stacks
from components.preview.cluster import NotAllowed
from tests.kit.harness import monitoring_of, run_program, stack_file_config
from tests.kit.stacks import raw, with_changes

K8S = "kubernetes:"
EXISTING = with_changes(monitoring={"stack": "existing"})
SETTINGS = load_settings(raw(EXISTING))

# A Prometheus as kube-prometheus-stack makes it with its default values (release
# kube-prometheus-stack; `*SelectorNilUsesHelmValues: true`): each selector matches the
# release's label, and the namespace selectors are empty (every namespace).
CHART_DEFAULT_PROMETHEUS = {
    "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
    "metadata": {"name": "kube-prometheus-stack-prometheus", "namespace": "monitoring"},
    "spec": {
        "serviceMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
        "serviceMonitorNamespaceSelector": {},
        "podMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
        "podMonitorNamespaceSelector": {},
        "ruleSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
        "ruleNamespaceSelector": {},
    },
}
# kube-state-metrics as the chart runs it with the allowlist the platform needs.
KSM = {"metadata": {"name": "kube-prometheus-stack-kube-state-metrics",
                    "namespace": "monitoring"},
       "spec": {"template": {"spec": {"containers": [{"name": "kube-state-metrics", "args": [
           "--port=8080",
           "--metric-labels-allowlist=pods=[gpu-platform.io/admission-audit],"
           "nodes=[nvidia.com/gpu.present]"]}]}}}}


class FakeCluster:
    """Answers a preview's reads from a dict of paths."""

    def __init__(self, objects: dict[str, dict], lists: dict[str, list[dict]]):
        self.objects, self.lists = objects, lists

    def get(self, path: str, **_: str) -> dict | None:
        return self.objects.get(path)

    def items(self, path: str, **_: str) -> list[dict]:
        return self.lists.get(path, [])


def cluster(prometheus: dict | None = CHART_DEFAULT_PROMETHEUS,
            deployments: tuple[dict, ...] = (KSM,)) -> FakeCluster:
    path = (f"/apis/{existing_stack.PROMETHEUS_API}/namespaces/monitoring/prometheuses/"
            "kube-prometheus-stack-prometheus")
    objects = {"/api/v1/namespaces/monitoring": {"metadata": {"labels": {
        "kubernetes.io/metadata.name": "monitoring"}}}}
    if prometheus is not None:
        objects[path] = prometheus
    return FakeCluster(objects, {"/apis/apps/v1/deployments": list(deployments),
                                 f"/apis/{existing_stack.PROMETHEUS_API}/prometheuses": [
                                     {"metadata": {"name": "k8s", "namespace": "observability"}}]})


def with_spec(**spec) -> dict:
    return {**CHART_DEFAULT_PROMETHEUS, "spec": {**CHART_DEFAULT_PROMETHEUS["spec"], **spec}}


# --- what is declared --------------------------------------------------------------------------

def test_an_existing_stack_gets_no_chart_operator_crds_or_namespace():
    recording = run_program(stack_file_config(EXISTING))
    releases = [r.name for r in recording.of_type(f"{K8S}helm.sh/v3:Release")]
    assert releases == ["gpu-operator"]
    declared = recording.manifests()
    assert "monitoring" not in [o["metadata"]["name"] for o in declared
                                if o["kind"] == "Namespace"]
    assert not [o for o in declared if o["metadata"].get("namespace") == "monitoring"
                and o["kind"] not in ("ServiceMonitor", "PodMonitor", "PrometheusRule",
                                      "ConfigMap")]
    joined = [o for o in declared if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {o["kind"] for o in joined} == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    for obj in joined:
        assert obj["metadata"]["namespace"] == "monitoring"
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    [dashboard] = [o for o in declared if o["kind"] == "ConfigMap"
                   and o["metadata"]["name"] == "gpu-platform-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_grafana_is_reached_at_the_existing_service():
    recording = run_program(stack_file_config(with_changes(monitoring={
        "stack": "existing", "existing": {"grafanaService": "grafana", "grafanaPort": 3000}})))
    outputs = next(v for k, v in recording.outputs.items() if k.endswith("::gpu-platform"))
    assert outputs["grafanaUrl"] == "http://grafana.monitoring.svc:3000"
    assert "svc/grafana 3000:3000" in outputs["grafanaPortForward"]
    assert outputs.get("grafanaAdminPassword") is None


@pytest.mark.parametrize("setting", [{"retention": "30d"}, {"extraValues": {"a": 1}},
                                     {"alertmanager": {"receivers": []}}])
def test_chart_settings_are_refused_with_an_existing_stack(setting):
    with pytest.raises(SettingsError) as refused:
        load_settings(raw(with_changes(monitoring={"stack": "existing", **setting})))
    [key] = setting
    assert f"gpu-platform:monitoring.{key}" in str(refused.value)
    assert "which `stack: existing` does not install" in str(refused.value)


# --- the existing Prometheus' selectors ----------------------------------------------------------

def test_the_chart_s_default_prometheus_selects_everything_the_platform_declares():
    found = existing_stack.survey(cluster(), monitoring_of(SETTINGS))
    assert found == Findings()


def test_a_selector_that_does_not_match_is_named_with_the_fix():
    narrowed = with_spec(ruleSelector={"matchLabels": {"team": "observability"}})
    problems = existing_stack.survey(cluster(narrowed), monitoring_of(SETTINGS)).problems
    assert len(problems) == 1
    assert "spec.ruleSelector {'matchLabels': {'team': 'observability'}} does not select " \
           "PrometheusRule monitoring/gpu-platform," in problems[0]
    assert "set monitoring.existing.labels" in problems[0]
    matching = load_settings(raw(with_changes(monitoring={
        "stack": "existing", "existing": {"labels": {"release": "kube-prometheus-stack",
                                                     "team": "observability"}}})))
    assert existing_stack.survey(cluster(narrowed), monitoring_of(matching)).problems == []


def test_a_null_selector_selects_nothing_and_a_null_namespace_selector_only_its_namespace():
    spec = dict(CHART_DEFAULT_PROMETHEUS["spec"])
    del spec["podMonitorSelector"]
    spec["serviceMonitorNamespaceSelector"] = None
    elsewhere = {"metadata": {"name": "kube-prometheus-stack-prometheus",
                              "namespace": "observability"}, "spec": spec}
    problems = existing_stack.unselected(elsewhere, {}, [
        {"kind": "PodMonitor", "metadata": {"name": "opa", "namespace": "monitoring",
                                            "labels": {"release": "kube-prometheus-stack"}}},
        {"kind": "ServiceMonitor", "metadata": {"name": "dcgm", "namespace": "monitoring",
                                                "labels": {"release": "kube-prometheus-stack"}}}])
    assert any("has no spec.podMonitorSelector, so it uses no PodMonitor" in p for p in problems)
    assert any("looks for ServiceMonitors in its own namespace only" in p for p in problems)


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    ({}, {}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"},
     True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"},
     False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
])
def test_label_selectors_match_as_kubernetes_matches_them(selector, labels, selected):
    assert existing_stack.selects(selector, labels) is selected


def test_ignored_namespace_selectors_are_a_problem():
    problems = existing_stack.survey(cluster(with_spec(ignoreNamespaceSelectors=True)),
                                     monitoring_of(SETTINGS)).problems
    assert any("spec.ignoreNamespaceSelectors" in p for p in problems)


def test_a_prometheus_denying_file_access_rejects_the_monitors_that_read_the_token():
    denying = with_spec(arbitraryFSAccessThroughSMs={"deny": True})
    problems = existing_stack.survey(cluster(denying), monitoring_of(SETTINGS)).problems
    assert len(problems) == 1
    assert "spec.arbitraryFSAccessThroughSMs.deny, so the operator rejects ServiceMonitor " \
           "monitoring/gpu-binpack-scheduler," in problems[0]
    assert "set it to false" in problems[0]
    allowing = with_spec(arbitraryFSAccessThroughSMs={"deny": False})
    assert existing_stack.survey(cluster(allowing), monitoring_of(SETTINGS)).problems == []


def test_a_missing_prometheus_names_those_the_cluster_has():
    problems = existing_stack.survey(cluster(prometheus=None), monitoring_of(SETTINGS)).problems
    assert problems == ["monitoring.existing.prometheus: no Prometheus monitoring/"
                        "kube-prometheus-stack-prometheus (monitoring.namespace/monitoring."
                        "existing.prometheus); the cluster has observability/k8s"]


# --- kube-state-metrics --------------------------------------------------------------------------

def test_without_kube_state_metrics_the_preview_says_what_stays_empty():
    warnings = existing_stack.survey(cluster(deployments=()), monitoring_of(SETTINGS)).warnings
    assert len(warnings) == 1 and "no kube-state-metrics Deployment found" in warnings[0]


def test_labels_kube_state_metrics_does_not_export_are_named():
    plain = {**KSM, "spec": {"template": {"spec": {"containers": [
        {"name": "kube-state-metrics", "args": ["--port=8080"]}]}}}}
    warnings = existing_stack.survey(cluster(deployments=(plain,)),
                                     monitoring_of(SETTINGS)).warnings
    assert len(warnings) == 1
    assert ("does not export the labels pods=[gpu-platform.io/admission-audit],"
            "nodes=[nvidia.com/gpu.present]") in warnings[0]


def test_where_reclaim_evicts_the_pod_annotations_its_alert_reads_are_named():
    """GpuIdlePodEvictionScheduled reads the deadline a run writes on the pod: a
    kube-state-metrics that exports no pod annotation is told which to add, by the flag and
    the chart value."""
    evicting = load_settings(raw(with_changes(monitoring={"stack": "existing"}, reclaim={
        "enabled": True, "action": "evict", "namespaces": ["research"],
        "prometheusUrl": "http://prometheus-operated.monitoring.svc:9090"})))
    [warning] = existing_stack.survey(cluster(deployments=(KSM,)),
                                      monitoring_of(evicting)).warnings
    assert warning.endswith(
        "does not export the annotations pods=[gpu-platform.io/idle-evict-after,"
        "gpu-platform.io/idle-reported-at]: the alerts on idle pods reclaim will evict read "
        "them; add them to its --metric-annotations-allowlist (the chart's "
        "metricAnnotationsAllowList)")
    exported = {**KSM, "spec": {"template": {"spec": {"containers": [{
        "name": "kube-state-metrics", "args": [
            *KSM["spec"]["template"]["spec"]["containers"][0]["args"],
            "--metric-annotations-allowlist=pods=[gpu-platform.io/idle-evict-after,"
            "gpu-platform.io/idle-reported-at]"]}]}}}}
    assert existing_stack.survey(cluster(deployments=(exported,)),
                                 monitoring_of(evicting)).warnings == []


# --- in a preview --------------------------------------------------------------------------------

def test_a_preview_stops_on_a_problem_and_deploys_nothing(monkeypatch):
    narrowed = with_spec(serviceMonitorSelector={"matchLabels": {"team": "observability"}})
    monkeypatch.setattr(existing_stacks, "ClusterReader", lambda _: _Context(cluster(narrowed)))
    with pytest.raises(existing_stacks.ExistingStackError) as refused:
        existing_stacks.check_existing_stacks(SETTINGS)
    assert "nothing was deployed" in str(refused.value)
    for monitor in ("nvidia-dcgm-exporter", "gpu-binpack-scheduler"):
        assert f"does not select ServiceMonitor monitoring/{monitor}," in str(refused.value)


def test_a_preview_not_allowed_to_read_says_what_was_not_checked(monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr(existing_stacks.pulumi.log, "warn", warned.append)
    monkeypatch.setattr(existing_stacks, "ClusterReader", lambda _: _Context(_Refusing()))
    existing_stacks.check_existing_stacks(SETTINGS)
    assert len(warned) == 1 and "was not checked" in warned[0]
    assert "get prometheuses" in warned[0]


class _Refusing:
    def get(self, path: str, **_: str) -> dict | None:
        raise NotAllowed(f"GET {path}: HTTP 403 for the context's user")

    def items(self, path: str, **_: str) -> list[dict]:
        raise NotAllowed(f"GET {path}: HTTP 403 for the context's user")


class _Context:
    def __init__(self, reader):
        self.reader = reader

    def __enter__(self):
        return self.reader

    def __exit__(self, *_):
        return None
