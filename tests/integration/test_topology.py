"""Jobs that span nodes, on a real control plane: the real Kueue with the Topology and flavor the
program declares for `teams.topology`, the binpack scheduler as declared, OPA behind the declared
webhooks, a real kube-controller-manager running the Jobs, and a fake kubelet.

Seven GPU nodes of 8 GPUs in two racks, four in rack-a and three in rack-b; one team whose quota
covers them all, so that only the topology decides where a gang may go."""

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from components.base.facts import GPU_RESOURCE
from tests.kit.cluster.controlplane import ApiError, Kube, wait_until
from tests.kit.cluster.kueue import API_VERSION, is_active
from tests.kit.cluster.nodes_and_pods import create_gpu_node, job, pod, pod_template
from tests.kit.cluster.running_platform import run_platform
from tests.kit.stacks import with_changes

TEAM = "research"
RACK_LABEL = "example.com/rack"
RACKS = {"rack-a": ("a-1", "a-2", "a-3", "a-4"), "rack-b": ("b-1", "b-2", "b-3")}
RACK_OF = {node: rack for rack, nodes in RACKS.items() for node in nodes}
STACK = with_changes(
    gpuNodes={"names": list(RACK_OF)},
    admission={"replicas": 2},
    teams={"enabled": True, "waitForPodsReady": "60s",
           "topology": {"levels": [RACK_LABEL]},
           "teams": [{"name": TEAM, "namespaces": [TEAM],
                      "quota": {"gpu": {GPU_RESOURCE: 8 * len(RACK_OF)}}}]})
# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SCHEDULER = "gpu-binpack-scheduler"    # the default `scheduler.name`, which STACK keeps


@pytest.fixture(scope="module")
def kube(control_plane) -> Iterator[Kube]:
    cp, kube = control_plane, control_plane.admin
    with ExitStack() as stack:
        running = run_platform(stack, cp, STACK)
        for node, rack in RACK_OF.items():
            create_gpu_node(kube, running.settings, node, gpus=8, labels={RACK_LABEL: rack})
        wait_until(lambda: active(kube), "the team's ClusterQueue to be active", timeout=60)
        yield kube


def active(kube: Kube) -> bool:
    return is_active(kube.get(API_VERSION, "ClusterQueue", TEAM))


def gang(name: str, pods: int, gpus: int, annotations: dict[str, str] | None = None,
         rack: str | None = None) -> dict:
    """A Job of `pods` pods of `gpus` GPUs on the binpack scheduler, naming no queue; with
    `rack`, its pods select that rack's nodes."""
    template = pod_template({"app": name}, gpus=gpus)
    template["metadata"]["annotations"] = annotations or {}
    template["spec"]["schedulerName"] = SCHEDULER
    if rack:
        template["spec"]["nodeSelector"] = {RACK_LABEL: rack}
    return job(name, TEAM, template, parallelism=pods, completions=pods)


def nodes_of(kube: Kube, name: str) -> list[str]:
    """The nodes the job's pods run on."""
    return sorted(p["spec"]["nodeName"]
                  for p in kube.list("v1", "Pod", TEAM, labelSelector=f"job-name={name}")
                  if p.get("status", {}).get("phase") == "Running")


def admitted(kube: Kube, name: str) -> bool:
    for workload in kube.list(API_VERSION, "Workload", TEAM):
        if any(ref["name"] == name for ref in workload["metadata"].get("ownerReferences", [])):
            return any(c["type"] == "Admitted" and c["status"] == "True"
                       for c in workload.get("status", {}).get("conditions", []))
    return False


def finish(kube: Kube, *names: str) -> None:
    for name in names:
        kube.delete("batch/v1", "Job", name, TEAM, propagation="Background")
    wait_until(lambda: not any(kube.list("v1", "Pod", TEAM, labelSelector=f"job-name={n}")
                               for n in names), "the jobs' pods to be gone", timeout=60)


def test_single_gpu_work_still_packs_onto_the_busiest_node(kube):
    kube.create(gang("first", pods=1, gpus=2))
    (busiest,) = wait_until(lambda: nodes_of(kube, "first"), "the first job to run", timeout=60)
    kube.create(gang("second", pods=1, gpus=1))
    wait_until(lambda: nodes_of(kube, "second"), "the second job to run", timeout=60)
    assert nodes_of(kube, "second") == [busiest]
    finish(kube, "first", "second")


def test_a_gang_that_requires_a_rack_waits_until_one_rack_holds_it_then_lands_there(kube):
    # One GPU taken on a node of rack-a: no rack has four free nodes, though six are free.
    kube.create(gang("blocker", pods=1, gpus=1, rack="rack-a"))
    wait_until(lambda: nodes_of(kube, "blocker"), "the blocker to run", timeout=60)
    kube.create(gang("gang", pods=4, gpus=8, annotations={REQUIRED: RACK_LABEL}))
    with pytest.raises(TimeoutError):
        wait_until(lambda: admitted(kube, "gang"), "the gang to be admitted", timeout=15)
    assert nodes_of(kube, "gang") == []
    finish(kube, "blocker")
    wait_until(lambda: len(nodes_of(kube, "gang")) == 4, "the gang to run", timeout=90)
    assert {RACK_OF[node] for node in nodes_of(kube, "gang")} == {"rack-a"}
    assert len(set(nodes_of(kube, "gang"))) == 4
    finish(kube, "gang")


def test_a_gang_that_prefers_a_rack_runs_now_in_the_fewest_racks(kube):
    kube.create(gang("blocker", pods=1, gpus=1, rack="rack-a"))
    wait_until(lambda: nodes_of(kube, "blocker"), "the blocker to run", timeout=60)
    kube.create(gang("gang", pods=4, gpus=8, annotations={PREFERRED: RACK_LABEL}))
    wait_until(lambda: len(nodes_of(kube, "gang")) == 4, "the gang to run", timeout=90)
    # No rack has four free nodes: three in one rack and one in the other.
    racks = sorted(RACK_OF[node] for node in nodes_of(kube, "gang"))
    assert sorted(racks.count(rack) for rack in set(racks)) == [1, 3]
    finish(kube, "blocker", "gang")


def test_a_held_gpu_pod_keeps_the_node_selection_kueue_placed_it_by(kube):
    # Nine GPUs fit on no node: Kueue holds the pod at its gate.
    held = pod("held", TEAM, gpus=9, scheduler=SCHEDULER)
    created = kube.create(held)
    assert "kueue.x-k8s.io/admission" in [g["name"] for g in created["spec"]["schedulingGates"]]
    with pytest.raises(ApiError) as refused:
        kube.merge_patch("v1", "Pod", "held", {"spec": {"nodeSelector": {RACK_LABEL: "rack-b"}}},
                         TEAM)
    assert refused.value.status == 403
    assert ('pod "research/held": its spec.nodeSelector changed while Kueue holds it for team '
            '"research"') in refused.value.message
    kube.delete("v1", "Pod", "held", TEAM)
