"""Reservation by attrition on a busy cluster, with the binpack scheduler as the program deploys
it and the declared reservation run (its ClusterRole, its ConfigMap's modules): a whole-node pod
that waited gets the node that will free soonest; a pod that would have taken the room there
goes elsewhere or waits; the whole-node pod lands once the node empties, and the node is
released; an expired reservation releases the node; the cap holds; a pod no node can hold is
told so; a pod that ends before the reserved node empties uses its free GPUs meanwhile, and one
that would outlast it goes elsewhere. Nothing is evicted at any step.

Pods bound by name make the busy starting state (no kubelet: a bound pod holds its GPUs until
it is deleted, which is how its end is played)."""

import time

import pytest

from components.base.facts import GPU_RESOURCE
from components.base.gpu_count import pod_gpus
from components.base.kube_api import format_time
from components.gpu_reservation import ENDED_ANNOTATION, TAINT_KEY, UNTIL_ANNOTATION
from tests.kit.cluster.controlplane import wait_until
from tests.kit.cluster.fake_kubelet import patch_pod_status
from tests.kit.cluster.nodes_and_pods import (
    create_gpu_node,
    ensure_namespace,
    lands,
    placement,
    pod,
)
from tests.kit.cluster.reservation_run import (
    apply_reservation,
    declared_reservation,
    reservation_run,
    reservation_settings,
)

NAMESPACE = "batch"
# GPUs in use on each node at the start: no node has 8 free, and only gpu-b has 4.
BUSY = {"gpu-a": 6, "gpu-b": 2, "gpu-c": 5, "gpu-d": 7}


@pytest.fixture(scope="module")
def cluster(control_plane_with_schedulers, example_settings):
    cp = control_plane_with_schedulers
    ensure_namespace(cp.admin, NAMESPACE)
    for name, used in BUSY.items():
        create_gpu_node(cp.admin, example_settings, name, gpus=8)
        for index in range(used):
            cp.admin.create(pod(f"{name}-{index}", NAMESPACE, gpus=1, settings=example_settings,
                                node_name=name))
    return cp


@pytest.fixture(scope="module")
def settings(example_settings):
    # Runs are started by the test: no minute-long wait between them.
    return reservation_settings(example_settings, wait_before="0s")


def run(cp, settings) -> str:
    objects = declared_reservation(settings)
    apply_reservation(cp, objects)
    return reservation_run(cp, objects, settings)


def gpu_pod(cp, settings, name: str, gpus: int, limit: int | None = None) -> dict:
    """A GPU pod of the binpack scheduler; `limit`: its activeDeadlineSeconds."""
    obj = pod(name, NAMESPACE, gpus=gpus, settings=settings, scheduler=settings.scheduler.name)
    if limit:
        obj["spec"]["activeDeadlineSeconds"] = limit
    return cp.admin.create(obj)


def waits(cp, name: str) -> None:
    assert placement(cp.admin, NAMESPACE, name) is None, f"{name} was placed"


def reservation(cp, node: str) -> str | None:
    taints = cp.admin.get("v1", "Node", node)["spec"].get("taints") or []
    return next((t["value"] for t in taints if t["key"] == TAINT_KEY), None)


def reasons(cp, name: str) -> list[str]:
    return [e["reason"] for e in cp.admin.list("events.k8s.io/v1", "Event", NAMESPACE)
            if e["regarding"]["name"] == name]


def end(cp, node: str) -> None:
    for p in cp.admin.list("v1", "Pod", NAMESPACE):
        if p["spec"].get("nodeName") == node:
            cp.admin.delete("v1", "Pod", p["metadata"]["name"], NAMESPACE)


def test_the_node_freeing_soonest_is_kept_for_the_whole_node_pod_until_it_lands(cluster,
                                                                              settings):
    big = gpu_pod(cluster, settings, "whole-node", 8)
    waits(cluster, "whole-node")
    printed = run(cluster, settings)
    assert "gpu-b: reserved for batch/whole-node (2 of its 8 GPUs in use)" in printed
    assert reservation(cluster, "gpu-b") == big["metadata"]["uid"]
    assert {"key": TAINT_KEY, "operator": "Equal", "value": big["metadata"]["uid"],
            "effect": "NoSchedule"} in cluster.admin.get(
        "v1", "Pod", "whole-node", NAMESPACE)["spec"]["tolerations"]
    assert "GpuNodeReserved" in reasons(cluster, "whole-node")

    # Only gpu-b has room for 4 GPUs: without the reservation the 4-GPU pod would land there.
    gpu_pod(cluster, settings, "four", 4)
    waits(cluster, "four")
    gpu_pod(cluster, settings, "one", 1)
    assert placement(cluster.admin, NAMESPACE, "one") in {"gpu-a", "gpu-c", "gpu-d"}

    end(cluster, "gpu-b")
    assert lands(cluster.admin, NAMESPACE, "whole-node") == "gpu-b"
    assert "gpu-b: released, batch/whole-node landed or is gone" in run(cluster, settings)
    assert reservation(cluster, "gpu-b") is None
    assert len(cluster.admin.list("v1", "Pod", NAMESPACE)) == sum(BUSY.values()) - 2 + 3, \
        "a pod was evicted"


def test_an_expired_reservation_releases_the_node_and_the_pod_waits_again(cluster, settings):
    brief = reservation_settings(settings, expire_after="1s")
    gpu_pod(cluster, brief, "expires", 8)
    waits(cluster, "expires")
    assert "reserved for batch/expires" in run(cluster, brief)
    reserved = next(n for n in BUSY if reservation(cluster, n))
    wait_until(lambda: "expired after 1s" in run(cluster, brief), "the reservation to expire",
               timeout=30, interval=1)
    assert reservation(cluster, reserved) is None
    current = cluster.admin.get("v1", "Pod", "expires", NAMESPACE)
    assert ENDED_ANNOTATION in current["metadata"]["annotations"]
    assert "GpuNodeReservationEnded" in reasons(cluster, "expires")
    cluster.admin.delete("v1", "Pod", "expires", NAMESPACE)
    run(cluster, brief)


def test_at_most_max_nodes_are_reserved_and_a_pod_no_node_holds_is_told(cluster, settings):
    capped = reservation_settings(settings, max_nodes=1)
    for name in ("first", "second"):
        gpu_pod(cluster, capped, name, 8)
        waits(cluster, name)
    gpu_pod(cluster, capped, "sixteen", 16)
    waits(cluster, "sixteen")
    printed = run(cluster, capped)
    assert printed.count("reserved for") == 1, printed
    assert "batch/sixteen: not reserved, no GPU node holds 16 GPUs" in printed
    assert "GpuNodeTooSmall" in reasons(cluster, "sixteen")
    held = [n for n in BUSY if reservation(cluster, n)]
    assert len(held) == 1
    node = cluster.admin.get("v1", "Node", held[0])
    assert UNTIL_ANNOTATION in node["metadata"]["annotations"]


def gpus_in_use(cp, node: str) -> int:
    return sum(pod_gpus(p, GPU_RESOURCE) for p in cp.admin.list("v1", "Pod", NAMESPACE)
               if p["spec"].get("nodeName") == node)


def test_a_pod_that_ends_before_the_reserved_node_empties_uses_it_one_that_would_not_goes_elsewhere(
        cluster, settings):
    """gpu-e's six pods all end within 2 hours (activeDeadlineSeconds, started now) and every
    other node is full: gpu-e is kept for the whole-node pod; of two 2-GPU pods, the one whose
    limit is 1 hour is let onto gpu-e's free GPUs, the one whose limit is 3 hours waits and
    lands on the first other node with room. The whole-node pod still lands on gpu-e once its
    pods end."""
    for leftover in cluster.admin.list("v1", "Pod", NAMESPACE):    # earlier tests' waiting pods
        if not leftover["spec"].get("nodeName"):
            cluster.admin.delete("v1", "Pod", leftover["metadata"]["name"], NAMESPACE)
    run(cluster, settings)
    assert not any(reservation(cluster, n) for n in BUSY)
    for name in BUSY:
        for index in range(8 - gpus_in_use(cluster, name)):
            cluster.admin.create(pod(f"{name}-fill-{index}", NAMESPACE, gpus=1,
                                     settings=settings, node_name=name))
    create_gpu_node(cluster.admin, settings, "gpu-e", gpus=8)
    for index in range(6):
        bound = pod(f"gpu-e-{index}", NAMESPACE, gpus=1, settings=settings, node_name="gpu-e")
        bound["spec"]["activeDeadlineSeconds"] = 7200
        patch_pod_status(cluster.admin, cluster.admin.create(bound),
                         {"phase": "Running", "startTime": format_time(time.time())})

    big = gpu_pod(cluster, settings, "kept-for", 8)
    waits(cluster, "kept-for")
    assert "gpu-e: reserved for batch/kept-for" in run(cluster, settings)
    gpu_pod(cluster, settings, "three-hours", 2, limit=3 * 3600)
    waits(cluster, "three-hours")
    gpu_pod(cluster, settings, "one-hour", 2, limit=3600)
    waits(cluster, "one-hour")
    printed = run(cluster, settings)
    assert "gpu-e: backfilled with batch/one-hour" in printed, printed
    assert "three-hours" not in printed
    assert lands(cluster.admin, NAMESPACE, "one-hour") == "gpu-e"
    assert "GpuNodeBackfilled" in reasons(cluster, "one-hour")
    assert reservation(cluster, "gpu-e") == big["metadata"]["uid"]
    waits(cluster, "three-hours")
    assert TAINT_KEY not in {t.get("key") for t in cluster.admin.get(
        "v1", "Pod", "three-hours", NAMESPACE)["spec"]["tolerations"]}

    for index in range(2):
        cluster.admin.delete("v1", "Pod", f"gpu-a-{index}", NAMESPACE)
    assert lands(cluster.admin, NAMESPACE, "three-hours") == "gpu-a"
    end(cluster, "gpu-e")
    assert lands(cluster.admin, NAMESPACE, "kept-for") == "gpu-e"
    assert "gpu-e: released, batch/kept-for landed or is gone" in run(cluster, settings)
