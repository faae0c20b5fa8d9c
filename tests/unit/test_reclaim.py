"""Idle GPU reclaim without a cluster: which pods a run reports, evicts, clears or leaves alone
(the actor's own `decide`, on given idle sets and pods), the objects the component declares (a
Role in each opted-in namespace and nothing cluster-wide; eviction only with `action: evict`),
the idle query in Prometheus' own engine (promtool: a pod busy within the window is never in
its answer), the idle alert's team label and route (amtool), and the actor's standard-library
discipline."""

import subprocess
from datetime import UTC, datetime

import pytest

from components import gpu_reclaim
from components.base.validation import SettingsError
from components.gpu_reclaim.actor import gpu_reclaim as actor
from components.monitoring import rules as gpu_rules
from components.monitoring import usage
from components.platform.config import load_settings
from components.platform.wiring import component_inputs
from tests.kit import harness, tools
from tests.kit.harness import ROOT, monitoring_of
from tests.kit.stacks import TEAMS, raw, with_changes
from tests.unit.test_alert_rules import fires, run_promtool_tests
from tests.unit.test_gpu_usage_rules import PROFILING, exporter
from tests.unit.test_graph import waits_for
from tests.unit.test_monitoring import alertmanager_file
from tests.unit.test_schemas import validate

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0
RECLAIM = {"enabled": True, "namespaces": ["serving"], "teams": ["research"],
           "action": "evict", "idleFor": "2h", "gracePeriod": "4h", "maxEvictionsPerRun": 2}


def settings_of(**reclaim):
    return load_settings(raw(with_changes(teams=TEAMS, reclaim={**RECLAIM, **reclaim})))


def inputs_of(**reclaim):
    return component_inputs(settings_of(**reclaim)).reclaim


def config_of(**reclaim) -> actor.Config:
    return gpu_reclaim.actor_config(inputs_of(**reclaim))


def stamp(seconds: float) -> str:
    return actor.format_time(seconds)


def pod(name: str, namespace: str = "research", *, age: float = 3 * HOUR,
        reported: float | None = None, keep: str | None = None, phase: str = "Running",
        owner: str | None = "Job") -> dict:
    annotations = {}
    if reported is not None:
        annotations[gpu_reclaim.REPORTED_ANNOTATION] = stamp(reported)
    if keep is not None:
        annotations["gpu-platform.io/keep-gpus"] = keep
    meta: dict = {"name": name, "namespace": namespace, "uid": f"{name}-uid",
                  "annotations": annotations}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": owner, "name": "train",
                                    "uid": "train-uid", "controller": True}]
    return {"metadata": meta, "status": {"phase": phase, "startTime": stamp(NOW - age)}}


def decided(config: actor.Config, idle: dict, pods: list[dict]) -> dict[str, tuple[str, str]]:
    return {f"{d.namespace}/{d.pod}": (d.action, d.why)
            for d in actor.decide(config, idle, pods, NOW)}


# --- which pods a run acts on ----------------------------------------------------------------

def test_an_idle_pod_is_reported_first_and_evicted_only_after_its_grace_period():
    config = config_of()
    idle = {("research", "new"): 1, ("research", "waiting"): 2, ("research", "due"): 1}
    pods = [pod("new"), pod("waiting", reported=NOW - 3 * HOUR),
            pod("due", reported=NOW - 4 * HOUR)]
    assert decided(config, idle, pods) == {
        "research/new": ("report", "idle"),
        "research/waiting": ("skip", "in its grace period until 2026-11-27T13:00:00Z"),
        "research/due": ("evict", "idle after its grace period")}


def test_a_pod_busy_within_the_window_is_never_chosen_and_starts_over():
    """Busy at any sample within the window, a pod is not in Prometheus' answer: nothing is
    done to it, and a report it had is cleared so that its grace period starts over."""
    config = config_of()
    pods = [pod("busy"), pod("busy-again", reported=NOW - 10 * HOUR)]
    assert decided(config, {}, pods) == {"research/busy-again": ("clear", "active again")}


def test_report_mode_only_reports():
    config = config_of(action="report")
    idle = {("research", "a"): 1, ("research", "b"): 1}
    pods = [pod("a"), pod("b", reported=NOW - 100 * HOUR)]
    assert decided(config, idle, pods) == {
        "research/a": ("report", "idle"),
        "research/b": ("skip", "reported already (action: report)")}


def test_pods_outside_the_opted_in_namespaces_are_never_touched():
    """`vision` is a team that did not opt in, `other` a namespace that did not; `serving` opted
    in by name and `research` through its team."""
    config = config_of()
    assert list(config["policies"]) == ["research", "serving"]
    old = NOW - 10 * HOUR
    idle = {(ns, "p"): 1 for ns in ("research", "serving", "vision", "other")}
    pods = [pod("p", ns, reported=old) for ns in ("research", "serving", "vision", "other")]
    assert decided(config, idle, pods) == {"research/p": ("evict", "idle after its grace period"),
                                           "serving/p": ("evict", "idle after its grace period")}


def test_an_exempt_namespace_is_never_touched_even_if_named():
    config = config_of()
    config["policies"]["kube-system"] = config["policies"]["research"]
    assert "kube-system" in config["exemptNamespaces"]
    idle = {("kube-system", "p"): 1}
    assert decided(config, idle, [pod("p", "kube-system", reported=NOW - 10 * HOUR)]) == {}


@pytest.mark.parametrize(("allow_keep", "keep", "expected"), [
    (True, "true", ("skip", "kept by its owner (gpu-platform.io/keep-gpus)")),
    (True, "until-friday", ("skip", "kept by its owner (gpu-platform.io/keep-gpus)")),
    (True, "false", ("evict", "idle after its grace period")),
    (False, "true", ("evict", "idle after its grace period")),
])
def test_the_keep_annotation_holds_only_where_the_stack_allows_it(allow_keep, keep, expected):
    config = config_of(allowKeep=allow_keep)
    assert decided(config, {("research", "nb"): 1},
                   [pod("nb", reported=NOW - 10 * HOUR, keep=keep)]) == {"research/nb": expected}


def test_no_more_than_the_rate_limit_is_evicted_the_longest_reported_first():
    config = config_of(maxEvictionsPerRun=2)
    reported = {"a": 5, "b": 9, "c": 7, "d": 4.5}
    idle = {("research", name): 1 for name in reported}
    pods = [pod(name, reported=NOW - hours * HOUR) for name, hours in reported.items()]
    result = decided(config, idle, pods)
    assert {name for name, (action, _) in result.items() if action == "evict"} == {
        "research/b", "research/c"}
    assert result["research/a"] == ("skip", "over this run's limit of 2 evictions")
    assert result["research/d"] == ("skip", "over this run's limit of 2 evictions")


def test_pods_younger_than_the_window_or_not_running_are_left_alone():
    config = config_of()
    idle = {("research", name): 1 for name in ("young", "pending", "going")}
    going = pod("going", reported=NOW - 10 * HOUR)
    going["metadata"]["deletionTimestamp"] = stamp(NOW)
    pods = [pod("young", age=HOUR), pod("pending", phase="Pending"), going]
    assert decided(config, idle, pods) == {
        "research/young": ("skip", "started less than 2h ago"),
        "research/pending": ("skip", "not running"),
        "research/going": ("skip", "not running")}


def test_the_report_says_how_long_what_will_happen_and_how_to_keep_it():
    config = config_of()
    [decision] = actor.decide(config, {("research", "nb"): 2}, [pod("nb")], NOW)
    note = actor.report_note(config, decision, pod("nb"))
    assert note == (
        "Pod research/nb has held 2 GPU(s) with no activity above 5% for at least 2h. Policy: "
        "it will be evicted if still idle after 4h (from 2026-11-27T16:00:00Z); any GPU "
        "activity first starts the count again. Need it a while longer? Annotate the pod "
        "gpu-platform.io/keep-alive=true to restart the grace period (1 time(s) more). Done "
        "with it? Delete it to free the GPUs. To keep them, annotate it (in its pod template): "
        "gpu-platform.io/keep-gpus=true.")
    refused = actor.report_note(config_of(action="report", allowKeep=False), decision,
                                pod("nb", owner=None))
    assert "report only; nothing will be done" in refused
    assert "does not honour gpu-platform.io/keep-gpus" in refused
    events = [actor.event(config["controller"], ref, "research", actor.IDLE, "Normal", "Report",
                          note, NOW) for ref in actor.regarding(pod("nb"))]
    assert [e["regarding"]["kind"] for e in events] == ["Pod", "Job"]
    assert all(e["reason"] == "GpuIdle" and e["reportingController"] == "gpu-platform.io/reclaim"
               for e in events)


def test_the_idle_set_sums_a_pods_series():
    result = [{"metric": {"namespace": "a", "pod": "p", "node": "n1"}, "value": [0, "2"]},
              {"metric": {"namespace": "a", "pod": "p", "node": "n2"}, "value": [0, "1"]},
              {"metric": {"namespace": "a"}, "value": [0, "1"]}]
    assert actor.idle_set(result) == {("a", "p"): 3}


# --- what the component declares ------------------------------------------------------------

def test_rights_are_roles_in_the_opted_in_namespaces_only():
    objects = gpu_reclaim.reclaim_objects(inputs_of())
    kinds = [(o["kind"], o["metadata"].get("namespace")) for o in objects]
    assert not any(kind.startswith("Cluster") for kind, _ in kinds)
    assert sorted(ns for kind, ns in kinds if kind == "Role") == ["research", "serving"]
    assert sorted(ns for kind, ns in kinds if kind == "RoleBinding") == ["research", "serving"]
    roles = {o["metadata"]["namespace"]: {(r, v) for rule in o["rules"]
                                          for r in rule["resources"] for v in rule["verbs"]}
             for o in objects if o["kind"] == "Role"}
    assert roles["serving"] == {("pods", "get"), ("pods", "list"), ("pods", "patch"),
                                ("events", "create"), ("pods/eviction", "create")}
    # In a team namespace, Kueue's Workloads too, taken off their queue and put back, and
    # reading the kinds Kueue admits there, to follow a pod's controllers to its Workload.
    assert roles["research"] == roles["serving"] | {
        ("workloads", "get"), ("workloads", "list"), ("workloads", "patch"),
        *{(kind, "get") for kind in ("jobs", "deployments", "statefulsets", "jobsets",
                                     "leaderworkersets", "trainjobs", "pytorchjobs", "rayjobs",
                                     "rayclusters")}}


def test_report_mode_has_no_right_to_evict():
    objects = gpu_reclaim.reclaim_objects(inputs_of(action="report"))
    rules = [rule for o in objects if o["kind"] == "Role" for rule in o["rules"]]
    assert rules
    assert not any("pods/eviction" in rule["resources"] for rule in rules)
    assert not any("delete" in rule["verbs"] for rule in rules)
    assert not any("workloads" in rule["resources"] for rule in rules)


def test_the_cron_job_runs_the_shipped_script_with_the_stacks_policy_restricted():
    inputs = inputs_of()
    objects = gpu_reclaim.reclaim_objects(inputs)
    assert objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    assert config_map["data"]["components.gpu_reclaim.actor.gpu_reclaim.py"] == (
        ROOT / "components/gpu_reclaim/actor/gpu_reclaim.py").read_text()
    spec = gpu_reclaim.cron_job(inputs)["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    pod_spec = spec["jobTemplate"]["spec"]["template"]["spec"]
    [container] = pod_spec["containers"]
    assert container["command"] == ["python3", "-m", "components.gpu_reclaim.actor.gpu_reclaim",
                                    "--config=/reclaim/config.json"]
    assert container["image"] == "docker.io/library/python:3.13.9-alpine3.22"
    assert pod_spec["serviceAccountName"] == "gpu-reclaim"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_run_reads_the_installed_prometheus_or_the_one_named():
    assert inputs_of().prometheus_url == \
        "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    renamed = load_settings(raw(with_changes(teams=TEAMS, reclaim=RECLAIM, monitoring={
        "releaseName": "mon"})))
    assert component_inputs(renamed).reclaim.prometheus_url == \
        "http://mon-kube-prometheus-stack-prometheus.monitoring.svc:9090"
    existing = load_settings(raw(with_changes(teams=TEAMS, monitoring={"stack": "existing"},
                                              reclaim={**RECLAIM, "prometheusUrl":
                                                       "http://prometheus-operated.monitoring."
                                                       "svc:9090"})))
    assert component_inputs(existing).reclaim.prometheus_url == \
        "http://prometheus-operated.monitoring.svc:9090"


def test_the_idle_query_is_the_usage_rules_definition_with_reclaims_window():
    """One definition of idle: the recorded idle series and the run's query are the same
    function of a window and the one threshold, monitoring.usage.activeThreshold."""
    settings = settings_of(idleFor="3h")
    settings = settings.model_copy(update={"monitoring": settings.monitoring.model_copy(update={
        "usage": settings.monitoring.usage.model_copy(update={"active_threshold": 0.1})})})
    config = gpu_reclaim.actor_config(component_inputs(settings).reclaim)
    assert config["query"] == usage.idle_pods("3h", 0.1)
    assert config["idleBelow"] == 0.1
    recorded = next(r for r in usage.usage_rules(monitoring_of(settings))
                    if r.get("record") == usage.IDLE_POD_GPUS)
    assert recorded["expr"] == usage.idle_pods("1h", 0.1)


# --- the query in Prometheus' engine (promtool) ------------------------------------------------

def test_the_reclaim_query_never_answers_a_pod_busy_within_its_window(promtool_bin, tmp_path):
    """Over reclaim's 30m window (the usage window stays 1h): `idle` has been idle for 3h;
    `blip` was idle but for one sample 20 minutes ago; `earlier` was busy 40 minutes ago, before
    the window; `new` started 20 minutes ago. Only idle and earlier are in the answer, and a
    threshold at the blip's activity leaves it out no more."""
    settings = settings_of(idleFor="30m")
    query = gpu_reclaim.actor_config(component_inputs(settings).reclaim)["query"]

    def gpu(number: int, name: str, values: str) -> dict:
        return exporter(PROFILING, settings, number, values, pod=name)

    series = [gpu(0, "idle", "0x180"), gpu(1, "blip", "0x159 0.3 0x20"),
              gpu(2, "earlier", "0x139 0.9 0x40"), gpu(3, "new", "_x160 0x20")]
    answer = [{"labels": f'{usage.held("pod")}{{namespace="research", pod="{name}", node="n1", '
                         f'modelName="NVIDIA H100 80GB HBM3"}}', "value": 1}
              for name in ("earlier", "idle")]
    at_blip = usage.idle_pods("30m", 0.3)
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": query, "eval_time": "180m", "exp_samples": answer},
                             {"expr": f"count({at_blip})", "eval_time": "180m",
                              "exp_samples": [{"labels": "{}", "value": 3}]}]}],
        settings=settings)


# --- the idle alert, per team ------------------------------------------------------------------

@pytest.fixture(scope="module")
def amtool_bin():
    return tools.amtool()


def test_the_idle_alert_carries_the_team_of_its_namespace(promtool_bin, tmp_path):
    settings = settings_of()
    labels = 'gpu="0", UUID="GPU-0", modelName="NVIDIA H100", Hostname="n1", node="n1"'
    series = [{"series": f'DCGM_FI_DEV_GPU_UTIL{{{labels}, namespace="{ns}", pod="nb"}}',
               "values": "0x180"} for ns in ("research", "other")]
    run_promtool_tests(promtool_bin, tmp_path, [{
        "interval": "1m", "input_series": series, "alert_rule_test": [fires(
            "GpuAllocatedIdle", "150m",
            [{"namespace": "research", "pod": "nb", "team": "research", "severity": "info"},
             {"namespace": "other", "pod": "nb", "severity": "info"}])]}], settings=settings)
    without_teams = load_settings(raw(with_changes()))
    [alert] = [r for r in gpu_rules.alert_rules(monitoring_of(without_teams))
               if r["alert"] == "GpuAllocatedIdle"]
    assert "team" not in alert["expr"]


def test_reclaim_that_stopped_succeeding_is_reported(promtool_bin, tmp_path):
    cron_job = 'namespace="gpu-reclaim", cronjob="gpu-reclaim"'
    labels = {"namespace": "gpu-reclaim", "cronjob": "gpu-reclaim", "severity": "warning"}
    run_promtool_tests(promtool_bin, tmp_path, [
        # Runs succeeded until minute 10 (600 s), then failed (Prometheus gone): stale an hour
        # after the last success.
        {"interval": "1m", "input_series": [
            {"series": f"kube_cronjob_created{{{cron_job}}}", "values": "0x100"},
            {"series": f"kube_cronjob_status_last_successful_time{{{cron_job}}}",
             "values": "_x10 600x90"}],
         "alert_rule_test": [fires("GpuReclaimNotRunning", "70m", []),
                             fires("GpuReclaimNotRunning", "71m", [labels])]}],
        settings=settings_of())
    assert stale_run_alerts(load_settings(raw(with_changes(teams=TEAMS)))) == []


@pytest.mark.parametrize(("team", "receivers"), [("research", "research-chat,archive"),
                                                 ("vision", "archive")])
def test_a_teams_idle_alerts_reach_its_receiver(amtool_bin, tmp_path, team, receivers):
    settings = load_settings(raw(with_changes(teams=TEAMS, monitoring={"alertmanager": {
        "receivers": [{"name": "research-chat", "severities": ["info"], "teams": ["research"],
                       "webhookUrl": "https://chat.example/research"},
                      {"name": "archive", "severities": ["info"],
                       "webhookUrl": "https://alerts.example/in"}]}})))
    result = subprocess.run(
        [str(amtool_bin), "config", "routes", "test",
         f"--config.file={alertmanager_file(tmp_path, settings)}",
         f"--verify.receivers={receivers}", "alertname=GpuAllocatedIdle", "severity=info",
         f"team={team}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- in the whole program (mocks) ------------------------------------------------------------

K8S = "kubernetes:"


def test_the_platform_declares_reclaim_after_the_rules_it_reads_and_the_teams_namespaces():
    recording = harness.run_program(harness.stack_file_config(with_changes(
        teams=TEAMS, reclaim=RECLAIM)))
    reclaim = recording.one("gpu-platform:index:GpuReclaim", "gpu-reclaim")
    children = [r for r in recording.registrations if r.parent == reclaim.urn]
    assert sorted((r.type, r.name) for r in children) == sorted([
        (f"{K8S}core/v1:Namespace", "gpu-reclaim"),
        (f"{K8S}core/v1:ServiceAccount", "gpu-reclaim/gpu-reclaim"),
        (f"{K8S}core/v1:ConfigMap", "gpu-reclaim/gpu-reclaim"),
        (f"{K8S}batch/v1:CronJob", "gpu-reclaim/gpu-reclaim"),
        *((f"{K8S}rbac.authorization.k8s.io/v1:{kind}", f"{ns}/gpu-reclaim")
          for kind in ("Role", "RoleBinding") for ns in ("research", "serving"))])
    cron_job = recording.one(f"{K8S}batch/v1:CronJob", "gpu-reclaim/gpu-reclaim")
    rules = recording.one(f"{K8S}monitoring.coreos.com/v1:PrometheusRule",
                          "monitoring/gpu-platform")
    assert waits_for(recording, cron_job, rules)
    # The team's namespace, which Teams creates, exists before reclaim's Role in it.
    team_namespace = recording.one(f"{K8S}core/v1:Namespace", "research")
    assert waits_for(recording, recording.one(f"{K8S}rbac.authorization.k8s.io/v1:Role",
                                              "research/gpu-reclaim"), team_namespace)
    off = harness.run_program(harness.stack_file_config(with_changes(teams=TEAMS)))
    assert off.of_type("gpu-platform:index:GpuReclaim") == []


@pytest.mark.parametrize("version", ["1.30.0", "1.36.4", "1.37.0"])
def test_the_declared_objects_match_the_official_schema(version):
    # Teams need 1.34: the oldest version opts in by namespace only.
    teams = TEAMS if version >= "1.34" else {"enabled": False}
    reclaim = {**RECLAIM, "action": "evict"} | ({} if teams is TEAMS else {"teams": []})
    settings = load_settings(raw(with_changes(kubernetesVersion=version, teams=teams,
                                              reclaim=reclaim)))
    objects = gpu_reclaim.reclaim_objects(component_inputs(settings).reclaim)
    problems = [p for p in (validate(o, version) for o in objects) if p]
    assert not problems, "\n".join(problems)


def stale_run_alerts(settings) -> list[dict]:
    """The reclaim alerts among the stack's rules."""
    return [rule for group in gpu_rules.prometheus_rule(monitoring_of(settings))["spec"]["groups"]
            for rule in group["rules"] if rule.get("alert") == "GpuReclaimNotRunning"]


def test_the_stale_run_alert_watches_the_cron_job_reclaim_declares():
    """The CronJob's name and namespace come from one setting each, to both places."""
    settings = settings_of(name="idle-gpus", namespace="idle-reclaim")
    [alert] = stale_run_alerts(settings)
    cron_job = gpu_reclaim.cron_job(component_inputs(settings).reclaim)["metadata"]
    assert f'namespace="{cron_job["namespace"]}", cronjob="{cron_job["name"]}"' in alert["expr"]
    assert (cron_job["namespace"], cron_job["name"]) == ("idle-reclaim", "idle-gpus")


# --- the component alone ---------------------------------------------------------------------

def alone(args: dict) -> str:
    return f"""
import pulumi
import pulumi_kubernetes as k8s
from components.gpu_reclaim import GpuReclaim

cluster = k8s.Provider("cluster", context="gpu-cluster", enable_server_side_apply=True)
reclaim = GpuReclaim("reclaim", {args!r},
                     pulumi.ResourceOptions(providers={{"kubernetes": cluster}}))
pulumi.export("namespaces", reclaim.namespaces)
"""


ALONE_ARGS = {"prometheus_url": "http://prometheus.monitoring.svc:9090",
              "idle_query": usage.idle_pods("2h", 0.05),
              "team_namespaces": {"ml-a": "ml", "ml-b": "ml", "web": "web"},
              "exempt_namespaces": ["kube-system", "ml-b"],
              "reclaim": {"teams": ["ml"], "namespaces": ["notebooks"]}}


def test_declared_alone_it_applies_to_its_teams_and_namespaces_less_the_exempt():
    recording = harness.run_program({}, source=alone(ALONE_ARGS))
    roles = sorted(r.name for r in recording.of_type(f"{K8S}rbac.authorization.k8s.io/v1:Role"))
    assert roles == ["reclaim-ml-a/gpu-reclaim", "reclaim-notebooks/gpu-reclaim"]


def test_declared_alone_a_reclaim_of_nothing_is_refused_and_declares_nothing():
    recording = harness.Recording()
    with pytest.raises(SettingsError) as raised:
        harness.run_program({}, recording, source=alone(
            ALONE_ARGS | {"reclaim": {"namespaces": ["kube-system"]}}))
    # Only the program's own provider, declared before the component.
    assert [r.type for r in recording.registrations] == ["pulumi:providers:kubernetes"]
    assert raised.value.problems == [
        'reclaim.namespaces = ["kube-system"]: reclaim applies to no namespace that is not '
        "exempt; allowed: at least one namespace in reclaim.namespaces, or a team in "
        "reclaim.teams with teamNamespaces, outside exemptNamespaces"]
