"""Teams on a real control plane, as the platform declares them: the real Kueue running the
Configuration the program generates, the ResourceFlavor, ClusterQueues, LocalQueues and team
namespaces the program declares (applied through Kueue's webhooks), the binpack scheduler as
declared, OPA's pods (kubelet.py) behind the declared webhooks, a real kube-controller-manager
running Jobs and Deployments, and a fake kubelet.

Two teams of 12 GPUs each share three nodes of 8: their quotas add up to what the nodes hold. A
third, with no quota of its own, runs on what they leave idle, its queue StrictFIFO."""

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from components import opa_admission
from components.base import facts
from components.base.facts import GPU_RESOURCE
from components.platform.settings import StackSettings
from tests.kit.cluster.controlplane import ControlPlane, Kube, wait_until
from tests.kit.cluster.declared_objects import (
    read_back_differences,
)
from tests.kit.cluster.fake_kubelet import cordon
from tests.kit.cluster.kueue import API_VERSION, Kueue
from tests.kit.cluster.nodes_and_pods import (
    GPU,
    create_gpu_node,
    ensure_namespace,
    job,
    placement,
    pod,
    pod_template,
)
from tests.kit.cluster.running_platform import refusal, run_platform, update_refusal
from tests.kit.stacks import with_changes

RESEARCH, VISION, SPEECH, NO_TEAM = "research", "vision", "speech", "team-a"
GPU_NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3")
PODS_READY_TIMEOUT = 20
KUEUE_KINDS = ("ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue")
STACK = with_changes(
    gpuNodes={"names": list(GPU_NODES)},
    admission={"replicas": 2},
    teams={"enabled": True, "waitForPodsReady": f"{PODS_READY_TIMEOUT}s",
           "teams": [{"name": RESEARCH, "namespaces": [RESEARCH],
                      "quota": {"gpu": {GPU_RESOURCE: 12}}},
                     {"name": VISION, "namespaces": [VISION, "vision-serving"],
                      "quota": {"gpu": {GPU_RESOURCE: 12}}},
                     {"name": SPEECH, "namespaces": [SPEECH],
                      "quota": {"gpu": {GPU_RESOURCE: 0}}, "queueingStrategy": "StrictFIFO"}]})


# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


@dataclass
class Platform:
    cp: ControlPlane
    settings: StackSettings
    kueue: Kueue
    scheduler: str
    declared: list[dict]


@pytest.fixture(scope="module")
def platform(control_plane) -> Iterator[Platform]:
    cp, kube = control_plane, control_plane.admin
    with ExitStack() as stack:
        running = run_platform(stack, cp, STACK)
        settings = running.settings
        for team in (RESEARCH, VISION, SPEECH):
            wait_until(lambda team=team: status(kube, "ClusterQueue", team, "Active") == "True",
                       f"ClusterQueue {team} to be active")
        # The webhook takes effect within moments: a GPU pod of no team is refused.
        ensure_namespace(kube, NO_TEAM)
        wait_until(lambda: "belongs to no team" in refusal(kube, gpu_pod("probe", NO_TEAM,
                                                                          settings)),
                   "the admission webhook to take effect", timeout=15)
        for node in GPU_NODES:
            create_gpu_node(kube, settings, node, gpus=8)
        assert running.kueue is not None, "the stack has teams on"
        yield Platform(cp, settings, running.kueue, settings.scheduler.name, running.declared)


def status(kube: Kube, kind: str, name: str, condition: str,
           namespace: str | None = None) -> str | None:
    obj = kube.get(API_VERSION, kind, name, namespace)
    return next((c["status"] for c in obj.get("status", {}).get("conditions", [])
                 if c["type"] == condition), None)


def gpu_pod(name: str, namespace: str, settings: StackSettings, gpus: int = 1,
            owner: dict | None = None) -> dict:
    """A GPU pod on the binpack scheduler; with `owner`, claiming to be that Job's pod."""
    obj = pod(name, namespace, gpus=gpus, settings=settings,
              scheduler=settings.scheduler.name)
    if owner:
        obj["metadata"]["ownerReferences"] = [{
            "apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True}]
    return obj


def gpu_job(name: str, namespace: str, platform: Platform, pods: int, gpus: int) -> dict:
    """A Job of `pods` pods of `gpus` GPUs on the binpack scheduler, naming no queue and
    tolerating nothing: the team's flavor gives it the tolerations."""
    template = pod_template({"app": name}, gpus=gpus)
    template["spec"]["schedulerName"] = platform.scheduler
    return job(name, namespace, template, parallelism=pods, completions=pods)


def job_pods(kube: Kube, namespace: str, name: str) -> list[dict]:
    return [p for p in kube.list("v1", "Pod", namespace, labelSelector=f"job-name={name}")
            if not p["metadata"].get("deletionTimestamp")]


def running_on(kube: Kube, namespace: str, name: str) -> list[str]:
    """The nodes of the job's running pods."""
    return sorted(p["spec"]["nodeName"] for p in job_pods(kube, namespace, name)
                  if p.get("status", {}).get("phase") == "Running")


def workload_of(kube: Kube, namespace: str, owner: str) -> dict | None:
    for workload in kube.list(API_VERSION, "Workload", namespace):
        if any(ref["name"] == owner for ref in workload["metadata"].get("ownerReferences", [])):
            return workload
    return None


def workload_condition(kube: Kube, namespace: str, owner: str, condition: str) -> dict | None:
    workload = workload_of(kube, namespace, owner)
    return next((c for c in (workload or {}).get("status", {}).get("conditions", [])
                 if c["type"] == condition), None)


def queues_state(kube: Kube) -> str:
    """What Kueue and the pods say, for a wait that timed out."""
    lines = []
    for namespace in (RESEARCH, VISION, SPEECH):
        for workload in kube.list(API_VERSION, "Workload", namespace):
            conditions = {c["type"]: f"{c['status']} {c.get('reason', '')} {c.get('message', '')}"
                          for c in workload.get("status", {}).get("conditions", [])}
            lines.append(f"workload {namespace}/{workload['metadata']['name']}: {conditions}")
        for p in kube.list("v1", "Pod", namespace):
            lines.append(f"pod {namespace}/{p['metadata']['name']}: "
                         f"{p.get('status', {}).get('phase')} on {p['spec'].get('nodeName')} "
                         f"gates={p['spec'].get('schedulingGates')} "
                         f"deleting={bool(p['metadata'].get('deletionTimestamp'))}")
    return "\n".join(lines)


def finish(kube: Kube, namespace: str, *names: str) -> None:
    for name in names:
        kube.delete("batch/v1", "Job", name, namespace, propagation="Background")
    wait_until(lambda: not any(job_pods(kube, namespace, n) for n in names),
               f"the pods of {', '.join(names)} to be gone", timeout=60)


def test_the_queues_the_platform_declares_are_active_in_kueue(platform):
    kube = platform.cp.admin
    for namespace in (RESEARCH, VISION, "vision-serving"):
        assert status(kube, "LocalQueue", "default", "Active", namespace) == "True"
    flavor = kube.get(API_VERSION, "ResourceFlavor", "gpu")
    assert "kueue.x-k8s.io/resource-in-use" in flavor["metadata"].get("finalizers", [])


def test_what_the_program_declares_reads_back_as_declared(platform):
    """Every object of the teams stack, as the API server (and Kueue's webhooks) store it, has
    the values the program declares: the next preview changes nothing."""
    kube = platform.cp.admin
    objects = [o for o in platform.declared if kube.serves(o["apiVersion"], o["kind"])
               and o["metadata"]["name"] != opa_admission.REACHABILITY_PROBE]
    assert {o["kind"] for o in objects} >= set(KUEUE_KINDS)
    assert read_back_differences(kube, objects) == {}


def test_admitted_pods_still_land_on_the_busiest_gpu_node(platform):
    kube = platform.cp.admin
    kube.create(gpu_job("first", RESEARCH, platform, pods=1, gpus=2))
    wait_until(lambda: running_on(kube, RESEARCH, "first"), "the first job to run", timeout=60)
    (busiest,) = running_on(kube, RESEARCH, "first")
    kube.create(gpu_job("second", RESEARCH, platform, pods=2, gpus=1))
    wait_until(lambda: len(running_on(kube, RESEARCH, "second")) == 2, "the second job to run",
               timeout=60)
    assert running_on(kube, RESEARCH, "second") == [busiest, busiest]
    finish(kube, RESEARCH, "first", "second")


def test_a_team_borrows_idle_gpus_and_the_lender_gets_them_back_when_it_needs_them(platform):
    """Vision runs three 8-GPU jobs on its 12 and research's idle 12 (every node full);
    research's own 8-GPU job then reclaims them: a vision job is preempted and research's
    runs."""
    kube = platform.cp.admin
    for index in range(3):
        kube.create(gpu_job(f"vision-{index}", VISION, platform, pods=1, gpus=8))
    wait_until(lambda: sum(len(running_on(kube, VISION, f"vision-{i}")) for i in range(3)) == 3,
               "vision's three jobs to run, one on borrowed GPUs", timeout=90)
    started = time.monotonic()
    kube.create(gpu_job("reclaim", RESEARCH, platform, pods=1, gpus=8))
    wait_until(lambda: running_on(kube, RESEARCH, "reclaim"), "research's job to run on the GPUs "
               "it lent", timeout=90, explain=lambda: queues_state(kube))
    print(f"\nresearch's job ran {time.monotonic() - started:.1f} s after it was submitted")
    preempted = [i for i in range(3) if (workload_condition(
        kube, VISION, f"vision-{i}", "Evicted") or {}).get("reason") == "Preempted"]
    assert len(preempted) == 1
    assert sum(len(running_on(kube, VISION, f"vision-{i}")) for i in range(3)) == 2
    finish(kube, VISION, *(f"vision-{i}" for i in range(3)))
    finish(kube, RESEARCH, "reclaim")


def test_a_job_beyond_the_quotas_starts_nothing(platform):
    """Four 8-GPU pods: more than the cohort's 24 GPUs. Kueue admits none of them."""
    kube = platform.cp.admin
    kube.create(gpu_job("too-big", RESEARCH, platform, pods=4, gpus=8))
    wait_until(lambda: workload_of(kube, RESEARCH, "too-big"), "its workload")
    time.sleep(5)
    assert (workload_condition(kube, RESEARCH, "too-big", "QuotaReserved") or {}).get(
        "status") != "True"
    assert not job_pods(kube, RESEARCH, "too-big")
    finish(kube, RESEARCH, "too-big")


def quota_reserved(kube: Kube, namespace: str, owner: str) -> bool:
    return (workload_condition(kube, namespace, owner, "QuotaReserved") or {}).get(
        "status") == "True"


def test_a_strict_fifo_queue_holds_later_work_behind_its_oldest_and_a_best_effort_one_does_not(
        platform):
    """Research runs 16 GPUs (its 12 and 4 of vision's), so 8 of the cohort's 24 are idle. In
    each of research's queue (BestEffortFIFO) and speech's (StrictFIFO) a 16-GPU job waits, and
    a 1-GPU job comes after it: research's starts on the idle GPUs, speech's waits behind its
    big job, and starts after it once research's GPUs are free."""
    kube = platform.cp.admin
    kube.create(gpu_job("holder", RESEARCH, platform, pods=2, gpus=8))
    wait_until(lambda: len(running_on(kube, RESEARCH, "holder")) == 2,
               "research's 16 GPUs to run", timeout=60, explain=lambda: queues_state(kube))
    for namespace in (RESEARCH, SPEECH):
        kube.create(gpu_job(f"{namespace}-big", namespace, platform, pods=2, gpus=8))
        wait_until(lambda namespace=namespace: workload_of(kube, namespace, f"{namespace}-big"),
                   f"the Workload of {namespace}'s big job")
        # Kueue orders by creation time to the second (then by uid): the next second's is later.
        time.sleep(1.1)
        kube.create(gpu_job(f"{namespace}-small", namespace, platform, pods=1, gpus=1))
    wait_until(lambda: running_on(kube, RESEARCH, "research-small"),
               "research's small job to pass its big one", timeout=60,
               explain=lambda: queues_state(kube))
    time.sleep(5)
    assert not quota_reserved(kube, SPEECH, "speech-small"), queues_state(kube)
    assert not quota_reserved(kube, SPEECH, "speech-big")
    assert not quota_reserved(kube, RESEARCH, "research-big")
    finish(kube, RESEARCH, "holder", "research-big", "research-small")
    wait_until(lambda: len(running_on(kube, SPEECH, "speech-big")) == 2
               and running_on(kube, SPEECH, "speech-small"),
               "speech's big job, then its small one, to run", timeout=90,
               explain=lambda: queues_state(kube))
    big, small = (workload_condition(kube, SPEECH, f"speech-{size}", "QuotaReserved")
                  for size in ("big", "small"))
    assert big and small and big["lastTransitionTime"] <= small["lastTransitionTime"]
    finish(kube, SPEECH, "speech-big", "speech-small")


def test_a_job_that_cannot_run_whole_gives_all_its_gpus_back_within_the_timeout(platform):
    """Three 8-GPU pods, admitted by quota (12 own and 12 borrowed), with one of the three
    nodes cordoned: two run and one finds no node. After waitForPodsReady's timeout the whole
    job is evicted and queued again: none of its pods holds GPUs."""
    kube = platform.cp.admin
    cordon(kube, [GPU_NODES[2]], True)
    try:
        kube.create(gpu_job("partial", RESEARCH, platform, pods=3, gpus=8))
        wait_until(lambda: len(running_on(kube, RESEARCH, "partial")) == 2,
                   "two of its three pods to run", timeout=60,
                   explain=lambda: queues_state(kube))
        admitted = time.monotonic()
        wait_until(lambda: not running_on(kube, RESEARCH, "partial"),
                   "the job to give its GPUs back", timeout=PODS_READY_TIMEOUT + 40,
                   explain=lambda: queues_state(kube))
        held = time.monotonic() - admitted
        print(f"\nthe job held 16 GPUs for {held:.1f} s after its pods ran "
              f"(waitForPodsReady {PODS_READY_TIMEOUT} s)")
        evicted = workload_condition(kube, RESEARCH, "partial", "Evicted")
        assert evicted and evicted["reason"] == "PodsReadyTimeout"
        assert held <= PODS_READY_TIMEOUT + 20
    finally:
        cordon(kube, [GPU_NODES[2]], False)
    finish(kube, RESEARCH, "partial")


def test_a_serving_deployment_counts_against_its_team(platform):
    kube = platform.cp.admin
    template = pod_template({"app": "serve"}, gpus=2)
    template["spec"]["schedulerName"] = platform.scheduler
    kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "serve", "namespace": "vision-serving"},
                 "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "serve"}},
                          "template": template}})

    def used() -> int:
        usage = kube.get(API_VERSION, "ClusterQueue", VISION).get("status", {}).get(
            "flavorsUsage", [])
        return sum(int(r["total"]) for f in usage for r in f["resources"]
                   if r["name"] == GPU)
    wait_until(lambda: used() == 4, "the Deployment's 4 GPUs counted in vision's queue",
               timeout=60)
    metrics = platform.kueue.metrics()
    line = next(line for line in metrics.splitlines()
                if line.startswith("kueue_cluster_queue_resource_usage{")
                and f'cluster_queue="{VISION}"' in line and f'resource="{GPU}"' in line)
    assert line.rsplit(" ", 1)[1] == "4"
    kube.delete("apps/v1", "Deployment", "serve", "vision-serving", propagation="Background")


def test_the_series_the_dashboard_and_alerts_read_are_what_kueue_serves(platform):
    served = {line.split("{")[0].split(" ")[0] for line in platform.kueue.metrics().splitlines()
              if not line.startswith("#")}
    for name in ("kueue_cluster_queue_nominal_quota", "kueue_cluster_queue_lending_limit",
                 "kueue_cluster_queue_resource_usage", "kueue_cluster_queue_resource_pending",
                 "kueue_pending_workloads", "kueue_admission_wait_time_seconds_bucket"):
        assert name in served, name


def test_a_gpu_pod_that_bypasses_the_queue_is_refused_naming_the_teams_queue(platform):
    """A pod that claims to be a queued Job's is left alone by Kueue's webhook, as the pods of
    the Jobs it manages are; OPA refuses it, as its creator is not the Job controller. A bare
    GPU pod, which Kueue holds for the team's quota, is admitted."""
    kube, settings = platform.cp.admin, platform.settings
    queued = kube.create(gpu_job("queued", RESEARCH, platform, pods=1, gpus=1))
    # Kueue's pod webhook looks the owner up in its cache: once the Job has its Workload, the
    # cache has the Job (before, the webhook refuses the pod for a Job "not found").
    wait_until(lambda: workload_of(kube, RESEARCH, "queued"), "the Job's Workload")
    message = refusal(kube, gpu_pod("bypass", RESEARCH, settings, owner=queued))
    assert 'namespace "research" of team "research"' in message
    assert "LocalQueue research/default" in message
    assert refusal(kube, gpu_pod("bare", RESEARCH, settings)) == ""
    finish(kube, RESEARCH, "queued")


POD, JOB = ("v1", "Pod"), ("batch/v1", "Job")


def test_only_kueue_lifts_its_gates_and_writes_its_labels_on_a_teams_gpu_pod(platform):
    """A pod Kueue holds (it asks for more GPUs than the cohort has, so Kueue never admits it): its
    gates and Kueue's labels cannot be taken off by a user, while a label of the user's own
    can change; a pod Kueue admits is let go by Kueue's own update and lands."""
    kube, settings = platform.cp.admin, platform.settings
    kube.create(gpu_pod("held", RESEARCH, settings, gpus=25))
    held = kube.get("v1", "Pod", "held", RESEARCH)
    assert {g["name"] for g in held["spec"]["schedulingGates"]} >= {facts.ADMISSION_GATE}
    assert held["metadata"]["labels"][facts.MANAGED_LABEL] == "true"
    message = update_refusal(kube, POD, "held", RESEARCH, {"spec": {"schedulingGates": []}})
    assert "only Kueue lifts its scheduling gate kueue.x-k8s.io/admission" in message
    assert 'quota of team "research"' in message
    message = update_refusal(kube, POD, "held", RESEARCH,
                             {"metadata": {"labels": {facts.MANAGED_LABEL: None}}})
    assert "only Kueue changes its label kueue.x-k8s.io/managed" in message
    assert update_refusal(kube, POD, "held", RESEARCH,
                          {"metadata": {"labels": {"app": "trainer"}}}) == ""
    kube.delete("v1", "Pod", "held", RESEARCH)
    # Kueue's own update lifts the gates of a pod it admits.
    kube.create(gpu_pod("let-go", RESEARCH, settings, gpus=1))
    assert placement(kube, RESEARCH, "let-go", timeout=60) in GPU_NODES
    kube.delete("v1", "Pod", "let-go", RESEARCH)


def test_a_gate_and_an_owner_of_the_users_making_are_refused(platform):
    """A pod naming a real Job of the user's as its controller is left alone by Kueue's webhook
    (no managed label): the gate the user wrote would never be lifted against the quota."""
    kube, settings = platform.cp.admin, platform.settings
    owner = kube.create(gpu_job("owner", RESEARCH, platform, pods=1, gpus=1))
    wait_until(lambda: workload_of(kube, RESEARCH, "owner"), "the Job's Workload")
    forged = gpu_pod("forged", RESEARCH, settings, owner=owner)
    forged["spec"]["schedulingGates"] = [{"name": facts.ADMISSION_GATE}]
    message = refusal(kube, forged)
    assert "it carries Kueue's gate, but Kueue's webhook did not take it over" in message
    finish(kube, RESEARCH, "owner")


def test_only_kueue_starts_a_teams_gpu_job_and_a_running_one_does_not_grow(platform):
    kube = platform.cp.admin
    kube.create(gpu_job("too-big-to-start", RESEARCH, platform, pods=4, gpus=8))
    wait_until(lambda: workload_of(kube, RESEARCH, "too-big-to-start"), "its Workload")
    message = update_refusal(kube, JOB, "too-big-to-start", RESEARCH, {"spec": {"suspend": False}})
    assert 'only Kueue starts a Job of namespace "research" (team "research")' in message
    assert not job_pods(kube, RESEARCH, "too-big-to-start")
    kube.create(gpu_job("running", RESEARCH, platform, pods=1, gpus=1))
    wait_until(lambda: running_on(kube, RESEARCH, "running"), "the small job to run", timeout=60)
    message = update_refusal(kube, JOB, "running", RESEARCH, {"spec": {"parallelism": 4}})
    assert "spec.parallelism 1 -> 4 would run more GPU pods than Kueue admitted" in message
    finish(kube, RESEARCH, "too-big-to-start", "running")


def test_with_kueue_stopped_team_namespaces_take_no_pods_and_others_are_untouched(platform):
    kube, settings = platform.cp.admin, platform.settings
    platform.kueue.kill()
    message = refusal(kube, gpu_pod("while-down", RESEARCH, settings))
    assert "failed calling webhook" in message
    assert refusal(kube, pod("cpu-elsewhere", "default")) == ""
