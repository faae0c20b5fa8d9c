"""Fault remediation on a team's gang, with the real Kueue running the Configuration the platform
generates (test_kueue.py's Kueue, queues, kube-scheduler and fake kubelet): when a GPU of the
node a team's Job runs on reports a fatal XID, the node leaves service and the Job goes back to
its queue whole (its Workload deactivated, then activated once Kueue has freed its quota), so
that Kueue admits it again and all its pods run on the healthy node, none left on the failed
one; the same where NVSentinel took the node out of service. The declared remediation pass
runs as in test_remediation.py, against the real Prometheus and a DCGM exporter stand-in."""

from __future__ import annotations

from components.gpu_remediation import REPAIRED_LABEL, TAINT_KEY
from components.gpu_remediation.manifests import NVSENTINEL_STATE_LABEL
from tests.integration.test_kueue import (
    GPU_NODE,
    GPUS_PER_TEAM,
    SETTINGS,
    TEAM_A,
    TEAM_A_QUEUE,
    admitted_and_running,
    gpu_job,
    kueue,  # noqa: F401 (the module's fixture)
    workload_of,
)
from tests.kit.cluster.controlplane import wait_until
from tests.kit.cluster.fake_kubelet import running_pods
from tests.kit.cluster.nodes_and_pods import create_gpu_node
from tests.kit.cluster.remediation_run import remediating, remediation_settings

# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
HEALTHY_NODE = "gpu-node-2"
# One of the two GPU nodes may be taken out of service within the window.
REMEDIATION = remediation_settings(SETTINGS, max_share=0.5)


def nodes_of(kube, name: str) -> set[str]:
    return {p["spec"]["nodeName"] for p in running_pods(kube, TEAM_A, name)}


def test_a_team_gang_on_a_failed_node_is_requeued_whole_and_runs_on_a_healthy_node(
        kueue, example_settings):  # noqa: F811
    cp, kube = kueue.cp, kueue.kube
    try:
        kube.create(gpu_job("gang", TEAM_A, pods=GPUS_PER_TEAM, queue=TEAM_A_QUEUE))
        admitted_and_running(kube, TEAM_A, "gang", pods=GPUS_PER_TEAM)
        assert nodes_of(kube, "gang") == {GPU_NODE}
        first = {p["metadata"]["name"] for p in running_pods(kube, TEAM_A, "gang")}
        create_gpu_node(kube, example_settings, HEALTHY_NODE, gpus=8)
        with remediating(cp, REMEDIATION, [GPU_NODE, HEALTHY_NODE]) as remediation:
            remediation.set_xid(GPU_NODE, 2, 79)
            remediation.wait_until_seen(GPU_NODE)
            log = remediation.run()
            assert f"{GPU_NODE}: quarantined" in log, log
            # One of its pods stopped the whole Workload: the others are not evicted apart.
            assert sum("requeued with its workload" in line
                       for line in log.splitlines()) == 1, log
            taints = kube.get("v1", "Node", GPU_NODE)["spec"]["taints"]
            assert any(t["key"] == TAINT_KEY for t in taints)

            # Kueue admits it again, whole, and every pod runs on the healthy node.
            wait_until(lambda: nodes_of(kube, "gang") == {HEALTHY_NODE} and len(
                running_pods(kube, TEAM_A, "gang")) == GPUS_PER_TEAM,
                "the gang to run again on the healthy node", timeout=90,
                explain=lambda: str(workload_of(kube, TEAM_A, kube.get(
                    "batch/v1", "Job", "gang", TEAM_A))))
            assert not first & {p["metadata"]["name"]
                                for p in running_pods(kube, TEAM_A, "gang")}
            workload = workload_of(kube, TEAM_A, kube.get("batch/v1", "Job", "gang", TEAM_A))
            assert workload is not None and workload["spec"].get("active", True)
            assert "gpu-platform.io/fault-requeued-at" not in (
                workload["metadata"].get("annotations") or {})
    finally:
        kube.delete("batch/v1", "Job", "gang", TEAM_A, propagation="Background")


NVSENTINEL = remediation_settings(SETTINGS, detector="nvsentinel")


def test_a_team_gang_on_a_node_nvsentinel_quarantined_is_requeued_whole(kueue):  # noqa: F811
    """NVSentinel cordons a node and labels its state; its drainer knows no Kueue workload. The
    pass drains the node the platform's way: the gang goes back to its queue whole and runs
    on the node the first test's repair returned to service."""
    cp, kube = kueue.cp, kueue.kube
    try:
        with remediating(cp, REMEDIATION, [GPU_NODE, HEALTHY_NODE]) as remediation:
            kube.merge_patch("v1", "Node", GPU_NODE, {"metadata": {"labels": {
                REPAIRED_LABEL: "true"}}})
            assert f"{GPU_NODE}: back in service" in remediation.run()
        kube.create(gpu_job("gang-nv", TEAM_A, pods=GPUS_PER_TEAM, queue=TEAM_A_QUEUE))
        admitted_and_running(kube, TEAM_A, "gang-nv", pods=GPUS_PER_TEAM)
        # The default scheduler spreads: the gang may run on both nodes. One of them fails.
        on = min(nodes_of(kube, "gang-nv"))
        other = GPU_NODE if on == HEALTHY_NODE else HEALTHY_NODE
        # What NVSentinel's fault-quarantine does to a node it takes out of service.
        kube.merge_patch("v1", "Node", on, {"metadata": {"labels": {
            NVSENTINEL_STATE_LABEL: "quarantined"}}, "spec": {"unschedulable": True}})
        with remediating(cp, NVSENTINEL, [GPU_NODE, HEALTHY_NODE]) as remediation:
            log = remediation.run()
        assert sum("requeued with its workload" in line for line in log.splitlines()) == 1, log
        wait_until(lambda: nodes_of(kube, "gang-nv") == {other} and len(
            running_pods(kube, TEAM_A, "gang-nv")) == GPUS_PER_TEAM,
            "the gang to run again on the node in service", timeout=90)
        # NVSentinel's node is left as NVSentinel made it: it returns it itself.
        node = kube.get("v1", "Node", on)
        assert node["spec"].get("unschedulable") is True
        assert not any(t["key"] == TAINT_KEY for t in node["spec"].get("taints") or [])
    finally:
        kube.delete("batch/v1", "Job", "gang-nv", TEAM_A, propagation="Background")
