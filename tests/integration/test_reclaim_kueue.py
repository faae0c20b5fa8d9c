"""Idle reclaim on a team's Jobs, with the real Kueue running the Configuration the platform
generates (test_kueue.py's Kueue, queues and kube-scheduler): what an eviction of an idle pod
does to a Job that Kueue admitted. The declared reclaim script runs as in test_reclaim.py
(reclaim_run.py), against the real Prometheus and an exporter stand-in, time compressed the same
way.

What it shows (docs/operators/idle-reclaim.md#kueue-and-evicted-pods): the Job's pod failure
policy decides. A Job that may retry replaces its pod, and Kueue keeps its Workload admitted,
so the team's quota stays held; a Job whose policy fails it on DisruptionTarget ends, its
Workload finishes and Kueue frees its quota. Neither is requeued: the platform's Kueue
Configuration has no waitForPodsReady.recoveryTimeout.
"""

from __future__ import annotations

import json

from reclaim_run import ExporterStandIn, Prometheus, declared_reclaim, reclaim_run
from test_kueue import (
    API_VERSION,
    SETTINGS,
    TEAM_A,
    TEAM_A_QUEUE,
    admitted_and_running,
    condition,
    gpu_job,
    job_pods,
    kueue,  # noqa: F401 (the module's fixture)
    workload_of,
)

from components.gpu_reclaim.settings import ReclaimSettings
from controlplane import wait_until
from declared_objects import apply_declared, find
from fake_kubelet import running_pods

# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
RECLAIM = SETTINGS.model_copy(update={"reclaim": ReclaimSettings.model_validate({
    "enabled": True, "teams": [TEAM_A], "action": "evict", "gracePeriod": "0s"}).model_copy(
        update={"idle_for": "40s"})})
FAIL_ON_EVICTION = {"rules": [{"action": "FailJob",
                               "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def admitted(kube) -> int:
    """The Workloads admitted to the team's ClusterQueue, as its status counts them."""
    return kube.get(API_VERSION, "ClusterQueue", TEAM_A).get("status", {}).get(
        "admittedWorkloads", 0)


def test_an_evicted_team_pod_is_replaced_within_its_quota_or_its_job_ends_and_frees_it(kueue):  # noqa: F811
    cp, kube = kueue.cp, kueue.kube
    objects = declared_reclaim(RECLAIM)
    apply_declared(kube, objects)
    exporter = ExporterStandIn()
    prometheus = Prometheus(cp, RECLAIM, exporter.port)
    try:
        retries = gpu_job("retries", TEAM_A, pods=1, queue=TEAM_A_QUEUE)
        retries["spec"]["backoffLimit"] = 1
        fails = gpu_job("fails", TEAM_A, pods=1, queue=TEAM_A_QUEUE)
        fails["spec"]["podFailurePolicy"] = FAIL_ON_EVICTION
        for job in (retries, fails):
            kube.create(job)
        for name in ("retries", "fails"):
            admitted_and_running(kube, TEAM_A, name, pods=1)
        first = {name: running_pods(kube, TEAM_A, name)[0]["metadata"]["name"]
                 for name in ("retries", "fails")}
        for pod in first.values():
            exporter.set(TEAM_A, pod, 0.0)
        wait_until(lambda: admitted(kube) == 2, "the team's quota to hold both Workloads",
                   explain=lambda: str(kube.get(API_VERSION, "ClusterQueue", TEAM_A)["status"]))

        config = json.loads(find(objects, "ConfigMap", "gpu-reclaim")["data"]["config.json"])
        idle = {(TEAM_A, pod) for pod in first.values()}
        wait_until(lambda: idle <= prometheus.idle(config["query"]),
                   "Prometheus to answer the idle pods", timeout=120, interval=2)
        log = reclaim_run(cp, objects, RECLAIM, prometheus)      # reports
        log += reclaim_run(cp, objects, RECLAIM, prometheus)     # evicts (grace period 0s)
        for pod in first.values():
            assert f"{TEAM_A}/{pod}: evicted" in log, log

        # The Job that may retry replaces its pod; Kueue keeps the Workload admitted.
        wait_until(lambda: [p for p in running_pods(kube, TEAM_A, "retries")
                            if p["metadata"]["name"] != first["retries"]],
                   "the Job to replace its evicted pod", timeout=60)
        created = kube.get("batch/v1", "Job", "retries", TEAM_A)
        workload = workload_of(kube, TEAM_A, created)
        assert workload is not None and condition(workload, "Admitted") == "True"
        assert condition(workload, "Evicted") != "True"
        # The Job failed on the eviction: its Workload finishes and the quota is free.
        wait_until(lambda: condition(kube.get("batch/v1", "Job", "fails", TEAM_A), "Failed")
                   == "True", "the Job to fail on DisruptionTarget")
        wait_until(lambda: condition(workload_of(kube, TEAM_A, kube.get(
            "batch/v1", "Job", "fails", TEAM_A)) or {}, "Finished") == "True",
            "its Workload to finish")
        wait_until(lambda: admitted(kube) == 1, "the team's quota to hold one Workload",
                   explain=lambda: str(kube.get(API_VERSION, "ClusterQueue", TEAM_A)["status"]))
        assert not [p for p in job_pods(kube, TEAM_A, "fails")
                    if p["metadata"]["name"] != first["fails"]]
    finally:
        prometheus.process.stop()
        exporter.stop()
