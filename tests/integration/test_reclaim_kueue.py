"""Idle reclaim on a team's Jobs, with the real Kueue running the Configuration the platform
generates (test_kueue.py's Kueue, queues and kube-scheduler): an idle pod of a Job Kueue admitted
goes back to the queue with its Workload, which frees the team's quota for the work waiting
behind it, while the other team, on a policy of report only, keeps its idle Job; an idle bare
notebook pod, which owns its Workload, is kept by its owner's keep-alive once, then evicted for
good and its quota freed. The declared
reclaim script runs as in test_reclaim.py (reclaim_run.py), against the real Prometheus and an
exporter stand-in, time compressed the same way.
"""

from __future__ import annotations

from components.gpu_reclaim.settings import ReclaimSettings
from tests.integration.test_kueue import (
    GPUS_PER_TEAM,
    SETTINGS,
    TEAM_A,
    TEAM_A_QUEUE,
    TEAM_B,
    admitted_and_running,
    condition,
    gpu_job,
    kueue,  # noqa: F401 (the module's fixture)
    pending,
    workload_of,
)
from tests.kit.cluster.controlplane import Kube, wait_until
from tests.kit.cluster.fake_kubelet import running_pods
from tests.kit.cluster.nodes_and_pods import pod_spec
from tests.kit.cluster.reclaim_run import reclaiming

# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
# Both teams opted in, on report; team-a on evict by a policy of its own.
RECLAIM = SETTINGS.model_copy(update={"reclaim": ReclaimSettings.model_validate({
    "enabled": True, "teams": [TEAM_A, TEAM_B], "action": "report", "policies": [
        {"teams": [TEAM_A], "action": "evict", "gracePeriod": "0s"}]}).model_copy(
        update={"idle_for": "40s"})})


def test_an_idle_job_of_a_team_on_evict_goes_back_to_its_queue_and_one_on_report_stays(kueue):  # noqa: F811
    cp, kube = kueue.cp, kueue.kube
    try:
        with reclaiming(cp, RECLAIM) as reclaim:
            # The idle Job holds the team's whole quota; the busy one waits behind it.
            kube.create(gpu_job("idle", TEAM_A, pods=GPUS_PER_TEAM, queue=TEAM_A_QUEUE))
            admitted_and_running(kube, TEAM_A, "idle", pods=GPUS_PER_TEAM)
            kube.create(gpu_job("waiting", TEAM_A, pods=2, queue=TEAM_A_QUEUE))
            pending(kube, TEAM_A, "waiting")
            kube.create(gpu_job("idle", TEAM_B, pods=1, queue=None))
            admitted_and_running(kube, TEAM_B, "idle", pods=1)
            idle_pods = [p["metadata"]["name"] for p in running_pods(kube, TEAM_A, "idle")]
            [reported] = [p["metadata"]["name"] for p in running_pods(kube, TEAM_B, "idle")]
            reclaim.set_idle({(TEAM_A, pod) for pod in idle_pods} | {(TEAM_B, reported)})
            log = reclaim.run()      # reports
            assert f"{TEAM_B}/{reported}: reported" in log, log
            log += reclaim.run()     # requeues (grace period 0s)
            assert sum(f"{TEAM_A}/{pod}: requeued with its workload" in log
                       for pod in idle_pods) == len(idle_pods), log
            # team-b's policy is the stack's, report: its idle Job keeps its GPU.
            assert f"{TEAM_B}/{reported}: reported already (action: report)" in log, log
            assert [p["metadata"]["name"] for p in running_pods(kube, TEAM_B, "idle")] == \
                [reported]

            # Its GPUs went to the waiting Job; it is queued again, whole, behind it.
            admitted_and_running(kube, TEAM_A, "waiting", pods=2)
            idle = kube.get("batch/v1", "Job", "idle", TEAM_A)
            workload = wait_until(lambda: (w := workload_of(kube, TEAM_A, idle)) and condition(
                w, "QuotaReserved") == "False" and w["spec"].get("active", True) and w,
                "the idle Job's Workload to wait in its queue again")
            assert "gpu-platform.io/idle-requeued-at" not in (
                workload["metadata"].get("annotations") or {})
            assert kube.get("batch/v1", "Job", "idle", TEAM_A)["spec"]["suspend"] is True
            assert not running_pods(kube, TEAM_A, "idle")
    finally:
        for namespace, job in ((TEAM_A, "idle"), (TEAM_A, "waiting"), (TEAM_B, "idle")):
            kube.delete("batch/v1", "Job", job, namespace, propagation="Background")


NOTEBOOKS = SETTINGS.model_copy(update={"reclaim": ReclaimSettings.model_validate({
    "enabled": True, "teams": [TEAM_B], "action": "evict", "gracePeriod": "0s"}).model_copy(
        update={"idle_for": "40s"})})


def test_an_idle_bare_notebook_pod_of_a_team_is_evicted_for_good_and_frees_its_quota(kueue):  # noqa: F811
    """A bare pod owns its Workload (Kueue's pod integration): nothing would queue again, so it
    is evicted as any pod, as the users' page says, and Kueue ends its Workload with it. Its
    owner's keep-alive, answering the report, keeps it one grace period more (the stack's one
    keep-alive), as the report's message says."""
    cp, kube = kueue.cp, kueue.kube
    with reclaiming(cp, NOTEBOOKS) as reclaim:
        notebook = kube.create({"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "notebook-0", "namespace": TEAM_B},
                                "spec": pod_spec(gpus=1)})
        wait_until(lambda: running_pod(kube, TEAM_B, "notebook-0"), "the notebook to run",
                   timeout=60)
        assert workload_of(kube, TEAM_B, notebook), "Kueue holds the notebook's GPU"
        kube.create(gpu_job("waiting", TEAM_B, pods=GPUS_PER_TEAM, queue=None))
        pending(kube, TEAM_B, "waiting")
        reclaim.set_idle({(TEAM_B, "notebook-0")})
        log = reclaim.run()      # reports
        kube.merge_patch("v1", "Pod", "notebook-0", {"metadata": {"annotations": {
            "gpu-platform.io/keep-alive": "true"}}}, TEAM_B, what="keep the notebook alive")
        log += reclaim.run()     # kept alive instead of evicted (grace period 0s)
        assert f"{TEAM_B}/notebook-0: kept alive: grace period restarted" in log, log
        assert running_pod(kube, TEAM_B, "notebook-0")
        pending(kube, TEAM_B, "waiting")
        log += reclaim.run()     # evicts: its one keep-alive is used
        assert f"{TEAM_B}/notebook-0: evicted" in log, log
        wait_until(lambda: not kube.list("v1", "Pod", TEAM_B,
                                         fieldSelector="metadata.name=notebook-0"),
                   "the notebook to be gone")
        # The garbage collector removes the Workload once its pod is gone.
        wait_until(lambda: workload_of(kube, TEAM_B, notebook) is None,
                   "the notebook's Workload to end with it")
        admitted_and_running(kube, TEAM_B, "waiting", pods=GPUS_PER_TEAM)


def running_pod(kube: Kube, namespace: str, name: str) -> bool:
    return kube.get("v1", "Pod", name, namespace)["status"].get("phase") == "Running"
