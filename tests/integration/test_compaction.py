"""GPU compaction through the real descheduler (the version the CronJob's image runs), with the
declared policy, flags and ServiceAccount, against a fragmented cluster: real
kube-controller-manager (workload controllers and the disruption controller), the binpack
scheduler as the program deploys it, and a fake kubelet.

The fragmented state is made the way churn makes it: nodes cordoned while a Deployment scales
up, so its replicas land on nodes the binpack scheduler would not have chosen, then uncordoned.
The pods carry no trace of it; their replacements go wherever the binpack scheduler puts them.
"""

import re
import time

import pytest

from components import gpu_compaction
from tests.kit.cluster.controlplane import wait_until
from tests.kit.cluster.declared_objects import find
from tests.kit.cluster.descheduler import compaction_run
from tests.kit.cluster.fake_kubelet import (
    cordon,
    deploy_on_nodes,
    gpu_workloads,
    gpus_used,
    running_pods,
    settled,
    succeed,
)
from tests.kit.cluster.nodes_and_pods import create_node, job, pod_template
from tests.kit.harness import compaction_of

NAMESPACE = "serving"
NODES = ("gpu-1", "gpu-2", "gpu-3", "gpu-4")


@pytest.fixture(scope="module")
def cluster(control_plane_with_schedulers, example_settings):
    cp = control_plane_with_schedulers
    with gpu_workloads(cp, example_settings, NAMESPACE, NODES):
        yield cp


def deploy(kube, settings, name: str, replicas_by_node: dict[str, int], opt_in: bool) -> None:
    deploy_on_nodes(kube, settings, NAMESPACE, NODES, name, replicas_by_node, opt_in)


def running(kube, app: str) -> list[dict]:
    return running_pods(kube, NAMESPACE, app)


def gpus_by_node(kube) -> dict[str, int]:
    return gpus_used(kube, NAMESPACE, NODES)


def whole_free_nodes(kube) -> list[str]:
    return [n for n, used in gpus_by_node(kube).items() if used == 0]


def test_a_run_frees_whole_gpu_nodes_and_moves_only_opted_in_pods(cluster, example_settings,
                                                                   declared):
    kube, settings = cluster.admin, example_settings
    # gpu-1: 5 of 8 GPUs busy with pods that did not opt in (the busy node to fill).
    deploy(kube, settings, "steady", {"gpu-1": 5}, opt_in=False)
    # gpu-2: two opted-in replicas (2 of 8).
    deploy(kube, settings, "batch-infer", {"gpu-2": 2}, opt_in=True)
    # gpu-3: an opted-in replica whose budget keeps it in place: the plan means to empty
    # gpu-3 too, and the eviction API refuses.
    deploy(kube, settings, "serve", {"gpu-3": 1}, opt_in=True)
    kube.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                 "metadata": {"name": "serve", "namespace": NAMESPACE},
                 "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}})
    wait_until(lambda: kube.get("policy/v1", "PodDisruptionBudget", "serve", NAMESPACE)
               .get("status", {}).get("currentHealthy") == 1, "the budget of serve to be known")
    assert gpus_by_node(kube) == {"gpu-1": 5, "gpu-2": 2, "gpu-3": 1, "gpu-4": 0}
    before = {p["metadata"]["uid"]: p["metadata"]["labels"]["app"]
              for p in kube.list("v1", "Pod", NAMESPACE)}

    # The declared policy: every pod is younger than minPodAge, so nothing moves.
    log = compaction_run(cluster, settings, declared.objects)
    assert {p["metadata"]["uid"] for p in kube.list("v1", "Pod", NAMESPACE)} == set(before)
    assert "totalEvicted=0" in log, log
    # The plan's log says what the age costs: the nodes it would otherwise empty.
    assert "pods younger than minPodAge keep gpu-2, gpu-3 from being emptied" in log, log

    # The same policy with minPodAge 1s (the only change): one run.
    time.sleep(1.5)
    policy = gpu_compaction.descheduler_policy(compaction_of(settings.model_copy(update={
        "compaction": settings.compaction.model_copy(update={"min_pod_age": "1s"})})))
    log = compaction_run(cluster, settings, declared.objects, policy=policy)

    # The plan meant to empty both lightly used nodes; the budget decides otherwise for gpu-3.
    assert "3 pods to move, expected to empty gpu-2, gpu-3" in log, log
    wait_until(lambda: settled(kube, NAMESPACE, "batch-infer", 2),
               "batch-infer back at 2 replicas")
    after = {p["metadata"]["uid"]: p for p in kube.list("v1", "Pod", NAMESPACE)}
    moved = {before[uid] for uid in set(before) - set(after)}
    assert moved == {"batch-infer"}, f"pods that left: {moved}\n{log}"
    # The replacements went to the busy node, through the binpack scheduler.
    for pod in running(kube, "batch-infer"):
        assert pod["spec"]["nodeName"] == "gpu-1"
        assert pod["spec"]["schedulerName"] == settings.scheduler.name
    assert gpus_by_node(kube) == {"gpu-1": 7, "gpu-2": 0, "gpu-3": 1, "gpu-4": 0}
    assert sorted(whole_free_nodes(kube)) == ["gpu-2", "gpu-4"]      # was gpu-4 alone
    # serve would have moved, but its budget (minAvailable 1 of 1) refused the eviction...
    assert len(running(kube, "serve")) == 1
    assert re.search(r'Error evicting pod.*serve-.*would violate the pod\'s disruption budget',
                     log), log
    # (The Warning event it also records is sent asynchronously, and a one-shot run can end
    # before sending it, so the log is the record.)


def test_an_evicted_checkpointing_job_resumes_on_a_busy_node(cluster, example_settings,
                                                              declared):
    """A batch Job that opted in with the pod failure policy the docs give: its pod, alone on a
    node, is evicted, and the Job replaces it (the eviction does not count as the Job's
    failure) on the busiest node that fits; the Job then completes."""
    kube, settings = cluster.admin, example_settings
    assert gpus_by_node(kube) == {"gpu-1": 7, "gpu-2": 0, "gpu-3": 1, "gpu-4": 0}
    labels = {"app": "train", **settings.compaction.opt_in}
    template = pod_template(labels, gpus=1, scheduler=settings.scheduler.name, settings=settings)
    cordon(kube, [n for n in NODES if n != "gpu-2"], True)
    kube.create(job("train", NAMESPACE, template, resumes_after_eviction=True))
    first = wait_until(lambda: next(iter(running(kube, "train")), None), "train to run")
    cordon(kube, NODES, False)
    assert first["spec"]["nodeName"] == "gpu-2"

    time.sleep(1.5)
    policy = gpu_compaction.descheduler_policy(compaction_of(settings.model_copy(update={
        "compaction": settings.compaction.model_copy(update={"min_pod_age": "1s"})})))
    log = compaction_run(cluster, settings, declared.objects, policy=policy)

    replacement = wait_until(
        lambda: next((p for p in running(kube, "train")
                      if p["metadata"]["uid"] != first["metadata"]["uid"]), None),
        "the Job to replace its evicted pod", explain=lambda: log)
    assert replacement["spec"]["nodeName"] == "gpu-1"
    assert sorted(whole_free_nodes(kube)) == ["gpu-2", "gpu-4"]
    status = kube.get("batch/v1", "Job", "train", NAMESPACE)["status"]
    assert not [c for c in status.get("conditions", [])
                if c["type"] in ("Failed", "FailureTarget")], status
    succeed(kube, replacement)
    wait_until(lambda: any(c["type"] == "Complete" and c["status"] == "True" for c in
                           kube.get("batch/v1", "Job", "train", NAMESPACE)["status"]
                           .get("conditions", [])), "train to complete")


def test_no_run_starts_while_the_binpack_scheduler_is_down(cluster, example_settings, declared):
    """A run's pod is placed by the binpack scheduler: with it up the run is bound; with it
    down the run stays pending, so it evicts nothing."""
    kube, settings = cluster.admin, example_settings
    create_node(kube, "cpu-1")
    cron_job = find(declared.objects, "CronJob", settings.compaction.name)
    namespace = settings.compaction.namespace

    def start_run(name: str) -> None:
        kube.create({"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": name, "namespace": namespace},
                     "spec": cron_job["spec"]["jobTemplate"]["spec"]})

    def run_pod(name: str) -> dict:
        return wait_until(lambda: next(iter(kube.list("v1", "Pod", namespace,
                                                      labelSelector=f"job-name={name}")), None),
                          f"the pod of {name}")

    start_run("run-up")
    wait_until(lambda: kube.get("v1", "Pod", run_pod("run-up")["metadata"]["name"], namespace)
               ["spec"].get("nodeName") == "cpu-1", "the run to be placed on cpu-1")

    scheduler = next(p for p in cluster.processes if p.name == settings.scheduler.name)
    scheduler.stop()
    start_run("run-down")
    name = run_pod("run-down")["metadata"]["name"]
    time.sleep(5)
    assert not kube.get("v1", "Pod", name, namespace)["spec"].get("nodeName")
