"""Fault remediation, as a pass plans it and as the stack ships it: which GPU node is taken out
of service for which fault, the blast-radius limit, return to service on the repaired label
only, the rights each mode needs, and the settings' errors."""

import re
import socket
import urllib.request

import pytest
import yaml

from components.base.gpu_count import DeviceView
from components.base.gpu_faults import (
    FAULTS,
    GAUGES,
    GPU_HOURS_LOST,
    METRICS,
    PODS_MOVED,
    QUARANTINE_TAINT,
)
from components.base.kube_api import Api, format_time
from components.base.validation import SettingsError
from components.gpu_remediation import (
    REPAIRED_LABEL,
    SINCE_ANNOTATION,
    actor_config,
    remediation_objects,
)
from components.gpu_remediation.actor.gpu_remediation import (
    METRICS_PORT,
    Fault,
    Memory,
    drain,
    limit,
    plan,
    serve_metrics,
)
from components.platform.config import load_settings
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.harness import FIXTURES
from tests.kit.stacks import TEAMS, raw, with_changes

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
XID_79 = Fault("fatal-xid", 79, "fallen off the bus")
NOW = 1_800_000_000.0


def remediation_inputs(**remediation):
    settings = StackSettings.model_validate(with_changes(
        remediation={"mode": "drain", **remediation}))
    return component_inputs(settings).remediation


@pytest.fixture(scope="module")
def config():
    return actor_config(remediation_inputs())


def node(name: str, quarantined_for: str | None = None, repaired: bool = False,
         gpu: bool = True, out_since: float = NOW) -> dict:
    taints = [GPU_TAINT] if gpu else []
    annotations = {}
    if quarantined_for:
        taints.append({"key": QUARANTINE_TAINT, "value": quarantined_for,
                       "effect": "NoSchedule"})
        annotations[SINCE_ANNOTATION] = format_time(out_since)
    return {"metadata": {"name": name, "annotations": annotations,
                         "labels": {REPAIRED_LABEL: "true"} if repaired else {}},
            "spec": {"taints": taints}}


def actions(steps) -> dict[str, str]:
    return {step.node: step.action for step in steps}


def fleet(size: int) -> list[dict]:
    return [node(f"gpu-{index:02d}") for index in range(size)]


def test_a_gpu_node_with_a_fatal_fault_is_taken_out_of_service(config):
    steps = plan(config, fleet(20), {"gpu-03": [XID_79]}, NOW)
    assert actions(steps) == {"gpu-03": "quarantine"}
    assert steps[0].fault == "fatal-xid" and "evidence 79" in steps[0].why


def test_beyond_the_limit_a_fault_is_held_not_acted_on(config):
    """maxNodes 2 and maxShare 0.1: of 20 GPU nodes, 2 at once; one out already leaves room
    for one more, the first by name; the third is held and says why."""
    nodes = fleet(20)
    nodes[0] = node("gpu-00", quarantined_for="row-remap-failure")
    faults = {name: [XID_79] for name in ("gpu-05", "gpu-07")}
    steps = plan(config, nodes, faults, NOW)
    assert actions(steps) == {"gpu-00": "drain", "gpu-05": "quarantine", "gpu-07": "hold"}
    held = next(s for s in steps if s.action == "hold")
    assert "1 of the 2 GPU nodes that may be taken out of service within 1h were already" \
        in held.why


def test_a_node_out_longer_than_the_window_no_longer_counts_against_the_limit(config):
    """Under repair for hours, gpu-00 leaves room for an independent failure; taken out 10
    minutes ago, it does not (the window, 1h by default)."""
    nodes = fleet(10)
    nodes[0] = node("gpu-00", quarantined_for="fatal-xid", out_since=NOW - 3 * 3600)
    faults = {"gpu-05": [XID_79]}
    assert actions(plan(config, nodes, faults, NOW))["gpu-05"] == "quarantine"
    nodes[0] = node("gpu-00", quarantined_for="fatal-xid", out_since=NOW - 600)
    assert actions(plan(config, nodes, faults, NOW))["gpu-05"] == "hold"


def test_the_share_caps_small_fleets_and_one_node_is_always_allowed(config):
    assert limit(config, 4) == 1            # 0.1 x 4 rounds down to 0: one at least
    assert limit(config, 15) == 1
    assert limit(config, 200) == 2          # maxNodes


def test_only_gpu_nodes_count_and_only_they_are_acted_on(config):
    nodes = [*fleet(10), node("cpu-1", gpu=False)]
    steps = plan(config, nodes, {"cpu-1": [XID_79]}, NOW)
    assert steps == []


def test_a_quarantined_node_returns_only_when_labelled_repaired(config):
    """The fault gone is not enough: the node stays out until an operator says it is
    repaired; labelled, it returns, and its room goes to the next fault."""
    nodes = [*fleet(9), node("gpu-x", quarantined_for="fatal-xid")]
    assert actions(plan(config, nodes, {}, NOW)) == {"gpu-x": "drain"}
    nodes[-1] = node("gpu-x", quarantined_for="fatal-xid", repaired=True)
    assert actions(plan(config, nodes, {"gpu-01": [XID_79]}, NOW)) == {
        "gpu-x": "return", "gpu-01": "quarantine"}


def test_no_answer_is_no_fault(config):
    assert plan(config, fleet(10), {}, NOW) == []


def test_every_quarantining_fault_is_queried_and_watched_ones_are_not_acted_on(config):
    names = [fault["name"] for fault in config["faults"]]
    assert names == [fault.name for fault in FAULTS]
    for fault in config["faults"]:
        assert 'up{job="nvidia-dcgm-exporter"} == 1' in fault["query"]


def rules_of(objects) -> list[dict]:
    return next(o for o in objects if o["kind"] == "ClusterRole")["rules"]


def verbs(rules, resource: str) -> set[str]:
    return {verb for rule in rules if resource in rule["resources"] for verb in rule["verbs"]}


@pytest.mark.parametrize("mode, patches, evicts", [
    ("report", False, False), ("quarantine", True, False), ("drain", True, True)])
def test_each_mode_has_the_rights_it_needs_and_no_more(mode, patches, evicts):
    rules = rules_of(remediation_objects(remediation_inputs(mode=mode)))
    assert ("patch" in verbs(rules, "nodes")) == patches
    assert ("create" in verbs(rules, "pods/eviction")) == evicts
    assert not verbs(rules, "workloads")            # no teams on this stack
    assert "delete" not in {verb for rule in rules for verb in rule["verbs"]}


def test_with_teams_a_drain_may_put_workloads_back_in_their_queues():
    settings = StackSettings.model_validate(with_changes(
        teams=TEAMS, remediation={"mode": "drain"}))
    inputs = component_inputs(settings).remediation
    assert verbs(rules_of(remediation_objects(inputs)), "workloads") == {"get", "list",
                                                                          "patch"}
    assert actor_config(inputs)["teamNamespaces"] == sorted(settings.teams.team_namespaces)


def test_the_deployment_runs_one_pod_from_the_configmap():
    objects = remediation_objects(remediation_inputs())
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    # A pass every interval, not once: no --once.
    assert container["command"] == ["python3", "-m",
                                    "components.gpu_remediation.actor.gpu_remediation",
                                    "--config=/remediation/config.json"]


@pytest.mark.parametrize("change, message", [
    ({"mode": "fix"}, "gpu-platform:remediation.mode"),
    ({"interval": "1s"}, "shorter than Prometheus can have news"),
    ({"maxShare": 0}, "gpu-platform:remediation.maxShare"),
])
def test_bad_settings_name_the_setting_and_what_is_allowed(change, message):
    with pytest.raises(SettingsError, match=message.replace(".", "[.]")):
        load_settings(raw(with_changes(remediation=change)))


def test_an_existing_monitoring_stack_needs_prometheus_url():
    with pytest.raises(SettingsError, match="remediation reads GPU faults from Prometheus"):
        load_settings(raw(with_changes(remediation={"mode": "quarantine"},
                                       monitoring={"stack": "existing"})))


NVSENTINEL_STATE = "dgxc.nvidia.com/nvsentinel-state"


def test_with_nvsentinel_its_out_of_service_nodes_are_drained_and_never_returned():
    """NVSentinel quarantines (cordon and its state label) and returns nodes itself: a pass
    drains the nodes in an out-of-service state, whatever the repaired label says, and taints
    nothing."""
    config = actor_config(remediation_inputs(detector="nvsentinel"))
    nodes = fleet(4)
    for name, state in (("gpu-00", "quarantined"), ("gpu-01", "draining"),
                        ("gpu-02", "remediation-succeeded")):
        index = int(name[-1])
        nodes[index]["metadata"]["labels"] = {NVSENTINEL_STATE: state, REPAIRED_LABEL: "true"}
    steps = plan(config, nodes, {"gpu-03": [XID_79]}, NOW)
    assert actions(steps) == {"gpu-00": "drain", "gpu-01": "drain"}
    # Nor does it quarantine on a fault of its own (it does not ask Prometheus), and its rights
    # hold no node patch.
    rules = rules_of(remediation_objects(remediation_inputs(detector="nvsentinel")))
    assert "patch" not in verbs(rules, "nodes")


def test_nvsentinel_with_quarantine_mode_is_refused():
    with pytest.raises(SettingsError, match="NVSentinel takes nodes out of service itself"):
        load_settings(raw(with_changes(remediation={"mode": "quarantine",
                                                    "detector": "nvsentinel"})))


class RecordingApi(Api):
    """The API server as a pass calls it: evictions answered `eviction` (201 granted, 429
    refused by a disruption budget), everything else 201; every call recorded."""

    def __init__(self, eviction: int):
        self.eviction, self.calls = eviction, []    # no server to reach

    def call(self, method, path, body=None, content_type="application/json"):
        self.calls.append((method, path))
        if path.endswith("/eviction"):
            return self.eviction, {"message": "Cannot evict pod as it would violate the pod's "
                                              "disruption budget."}
        return 201, {}


def running_pod(name: str, started_hours_ago: float) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"nodeName": "gpu-03"},
            "status": {"phase": "Running",
                       "startTime": format_time(NOW - started_hours_ago * 3600)}}



def test_a_drain_counts_the_pods_it_moves_and_the_gpu_hours_they_had_run(config):
    """Prometheus reads what faults cost from the pass's counters: a 4-GPU pod that ran 3 h
    and a 1-GPU pod that ran 30 min, evicted, cost 12.5 GPU-hours; a refused eviction moves
    nothing, is reported once and counted nowhere."""
    memory = Memory()
    pods = [(running_pod("train", 3), 4), (running_pod("infer", 0.5), 1)]
    lines = drain(RecordingApi(201), config, "gpu-03", "fatal-xid", pods, NOW, memory, set())
    assert lines == ["ml/train: evicted", "ml/infer: evicted"]
    text = memory.exposition()
    assert f'{PODS_MOVED}{{how="evicted",namespace="ml"}} 2' in text
    assert f'{GPU_HOURS_LOST}{{namespace="ml"}} 12.5' in text
    refused = RecordingApi(429)
    for _ in range(2):
        drain(refused, config, "gpu-03", "fatal-xid", pods[:1], NOW, memory, set())
    assert sum(path.endswith("/events") for _, path in refused.calls) == 1
    assert f'{PODS_MOVED}{{how="evicted",namespace="ml"}} 2' in memory.exposition()


def test_the_counters_served_are_the_ones_the_dashboard_reads():
    served = set(re.findall(r"^# TYPE (\S+) (?:counter|gauge)$", Memory().exposition(),
                            re.MULTILINE))
    fixture = yaml.safe_load((FIXTURES / "exporter-metrics.yaml").read_text())
    assert served == set(fixture["gpu-remediation"]) == set(METRICS) | set(GAUGES)


def test_the_pod_serves_its_counters_where_the_pod_monitor_scrapes():
    objects = remediation_objects(remediation_inputs())
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    [port] = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    memory = Memory()
    memory.count(GPU_HOURS_LOST, 2.0, namespace="ml")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    serve_metrics(memory, free)
    with urllib.request.urlopen(f"http://127.0.0.1:{free}/metrics", timeout=5) as reply:
        assert f'{GPU_HOURS_LOST}{{namespace="ml"}} 2' in reply.read().decode()
    assert port["containerPort"] == METRICS_PORT and port["name"] == "metrics"


def test_faults_the_default_counters_leave_out_are_warned_of_until_counters_are_named():
    def warnings(**gpu_operator) -> list[str]:
        return load_settings(raw(with_changes(remediation={"mode": "drain"},
                                              gpuOperator=gpu_operator))).warnings
    [warning] = [w for w in warnings() if "remediation" in w]
    assert "double-bit-ecc (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)" in warning
    assert "gpuOperator.extraValues.dcgmExporter.config.name" in warning
    named = {"extraValues": {"dcgmExporter": {"config": {"name": "dcgm-counters"}}}}
    assert not [w for w in warnings(**named) if "remediation" in w]


DRA = {"kubernetesVersion": "1.37.2", "gpuOperator": {"gpuPath": "dra"}}


def test_on_the_dra_path_a_node_whose_failed_gpus_are_out_stays_in_service_and_counts(config):
    """Its failed devices are out through DeviceTaintRules: the node carries no taint, but its
    annotation names the fault; it is drained of the failed GPUs' pods, counts against the
    limit and returns on the repaired label as a tainted node does."""
    nodes = fleet(10)
    nodes[2]["metadata"]["annotations"] = {"gpu-platform.io/gpu-fault": "fatal-xid",
                                           SINCE_ANNOTATION: format_time(NOW - 60)}
    assert actions(plan(config, nodes, {"gpu-05": [XID_79]}, NOW)) == {
        "gpu-02": "drain", "gpu-05": "hold"}
    nodes[2]["metadata"]["labels"] = {REPAIRED_LABEL: "true"}
    assert actions(plan(config, nodes, {}, NOW)) == {"gpu-02": "return"}


def test_the_pods_moved_off_a_failed_gpu_are_those_whose_claims_hold_it():
    def claim(name: str, device: str, pod_name: str) -> dict:
        return {"metadata": {"name": name, "namespace": "ml"},
                "status": {"allocation": {"devices": {"results": [
                    {"driver": "gpu.nvidia.com", "pool": "gpu-1", "device": device}]}},
                    "reservedFor": [{"resource": "pods", "name": pod_name}]}}
    view = DeviceView([], [claim("a", "gpu-0", "train"), claim("b", "gpu-1", "infer")],
                      "gpu.nvidia.com")
    assert view.holders({("gpu.nvidia.com", "gpu-1", "gpu-0")}) == {("ml", "train")}


def test_on_the_dra_path_remediation_may_write_device_taint_rules_and_admission_lets_it():
    settings = StackSettings.model_validate(with_changes(**DRA, remediation={"mode": "drain"}))
    inputs = component_inputs(settings)
    rules = rules_of(remediation_objects(inputs.remediation))
    assert {"create", "delete", "deletecollection"} <= verbs(rules, "devicetaintrules")
    assert "system:serviceaccount:gpu-remediation:gpu-remediation" in \
        inputs.admission.admission.device_taint_writers
    reporting = StackSettings.model_validate(with_changes(**DRA, remediation={"mode": "report"}))
    assert not verbs(rules_of(remediation_objects(component_inputs(reporting).remediation)),
                     "devicetaintrules")
    assert component_inputs(reporting).admission.admission.device_taint_writers == []
