"""The planned threshold against a static one, on the same fragmented cluster: the declared
CronJob's pod run as the kubelet would run it (the plan init container with Python and the
ServiceAccount's token against the real API server, then the real descheduler reading the
policy the plan wrote), the binpack scheduler as deployed, real controllers and a fake kubelet.

Five 8-GPU nodes: p-a holds five opted-in serving replicas; p-b and p-c six GPUs of pods that
did not opt in, p-d seven, p-e none. underusedPercent 75 (the ceiling), minPodAge 1s, limits
that do not bind.
"""

import os
import re
import signal
import time
from contextlib import contextmanager

import pytest

from components import gpu_compaction
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.descheduler import compaction_run
from tests.kit.cluster.fake_kubelet import deploy_on_nodes, gpu_workloads, gpus_used, settled
from tests.kit.cluster.nodes_and_pods import create_gpu_node
from tests.kit.harness import compaction_of

NAMESPACE = "planned"
NODES = ("p-a", "p-b", "p-c", "p-d", "p-e")


@pytest.fixture(scope="module")
def cluster(control_plane_with_schedulers, example_settings):
    with gpu_workloads(control_plane_with_schedulers, example_settings, NAMESPACE, NODES):
        yield control_plane_with_schedulers


def policy(settings, planned: bool) -> dict:
    return gpu_compaction.descheduler_policy(compaction_of(settings.model_copy(update={
        "compaction": settings.compaction.model_copy(update={
            "underused_percent": 75, "min_pod_age": "1s", "max_evictions_per_run": 16,
            "max_evictions_per_node": 8, "plan_threshold": planned})})))


def unplanned(settings, declared) -> list[dict]:
    """The declared objects with the CronJob of planThreshold off: the descheduler alone."""
    static = settings.model_copy(update={"compaction": settings.compaction.model_copy(
        update={"plan_threshold": False})})
    return [o for o in declared.objects if o["kind"] != "CronJob"] + [
        gpu_compaction.cron_job(compaction_of(static))]


def whole_free(kube) -> list[str]:
    return sorted(n for n, used in gpus_used(kube, NAMESPACE, NODES).items() if used == 0)


@contextmanager
def replacements_held(cp: ControlPlane):
    """The controller-manager paused for the block (SIGSTOP, then SIGCONT): a pod removed
    within it is replaced only after it.

    The ReplicaSet controller replaces an evicted pod as soon as the API server marks it for
    deletion. A pod without a grace period is removed by a second write of that same eviction
    request, and a replacement created and scheduled before it is scored with the evicted pod
    still on its node, as on a cluster a terminating pod counts until its kubelet has removed
    it."""
    managers = [p for p in cp.processes if p.name == "kube-controller-manager" and p.running()]
    assert len(managers) == 1, [p.name for p in managers]
    os.kill(managers[0].pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(managers[0].pid, signal.SIGCONT)


def test_the_planned_threshold_frees_a_node_where_the_static_one_only_churns(
        cluster, example_settings, declared):
    kube, settings = cluster.admin, example_settings
    for name, node, count, opt_in in (("infer", "p-a", 5, True), ("fixed-b", "p-b", 6, False),
                                      ("fixed-c", "p-c", 6, False),
                                      ("fixed-d", "p-d", 7, False)):
        deploy_on_nodes(kube, settings, NAMESPACE, NODES, name, {node: count}, opt_in)
    assert gpus_used(kube, NAMESPACE, NODES) == {"p-a": 5, "p-b": 6, "p-c": 6, "p-d": 7,
                                                 "p-e": 0}
    fixed = {p["metadata"]["uid"] for p in kube.list("v1", "Pod", NAMESPACE)
             if not p["metadata"]["labels"]["app"].startswith("infer")}
    time.sleep(1.5)

    # Static 75%: p-a, p-b and p-c are all "underused", so the only room the descheduler
    # counts is p-d's one free GPU. It moves one replica there and frees nothing.
    log = compaction_run(cluster, settings, unplanned(settings, declared),
                         policy=policy(settings, False))
    assert "totalEvicted=1" in log, log
    wait_until(lambda: settled(kube, NAMESPACE, "infer", 5), "infer back at 5")
    assert gpus_used(kube, NAMESPACE, NODES) == {"p-a": 4, "p-b": 6, "p-c": 6, "p-d": 8,
                                                 "p-e": 0}
    assert whole_free(kube) == ["p-e"]

    # Planned, as declared: 50% takes p-a alone, and p-b and p-c have room for its four.
    log = compaction_run(cluster, settings, declared.objects, policy=policy(settings, True))
    assert re.search(r"threshold 50% of GPUs \(pods 3.64%, cpu 25%, memory 25%\): 4 pods to "
                     r"move, expected to empty p-a \(\+1", log), log
    assert "totalEvicted=4" in log, log
    wait_until(lambda: settled(kube, NAMESPACE, "infer", 5), "infer back at 5")
    assert whole_free(kube) == ["p-a", "p-e"]
    assert gpus_used(kube, NAMESPACE, NODES) == {"p-a": 0, "p-b": 8, "p-c": 8, "p-d": 8,
                                                 "p-e": 0}
    # Only opted-in pods moved.
    assert fixed <= {p["metadata"]["uid"] for p in kube.list("v1", "Pod", NAMESPACE)}

    # Nothing left to free: the next planned run evicts nothing.
    log = compaction_run(cluster, settings, declared.objects, policy=policy(settings, True))
    assert "no run would leave more whole free GPU nodes" in log, log
    assert "totalEvicted=0" in log, log


def test_a_node_that_cannot_be_emptied_is_left_out_so_another_can_be(cluster, example_settings,
                                                                     declared):
    """Four more nodes: q-a holds two opted-in replicas and one that did not opt in (37.5%),
    q-b four opted-in replicas (50%), q-c and q-d six GPUs each that did not opt in. A run at
    50% that saw q-a would spend q-c's and q-d's four free GPUs on q-a's two and two of q-b's
    and free nothing; the plan leaves q-a out of the run's node selector, and q-b comes free."""
    kube, settings = cluster.admin, example_settings
    more = ("q-a", "q-b", "q-c", "q-d")
    for name in more:
        create_gpu_node(kube, settings, name, 8)
    everywhere = (*NODES, *more)
    for name, node, count, opt_in in (("mixed", "q-a", 2, True), ("pinned", "q-a", 1, False),
                                      ("drain", "q-b", 4, True), ("fill-c", "q-c", 6, False),
                                      ("fill-d", "q-d", 6, False)):
        deploy_on_nodes(kube, settings, NAMESPACE, everywhere, name, {node: count}, opt_in)
    assert gpus_used(kube, NAMESPACE, more) == {"q-a": 3, "q-b": 4, "q-c": 6, "q-d": 6}
    kept = {p["metadata"]["uid"] for p in kube.list("v1", "Pod", NAMESPACE)
            if p["metadata"]["labels"]["app"] != "drain"}
    time.sleep(1.5)

    log = compaction_run(cluster, settings, declared.objects, policy=policy(settings, True))
    assert re.search(r"threshold 50% of GPUs \(pods 3.64%, [^)]*\): 4 pods to move, "
                     r"expected to empty q-b .*leaving out q-a", log), log
    assert "totalEvicted=4" in log, log
    wait_until(lambda: settled(kube, NAMESPACE, "drain", 4), "drain back at 4")
    assert gpus_used(kube, NAMESPACE, more) == {"q-a": 3, "q-b": 0, "q-c": 8, "q-d": 8}
    # q-a's opted-in replicas, and every pod that did not opt in, kept their uids.
    assert kept <= {p["metadata"]["uid"] for p in kube.list("v1", "Pod", NAMESPACE)}


def test_a_node_as_used_but_with_more_pods_counts_as_room(cluster, example_settings, declared):
    """Two more nodes, each half used: r-a by one opted-in 4-GPU replica, r-b by four 1-GPU
    pods that did not opt in. Every node with free GPUs is now at or under 50% (q-a at 37.5%
    holds a pod that may not move), so by GPU usage alone a run counts no room and a static
    run evicts nothing. The plan's threshold on pods (r-a's one pod of 110) puts r-b and q-a
    above it: they count as room, the replica moves onto r-b, and r-a comes free."""
    kube, settings = cluster.admin, example_settings
    more = ("r-a", "r-b")
    for name in more:
        create_gpu_node(kube, settings, name, 8)
    everywhere = (*NODES, "q-a", "q-b", "q-c", "q-d", *more)
    deploy_on_nodes(kube, settings, NAMESPACE, everywhere, "large", {"r-a": 1}, True, gpus=4)
    deploy_on_nodes(kube, settings, NAMESPACE, everywhere, "small", {"r-b": 4}, False)
    assert gpus_used(kube, NAMESPACE, more) == {"r-a": 4, "r-b": 4}
    time.sleep(1.5)

    log = compaction_run(cluster, settings, unplanned(settings, declared),
                         policy=policy(settings, False))
    assert "totalEvicted=0" in log, log

    # The plan places the evicted replica as the binpack scheduler does once it is gone from
    # r-a. While it still counts there, r-a (4 + 4 of 8 GPUs) ties r-b (4 + 4), CPU and memory
    # alike, and kube-scheduler v1.36 breaks the tie by node order, for r-a: so the replacement
    # is created only once the evicted replica is gone (see replacements_held).
    with replacements_held(cluster):
        log = compaction_run(cluster, settings, declared.objects, policy=policy(settings, True))
        assert re.search(r"threshold 50% of GPUs \(pods 0.909%, [^)]*\): 1 pods to move, "
                         r"expected to empty r-a \(\+1", log), log
        assert "totalEvicted=1" in log, log
        wait_until(lambda: not kube.list("v1", "Pod", NAMESPACE, labelSelector="app=large"),
                   "the evicted replica to be gone")
    wait_until(lambda: settled(kube, NAMESPACE, "large", 1), "large back at 1")
    assert gpus_used(kube, NAMESPACE, more) == {"r-a": 0, "r-b": 8}
