"""The compaction plan (components/gpu_compaction/planner/compaction_plan.py): which threshold a
run gets, on cluster states worked out by hand. Each node is 8 GPUs, 64 cores, 512 GiB; pods are
listed as the API server lists them. The script in its pod's place, and the real descheduler and
scheduler acting on its plan, are in tests/integration/test_compaction.py."""

import pytest

from components import gpu_compaction
from components.gpu_compaction.planner import compaction_plan
from tests.kit.harness import compaction_of, scheduler_scoring
from tests.unit.test_components import settings_of

NOW = 1_800_000_000.0
LONG_AGO = "2020-01-01T00:00:00Z"
GPU = "nvidia.com/gpu"


def node(name: str, unschedulable: bool = False) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true",
                                                  "kubernetes.io/hostname": name}},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi",
                                       "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, on: str, gpus: int = 1, movable: bool = True, memory: str = "32Gi",
        started: str = LONG_AGO, owner: str = "ReplicaSet", cpu: str = "2") -> dict:
    labels = {"gpu-platform.io/compaction": "allowed"} if movable else {}
    return {"metadata": {"name": name, "namespace": "work", "labels": labels,
                         "ownerReferences": [{"kind": owner, "name": "x"}] if owner else []},
            "spec": {"nodeName": on, "containers": [{"resources": {"requests": {
                "nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory}}}]},
            "status": {"phase": "Running", "startTime": started}}


def pods_on(node_name: str, count: int, **kwargs) -> list[dict]:
    return [pod(f"{node_name}-{i}", node_name, **kwargs) for i in range(count)]


@pytest.fixture
def settings(aggressive_compaction_settings):
    return aggressive_compaction_settings


def plan(settings, nodes, pods):
    policy = gpu_compaction.descheduler_policy(compaction_of(settings))
    return compaction_plan.planned_policy(policy, nodes, pods, scheduler_scoring(settings),
                                          now=NOW)


def thresholds(policy: dict) -> set:
    """The run's GPU thresholds (those on pods, CPU and memory are tested on their own)."""
    return {v for k, v in
            compaction_plan.plugin_args(policy, "HighNodeUtilization")["thresholds"].items()
            if k not in compaction_plan.BASE_RESOURCES}


def gpu_threshold_run(settings, nodes, pods, percent: float):
    """What a run with the declared policy and one GPU threshold does, unplanned."""
    declared = gpu_compaction.descheduler_policy(compaction_of(settings))
    return compaction_plan.replay_run(compaction_plan.snapshot(nodes, pods, declared, NOW),
                                      {GPU: percent}, declared, scheduler_scoring(settings))


def test_a_node_above_the_default_threshold_is_emptied_when_the_others_can_take_its_pods(
        settings):
    # a: 5 movable pods (62.5%); b, c: 6 fixed (2 free each); d: 7 fixed (1 free). The static
    # 50% never touches a; 62.5% puts a's five pods into the five free GPUs.
    nodes = [node(n) for n in "abcd"]
    pods = (pods_on("a", 5) + pods_on("b", 6, movable=False) + pods_on("c", 6, movable=False)
            + pods_on("d", 7, movable=False))
    policy, outcome = plan(settings, nodes, pods)
    assert thresholds(policy) == {62.5}
    assert outcome.emptied == ["a"] and outcome.gain == 1
    assert sorted(outcome.evicted) == [f"work/a-{i}" for i in range(5)]


def test_the_lowest_node_is_emptied_first_whatever_the_memory_order(settings):
    # a: 2 pods with much memory (25%); b: 5 pods with little memory (62.5%); c, d: 7 fixed.
    # At 75% the descheduler would visit b first (less memory requested), spend the two free
    # GPUs of c and d on two of b's pods and empty nothing; the plan takes 25%, which empties a.
    nodes = [node(n) for n in "abcd"]
    pods = (pods_on("a", 2, memory="200Gi") + pods_on("b", 5, memory="8Gi")
            + pods_on("c", 7, movable=False) + pods_on("d", 7, movable=False))
    policy, outcome = plan(settings, nodes, pods)
    assert thresholds(policy) == {25.0}
    assert outcome.emptied == ["a"]
    static = gpu_threshold_run(settings, nodes, pods, 75.0)
    assert static.gain == 0 and len(static.evicted) == 2


@pytest.mark.parametrize("case, pods", [
    ("a pod that did not opt in", pods_on("a", 1) + pods_on("a2", 1, movable=False)),
    ("a pod younger than minPodAge", pods_on("a", 2, started="2027-01-15T07:59:00Z")),
    ("a bare pod", pods_on("a", 2, owner="")),
    ("a DaemonSet pod", pods_on("a", 1) + pods_on("a2", 1, owner="DaemonSet")),
])
def test_no_run_when_a_pod_that_may_not_move_keeps_the_node_busy(settings, case, pods):
    nodes = [node("a"), node("b")]
    pods = [{**p, "spec": {**p["spec"], "nodeName": "a"}} for p in pods] + \
        pods_on("b", 4, movable=False)
    policy, outcome = plan(settings, nodes, pods)
    assert thresholds(policy) == {0.0}, case
    assert outcome.evicted == [] and outcome.gain == 0
    # Only age is a reason that passes: the log names the node it holds.
    young = case == "a pod younger than minPodAge"
    assert outcome.held_by_age == (["a"] if young else [])
    assert ("pods younger than minPodAge keep a from being emptied"
            in compaction_plan.describe(outcome)) == young


def test_no_run_when_the_busier_nodes_have_no_room_for_a_whole_pod(settings):
    # a: one 4-GPU pod; b and c: 5 used (3 free each): 6 GPUs free above a, but never 4 on one
    # node, so the pod would come back on a or on an empty node.
    nodes = [node(n) for n in "abcd"]
    pods = (pods_on("a", 1, gpus=4) + pods_on("b", 5, movable=False)
            + pods_on("c", 5, movable=False))
    policy, outcome = plan(settings, nodes, pods)
    assert thresholds(policy) == {0.0}
    assert outcome.gain == 0


def test_the_threshold_never_exceeds_underused_percent(settings):
    # The same state as the first test with underusedPercent 50: a (62.5%) may not be emptied.
    settings = settings.model_copy(update={"compaction": settings.compaction.model_copy(
        update={"underused_percent": 50})})
    nodes = [node(n) for n in "abcd"]
    pods = (pods_on("a", 5) + pods_on("b", 6, movable=False) + pods_on("c", 6, movable=False)
            + pods_on("d", 7, movable=False))
    policy, _ = plan(settings, nodes, pods)
    assert thresholds(policy) == {0.0}


def test_a_node_needing_more_evictions_than_the_per_node_limit_is_not_emptied(settings):
    settings = settings.model_copy(update={"compaction": settings.compaction.model_copy(
        update={"max_evictions_per_node": 2})})
    nodes = [node(n) for n in "abc"]
    pods = pods_on("a", 3) + pods_on("b", 1) + pods_on("c", 5, movable=False)
    policy, outcome = plan(settings, nodes, pods)
    # b (one pod) can go; a's three pods cannot all go in one run.
    assert thresholds(policy) == {12.5} and outcome.emptied == ["b"]


def test_a_node_that_would_lose_pods_but_cannot_be_emptied_is_left_out_of_the_run(settings):
    # a: two movable pods and one fixed (37.5%), little memory, so the descheduler visits it
    # first; b: four movable pods (50%); c, d: 6 fixed (4 GPUs free in all). At 50% a's two
    # would take half the room and neither node would come free; left out, a keeps its pods and
    # b is emptied.
    nodes = [node(n) for n in "abcd"]
    pods = (pods_on("a", 2, memory="1Gi") + pods_on("a-fixed", 1, movable=False, memory="1Gi")
            + pods_on("b", 4) + pods_on("c", 6, movable=False) + pods_on("d", 6, movable=False))
    pods = [{**p, "spec": {**p["spec"], "nodeName": p["spec"]["nodeName"].removesuffix("-fixed")}}
            for p in pods]
    policy, outcome = plan(settings, nodes, pods)
    assert thresholds(policy) == {50.0}
    assert policy["nodeSelector"] == "nvidia.com/gpu.present=true,kubernetes.io/hostname notin (a)"
    assert outcome.emptied == ["b"] and sorted(outcome.evicted) == [f"work/b-{i}" for i in range(4)]
    unhidden = gpu_threshold_run(settings, nodes, pods, 50.0)
    assert unhidden.gain == 0 and len(unhidden.evicted) == 4


def test_a_node_as_used_but_with_more_pods_counts_as_room(settings):
    # a: one movable 4-GPU pod (50%); b: four fixed 1-GPU pods (50%); c, d: full. By GPU usage
    # b is as low as a, so a run counts no room; the plan's pods threshold (a's one pod of 110)
    # puts b above it, and a's pod fills b.
    nodes = [node(n) for n in "abcd"]
    pods = (pods_on("a", 1, gpus=4) + pods_on("b", 4, movable=False)
            + pods_on("c", 8, movable=False) + pods_on("d", 8, movable=False))
    policy, outcome = plan(settings, nodes, pods)
    args = compaction_plan.plugin_args(policy, "HighNodeUtilization")
    # a's one pod requests 2 of 64 CPUs and 32 of 512 GiB.
    assert args["thresholds"] == {GPU: 50.0, "pods": 100 / 110, "cpu": 3.125, "memory": 6.25}
    assert outcome.emptied == ["a"] and outcome.evicted == ["work/a-0"]
    by_gpu = gpu_threshold_run(settings, nodes, pods, 50.0)
    assert by_gpu.evicted == [] and by_gpu.gain == 0


def cpu_separated_state() -> tuple[list[dict], list[dict]]:
    """a: five movable 1-GPU pods (62.5%, 10 of 64 CPUs); b: one fixed 4-GPU pod (50%, fewer
    pods, but 24 CPUs); c: six fixed (2 GPUs free); d: full. a's pods need b's four free GPUs,
    and only a CPU threshold puts b above."""
    nodes = [node(n) for n in "abcd"]
    pods = (pods_on("a", 5) + pods_on("b", 1, gpus=4, movable=False, cpu="24")
            + pods_on("c", 6, movable=False) + pods_on("d", 8, movable=False))
    return nodes, pods


def test_a_node_less_used_but_with_more_cpu_requested_counts_as_room(settings):
    nodes, pods = cpu_separated_state()
    policy, outcome = plan(settings, nodes, pods)
    args = compaction_plan.plugin_args(policy, "HighNodeUtilization")
    assert args["thresholds"][GPU] == 62.5 and args["thresholds"]["cpu"] == 15.625
    assert outcome.emptied == ["a"] and len(outcome.evicted) == 5


@pytest.mark.parametrize("case", ["an opted-in pod without GPUs on a GPU node", "minPodAge 0s"])
def test_no_cpu_threshold_when_it_could_evict_a_pod_without_gpus(settings, case):
    # With CPU in the thresholds, OnlyThresholdingResources would evict any pod that requests
    # CPU: only pods then separate, b stays below with a, and the run would free nothing.
    nodes, pods = cpu_separated_state()
    if case == "minPodAge 0s":
        settings = settings.model_copy(update={"compaction": settings.compaction.model_copy(
            update={"min_pod_age": "0s"})})
    else:
        pods += [pod("c-cpu-only", "c", gpus=0)]
    policy, outcome = plan(settings, nodes, pods)
    assert "cpu" not in compaction_plan.plugin_args(policy, "HighNodeUtilization")["thresholds"]
    assert outcome.gain == 0 and outcome.evicted == []



def test_compaction_with_a_share_of_nodes_scored_is_named_in_a_warning_on_every_run():
    """The plan puts each evicted pod on the node the binpack scheduler scores highest among all
    that fit; scoring a share, kube-scheduler may never look at that node."""
    [warning] = settings_of(compaction={"enabled": True},
                            scheduler={"percentageOfNodesToScore": 10}).warnings
    assert warning.startswith("gpu-platform: compaction.enabled with "
                              "scheduler.percentageOfNodesToScore 10: ")
    assert "with more than 100 it scores 10% of them" in warning
    assert "keep 100 where compaction runs (docs/concepts/compaction.md#limits)" in warning
    [adaptive] = settings_of(compaction={"enabled": True},
                             scheduler={"percentageOfNodesToScore": 0}).warnings
    assert "it scores its adaptive share of them" in adaptive
    assert settings_of(compaction={"enabled": True}).warnings == []
    assert settings_of(scheduler={"percentageOfNodesToScore": 10}).warnings == []
