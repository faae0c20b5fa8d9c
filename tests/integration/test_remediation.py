"""Fault remediation on a GPU cluster, with the binpack scheduler as the program deploys it, the
declared remediation pass (its ClusterRole, its ConfigMap's modules) and the real Prometheus
scraping a DCGM exporter stand-in per node: a node whose GPU reports a fatal XID is out of
service within a minute of the signal, so that a new GPU pod avoids it although it is the
busiest; its GPU pods are evicted; a node whose exporter is down is left alone; a fault beyond
the blast-radius limit is reported, not acted on; a node labelled repaired returns.

Pods bound by name make the busy starting state (no kubelet: a bound pod holds its GPUs until
it is deleted; their grace period is 0, so an eviction removes them at once)."""

import time

import pytest

from components.gpu_remediation import REPAIRED_LABEL, SINCE_ANNOTATION, TAINT_KEY
from tests.kit.cluster.nodes_and_pods import create_gpu_node, ensure_namespace, placement, pod
from tests.kit.cluster.remediation_run import remediating, remediation_settings

NAMESPACE = "batch"
# GPUs in use on each node: gpu-a is the busiest, where binpack puts the next pod.
BUSY = {"gpu-a": 6, "gpu-b": 2, "gpu-c": 1, "gpu-d": 0}
NODES = list(BUSY)


@pytest.fixture(scope="module")
def cluster(control_plane_with_schedulers, example_settings):
    cp = control_plane_with_schedulers
    ensure_namespace(cp.admin, NAMESPACE)
    for name, used in BUSY.items():
        create_gpu_node(cp.admin, example_settings, name, gpus=8)
        for index in range(used):
            busy = pod(f"{name}-{index}", NAMESPACE, gpus=1, settings=example_settings,
                       node_name=name)
            busy["spec"]["terminationGracePeriodSeconds"] = 0
            cp.admin.create(busy)
    return cp


@pytest.fixture(scope="module")
def remediation(cluster, example_settings):
    # maxShare 0.25 of 4 GPU nodes: one taken out of service within the window.
    with remediating(cluster, remediation_settings(example_settings, max_share=0.25),
                     NODES) as running:
        yield running


def quarantine(cp, node: str) -> str | None:
    taints = cp.admin.get("v1", "Node", node)["spec"].get("taints") or []
    return next((t["value"] for t in taints if t["key"] == TAINT_KEY), None)


def pods_on(cp, node: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cp.admin.list("v1", "Pod", NAMESPACE)
                  if p["spec"].get("nodeName") == node)


def node_events(cp, node: str) -> dict[str, str]:
    return {e["reason"]: e.get("note", "") for e in cp.admin.list("events.k8s.io/v1", "Event",
                                                                    "default")
            if e["regarding"]["name"] == node}


def test_a_fatal_xid_takes_the_node_out_of_service_within_a_minute_and_moves_its_pods(
        cluster, remediation, example_settings):
    signal = time.monotonic()
    remediation.set_xid("gpu-a", 3, 79)
    log = ""
    # A pass every 5 s, as the Deployment does every `interval` (15 s by default).
    while quarantine(cluster, "gpu-a") is None and time.monotonic() - signal < 60:
        log += remediation.run()
        if quarantine(cluster, "gpu-a") is None:
            time.sleep(5)
    took = time.monotonic() - signal
    assert quarantine(cluster, "gpu-a") == "fatal-xid", log
    assert took < 60, f"quarantined {took:.1f} s after the signal"
    print(f"gpu-a out of service {took:.1f} s after its GPU reported XID 79")
    node = cluster.admin.get("v1", "Node", "gpu-a")
    assert SINCE_ANNOTATION in node["metadata"]["annotations"]
    assert "GpuNodeQuarantined" in node_events(cluster, "gpu-a")
    # Drained: its GPU pods left through the eviction API.
    assert pods_on(cluster, "gpu-a") == [], log
    assert all(f"{NAMESPACE}/gpu-a-{i}: evicted" in log for i in range(BUSY["gpu-a"])), log

    # The busiest node is out of service: a new GPU pod lands elsewhere.
    cluster.admin.create(pod("after-fault", NAMESPACE, gpus=1, settings=example_settings,
                             scheduler=example_settings.scheduler.name))
    assert placement(cluster.admin, NAMESPACE, "after-fault") == "gpu-b"


def test_a_node_whose_exporter_is_down_is_left_alone(cluster, remediation):
    remediation.silence("gpu-d")
    remediation.set_xid("gpu-d", 0, 48)
    time.sleep(3)       # three scrapes that fail
    assert "gpu-d" not in remediation.faulty()
    assert "gpu-d" not in remediation.run()
    assert quarantine(cluster, "gpu-d") is None


def test_a_fault_beyond_the_limit_is_reported_not_acted_on(cluster, remediation):
    remediation.set_xid("gpu-c", 5, 95)
    remediation.wait_until_seen("gpu-c")
    log = remediation.run()
    assert "gpu-c: not quarantined" in log, log
    assert "1 of the 1 GPU nodes that may be taken out of service within 1h" in log, log
    assert quarantine(cluster, "gpu-c") is None
    assert pods_on(cluster, "gpu-c") == ["gpu-c-0"]
    assert "left in service" in node_events(cluster, "gpu-c")["GpuFaultNotQuarantined"]


def test_a_node_labelled_repaired_returns_and_the_next_fault_takes_its_place(cluster,
                                                                           remediation):
    remediation.set_xid("gpu-a", 3, 0)       # the GPU reset: its last XID is 0 again
    remediation.wait_until_clear("gpu-a")
    cluster.admin.merge_patch("v1", "Node", "gpu-a",
                              {"metadata": {"labels": {REPAIRED_LABEL: "true"}}})
    log = remediation.run()
    assert "gpu-a: back in service" in log, log
    # gpu-c's fault, held back by the limit, is acted on in the same pass, in gpu-a's room.
    assert "gpu-c: quarantined" in log, log
    assert quarantine(cluster, "gpu-c") == "fatal-xid"
    node = cluster.admin.get("v1", "Node", "gpu-a")
    assert quarantine(cluster, "gpu-a") is None
    assert REPAIRED_LABEL not in node["metadata"]["labels"]
    assert SINCE_ANNOTATION not in (node["metadata"].get("annotations") or {})
