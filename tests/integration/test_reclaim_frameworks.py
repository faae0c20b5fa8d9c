"""Idle reclaim on a team's JobSet, on test_frameworks' platform (the real Kueue running the
generated Configuration at the default `teams.frameworks`, JobSet's CRD, OPA's webhooks, the
binpack scheduler, a real kube-controller-manager): the idle pods belong to Jobs whose controller
is the JobSet, and the JobSet's Workload is what holds the team's quota. The declared reclaim
script runs as in test_reclaim.py (reclaim_run.py), against the real Prometheus and an exporter
stand-in, time compressed the same way. JobSet's controller does not run: the test creates the
JobSet's Jobs and suspends them when the JobSet is suspended, under its ServiceAccount's name.
"""

from __future__ import annotations

import copy

from components.gpu_reclaim.settings import ReclaimSettings
from tests.integration.test_frameworks import (
    APISERVER_ARGS,  # noqa: F401 (the module's API server flags)
    JOBSET_CONTROLLER,
    NODES,
    TEAM,
    USER,
    condition,
    example,
    owner,
    platform,  # noqa: F401 (the module's fixture)
    stack,
    workload_of,
)
from tests.kit.cluster.controlplane import wait_until
from tests.kit.cluster.reclaim_run import IDLE_FOR, reclaiming

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
# A quota of two whole nodes: the JobSet below holds it all.
STACK = stack(None, gpus=16)


def running(kube, job: str) -> list[dict]:
    """The Job's pods that run and are not being deleted."""
    return [p for p in kube.list("v1", "Pod", TEAM, labelSelector=f"job-name={job}")
            if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def test_an_idle_jobset_goes_back_to_its_queue_whole_and_the_waiting_job_runs(platform):  # noqa: F811
    kube, cp = platform.kube, platform.cp
    settings = platform.settings.model_copy(update={"reclaim": ReclaimSettings.model_validate({
        "enabled": True, "teams": [TEAM], "action": "evict", "gracePeriod": "0s"}).model_copy(
            update={"idle_for": IDLE_FOR})})
    with reclaiming(cp, settings) as reclaim:
        # The users' queued JobSet: two 8-GPU workers, the team's whole quota; of the Job's
        # priority (one of a higher priority, queued again, would preempt the Job to get back).
        manifest = example(platform, "queued/jobset.yaml")
        del manifest["metadata"]["labels"]
        created = cp.impersonating(USER).create(manifest)
        assert created["spec"]["suspend"] is True, "Kueue's webhook did not suspend the JobSet"
        wait_until(lambda: not kube.get(JOBSET_API, "JobSet", "finetune", TEAM)["spec"].get(
            "suspend"), "Kueue to start the JobSet", timeout=60,
            explain=lambda: f"its Workload: {workload_of(kube, 'finetune').get('status')}")
        jobset = kube.get(JOBSET_API, "JobSet", "finetune", TEAM)
        # JobSet's controller: a Job per replica, of the template as Kueue admitted it.
        replicated = jobset["spec"]["replicatedJobs"][0]
        jobs = [f"finetune-workers-{index}" for index in range(replicated["replicas"])]
        for name in jobs:
            cp.impersonating(JOBSET_CONTROLLER).create({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": TEAM,
                             "ownerReferences": [owner(jobset)]},
                "spec": copy.deepcopy(replicated["template"]["spec"])})
        pods = wait_until(lambda: (found := [p for name in jobs
                                             for p in running(kube, name)
                                             if p["spec"]["nodeName"] in NODES])
                          and len(found) == len(jobs) and found,
                          "the JobSet's pods to run on the GPU nodes", timeout=60)
        names = [p["metadata"]["name"] for p in pods]

        # A Job queued behind it waits: the quota is the JobSet's.
        waiting = cp.impersonating(USER).create(example(platform, "queued/job.yaml"))
        wait_until(lambda: (w := workload_of(kube, waiting["metadata"]["name"])) and not
                   condition(w, "QuotaReserved") and w.get("status", {}).get("conditions"),
                   "the waiting Job's Workload to be pending", timeout=60)

        reclaim.set_idle({(TEAM, name) for name in names})
        log = reclaim.run()      # reports
        log += reclaim.run()     # requeues (grace period 0s)
        assert sum(f"{TEAM}/{name}: requeued with its workload" in log
                   for name in names) == len(names), log

        # Kueue stopped the JobSet; its controller suspends the Jobs, whose pods go.
        wait_until(lambda: kube.get(JOBSET_API, "JobSet", "finetune", TEAM)["spec"].get(
            "suspend") is True, "Kueue to suspend the JobSet", timeout=60)
        for name in jobs:
            cp.impersonating(JOBSET_CONTROLLER).merge_patch("batch/v1", "Job", name,
                                                           {"spec": {"suspend": True}}, TEAM)
        # Its GPUs went to the waiting Job; the JobSet waits in its queue again, whole.
        wait_until(lambda: len(running(kube, waiting["metadata"]["name"]))
                   == waiting["spec"]["parallelism"], "the waiting Job's pods to run",
                   timeout=90, explain=lambda: (
                       f"its Workload: {workload_of(kube, waiting['metadata']['name'])}\n"
                       f"the JobSet's: {workload_of(kube, 'finetune')}\npods: " + str([
                           (p["metadata"]["name"], p["status"].get("phase"),
                            p["spec"].get("nodeName"), p["metadata"].get("deletionTimestamp"))
                           for p in kube.list("v1", "Pod", TEAM)])))
        workload = workload_of(kube, "finetune")
        assert not condition(workload, "QuotaReserved")
        assert workload["spec"].get("active", True)
        assert not any(running(kube, name) for name in jobs)
