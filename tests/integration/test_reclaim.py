"""Idle GPU reclaim run as declared: the CronJob's script, from the declared ConfigMap, with its
flags and its ServiceAccount's token against the real API server (so the declared Roles are what
it works with), asking the real Prometheus (built from the module of the suite's promtool, the
version the stack deploys) that scrapes an exporter stand-in and evaluates the platform's usage
rules. Real kube-controller-manager (the Job and disruption controllers) and a fake kubelet.

Compressed in time so that the module runs in about two minutes (reclaim_run.py says how). The
stand-in serves one GPU per pod, labelled as the pinned DCGM exporter labels a GPU held by a pod
(device plugin path), and each GPU's engine activity as the test sets it.
"""

from __future__ import annotations

import json

import pytest

from components import gpu_reclaim
from components.gpu_reclaim.actor import gpu_reclaim as actor
from tests.kit.cluster.controlplane import ApiError, wait_until
from tests.kit.cluster.declared_objects import apply_declared, find
from tests.kit.cluster.fake_kubelet import gpu_workloads
from tests.kit.cluster.nodes_and_pods import ensure_namespace, job, pod, pod_template
from tests.kit.cluster.reclaim_run import (
    NODE,
    ExporterStandIn,
    Prometheus,
    declared_reclaim,
    reclaim_run,
    reclaim_settings,
)

# research opts in through its team, serving by name; vision's team and `other` do not.
NAMESPACES = ("research", "serving", "vision", "other")


@pytest.fixture(scope="module")
def cluster(control_plane, example_settings):
    cp = control_plane
    settings = reclaim_settings(example_settings)
    for namespace in NAMESPACES:
        ensure_namespace(cp.admin, namespace)
    with gpu_workloads(cp, settings, "other", (NODE,), gpus=16):
        applied, skipped = apply_declared(cp.admin, declared_reclaim(settings))
        assert not skipped, skipped
        exporter = ExporterStandIn()
        prometheus = Prometheus(cp, settings, exporter.port)
        try:
            yield cp, settings, exporter, prometheus
        finally:
            prometheus.process.stop()
            exporter.stop()


def events(kube, namespace: str, reason: str) -> dict[str, str]:
    """The events of `reason` in the namespace: `Kind/name` they regard -> note."""
    return {f"{e['regarding']['kind']}/{e['regarding']['name']}": e.get("note", "")
            for e in kube.list("events.k8s.io/v1", "Event", namespace)
            if e["reason"] == reason}


def reported(kube, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in kube.list("v1", "Pod", namespace)
            if gpu_reclaim.REPORTED_ANNOTATION in (p["metadata"].get("annotations") or {})}


def running(kube, namespace: str, name: str) -> bool:
    try:
        current = kube.get("v1", "Pod", name, namespace)
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return current["status"].get("phase") == "Running" and \
        not current["metadata"].get("deletionTimestamp")


def gpu_pod(name: str, namespace: str, settings, **metadata) -> dict:
    obj = pod(name, namespace, gpus=1, settings=settings, node_name=NODE)
    obj["metadata"] |= metadata
    return obj


def test_reports_then_evicts_only_opted_in_idle_pods_past_grace_within_budgets(cluster):
    cp, settings, exporter, prometheus = cluster
    kube = cp.admin
    # The workloads: a team's idle Job, its busy pod, a pod busy once within the window, a
    # kept pod; in serving an idle pod and one a PodDisruptionBudget guards; idle pods of a
    # team and a namespace that did not opt in.
    kube.create(job("train", "research", pod_template(
        {"app": "train"}, gpus=1, settings=settings, node_name=NODE), backoffLimit=1))
    for name, namespace, extra in (
            ("busy", "research", {}), ("blip", "research", {}),
            ("kept", "research", {"annotations": {"gpu-platform.io/keep-gpus": "true"}}),
            ("idle", "serving", {}), ("guarded", "serving", {"labels": {"app": "guarded"}}),
            ("idle", "vision", {}), ("idle", "other", {})):
        kube.create(gpu_pod(name, namespace, settings, **extra))
    kube.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                 "metadata": {"name": "guarded", "namespace": "serving"},
                 "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    train = wait_until(lambda: [p["metadata"]["name"] for p in kube.list(
        "v1", "Pod", "research", labelSelector="job-name=train")
        if p["status"].get("phase") == "Running"], "the Job's pod to run")[0]
    pods = [("research", train), ("research", "busy"), ("research", "blip"),
            ("research", "kept"), ("serving", "idle"), ("serving", "guarded"),
            ("vision", "idle"), ("other", "idle")]
    wait_until(lambda: all(running(kube, ns, name) for ns, name in pods), "every pod to run")
    for namespace, name in pods:
        exporter.set(namespace, name, 0.8 if name == "busy" else 0.0)
    wait_until(lambda: kube.get("policy/v1", "PodDisruptionBudget", "guarded", "serving")
               .get("status", {}).get("expectedPods") == 1, "the budget's status")

    # The query of the declared ConfigMap answers, once the window has passed, every pod idle
    # for all of it (in every namespace: the run chooses among them).
    objects = declared_reclaim(settings)
    config = json.loads(find(objects, "ConfigMap", "gpu-reclaim")["data"]["config.json"])
    idle = {p for p in pods if p[1] != "busy"}
    wait_until(lambda: prometheus.idle(config["query"]) == idle,
               "Prometheus to answer the idle pods", timeout=120, interval=2)
    # blip now works for a few seconds now and then: active within every window from its
    # first burst on, it is never idle again.
    exporter.pulse("research", "blip")
    wait_until(lambda: ("research", "blip") not in prometheus.idle(config["query"]),
               "blip to be active within the window", interval=0.5)

    # Report mode: events and annotations on the opted-in idle pods, nothing else.
    log = reclaim_run(cp, objects, settings, prometheus)
    assert reported(kube, "research") == {train} and reported(kube, "serving") == {
        "idle", "guarded"}, log
    assert reported(kube, "vision") == reported(kube, "other") == set()
    research = events(kube, "research", "GpuIdle")
    assert set(research) == {f"Pod/{train}", "Job/train"}
    assert "has held 1 GPU(s) with no activity above 5% for at least 40s" in \
        research["Job/train"]
    assert "report only" in research["Job/train"]
    assert set(events(kube, "serving", "GpuIdle")) == {"Pod/idle", "Pod/guarded"}
    assert all(running(kube, ns, name) for ns, name in pods)
    # The run may not evict in report mode, nor touch a namespace that did not opt in.
    account = cp.client(cp.service_account_token("gpu-reclaim", "gpu-reclaim"))
    for namespace, name in (("serving", "idle"), ("vision", "idle")):
        with pytest.raises(ApiError) as refused:
            account.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                            body={"apiVersion": "policy/v1", "kind": "Eviction",
                                  "metadata": {"name": name, "namespace": namespace}},
                            what="evict")
        assert refused.value.status == 403
    # A second report run reports nothing again.
    log = reclaim_run(cp, objects, settings, prometheus)
    assert len(events(kube, "serving", "GpuIdle")) == 2, log

    # Evict mode, within the grace period: nothing is evicted.
    evicting = reclaim_settings(settings, action="evict", grace_period="1h")
    objects = declared_reclaim(evicting)
    apply_declared(kube, objects)
    log = reclaim_run(cp, objects, evicting, prometheus)
    assert "in its grace period until" in log
    assert all(running(kube, ns, name) for ns, name in pods)
    # Each reported pod says when it may go (reported in report mode, before the change).
    for name in ("idle", "guarded"):
        annotations = kube.get("v1", "Pod", name, "serving")["metadata"]["annotations"]
        reported_at = actor.parse_time(annotations[gpu_reclaim.REPORTED_ANNOTATION])
        assert reported_at is not None
        assert annotations[gpu_reclaim.DEADLINE_ANNOTATION] == actor.format_time(
            reported_at + 3600)

    # Past the grace period: two evictions per run at most, the budget holds, and only the
    # opted-in idle pods go.
    evicting = reclaim_settings(settings, action="evict", grace_period="0s")
    objects = declared_reclaim(evicting)
    apply_declared(kube, objects)
    log = reclaim_run(cp, objects, evicting, prometheus)
    assert f"research/{train}: evicted" in log
    assert "serving/guarded: eviction refused by a disruption budget" in log
    assert "serving/idle: over this run's limit of 2 evictions" in log
    wait_until(lambda: not running(kube, "research", train), "the Job's pod to be evicted")
    assert "Job/train" in events(kube, "research", "GpuIdleEvicted")
    assert "Pod/guarded" in events(kube, "serving", "GpuIdleEvictionRefused")
    log = reclaim_run(cp, objects, evicting, prometheus)
    assert "serving/idle: evicted" in log
    wait_until(lambda: not running(kube, "serving", "idle"), "serving/idle to be evicted")
    assert running(kube, "serving", "guarded")
    for namespace, name in (("research", "busy"), ("research", "blip"), ("research", "kept"),
                            ("vision", "idle"), ("other", "idle")):
        assert running(kube, namespace, name), f"{namespace}/{name} was touched"
    assert events(kube, "vision", "GpuIdle") == events(kube, "other", "GpuIdle") == {}
    # The Job's pod failure policy decides: an evicted pod counts as a failure (backoffLimit
    # 1 allows one), so the Job controller replaces it.
    wait_until(lambda: [p for p in kube.list("v1", "Pod", "research",
                                             labelSelector="job-name=train")
                        if p["metadata"]["name"] != train],
               "the Job to replace its evicted pod")
