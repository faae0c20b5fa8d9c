"""Workloads as production runs them, placed by the binpack scheduler (the configuration the
program renders, from its ServiceAccount) and by a kube-scheduler with the default profile: a
Deployment behind a Service, a StatefulSet with its headless Service, a Job whose pods a headless
Service selects, replicas with their own spread and affinity rules, and a cluster of 300 nodes.
A real kube-controller-manager creates and removes the pods and a fake kubelet runs them, so each
workload runs its course; each scenario removes its workloads, pods and nodes."""

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from components.platform.settings import StackSettings
from tests.kit.cluster.controlplane import Kube, wait_until
from tests.kit.cluster.fake_kubelet import FakeKubelet, succeed, workloads_running
from tests.kit.cluster.kube_components import DEFAULT_SCHEDULER
from tests.kit.cluster.nodes_and_pods import (
    create_gpu_node,
    ensure_namespace,
    job,
    pod,
    pod_template,
)

NAMESPACE = "inference"
HOSTNAME = "kubernetes.io/hostname"
THREE_EMPTY_NODES = {"node-a": 8, "node-b": 8, "node-c": 8}
BOUND_TIMEOUT = 60.0


@dataclass
class Cluster:
    kube: Kube
    settings: StackSettings
    kubelet: FakeKubelet
    schedulers: dict[str, str]      # run label -> schedulerName


@pytest.fixture(scope="module")
def cluster(control_plane_with_schedulers, example_settings):
    cp = control_plane_with_schedulers
    ensure_namespace(cp.admin, NAMESPACE)
    with workloads_running(cp) as kubelet:
        yield Cluster(cp.admin, example_settings, kubelet,
                      {"binpack": example_settings.scheduler.name, "default": DEFAULT_SCHEDULER})


# --- workloads ------------------------------------------------------------------------------

def gpu_template(name: str, scheduler: str, settings: StackSettings, **spec) -> dict:
    """A 1-GPU pod labelled app=`name` for `scheduler`, tolerating the platform's GPU taints;
    `spec`: further pod spec fields (affinity, topologySpreadConstraints, ...)."""
    template = pod_template({"app": name}, gpus=1, scheduler=scheduler, settings=settings)
    template["spec"] |= spec
    return template


def service(name: str, *, headless: bool = False) -> dict:
    spec: dict = {"selector": {"app": name}, "ports": [{"port": 8000}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def deployment(name: str, replicas: int, template: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": template}}


def stateful_set(name: str, replicas: int, template: dict) -> dict:
    """Pods created one at a time, each once the previous one runs (OrderedReady, the
    default)."""
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"app": name}}, "template": template}}


def indexed_job(name: str, pods: int, template: dict) -> dict:
    """All workers at once, each with a stable hostname under the headless Service `name`, as
    distributed training (and JobSet) runs them."""
    template["spec"]["subdomain"] = name
    return job(name, NAMESPACE, template, completions=pods, parallelism=pods,
               completionMode="Indexed")


Make = Callable[[str, str, StackSettings], list[dict]]    # (name, scheduler, settings) -> objects


def served_deployment(replicas: int, rule: Callable[[str], dict] = lambda name: {}) -> Make:
    """A Deployment behind a Service; `rule(name)`: further pod spec fields of its pods."""
    def make(name: str, scheduler: str, settings: StackSettings) -> list[dict]:
        template = gpu_template(name, scheduler, settings, **rule(name))
        return [service(name), deployment(name, replicas, template)]
    return make


# --- running them ---------------------------------------------------------------------------

@contextmanager
def gpu_nodes(cluster: Cluster, gpus_by_node: dict[str, int],
              labels: dict[str, dict[str, str]] | None = None) -> Iterator[None]:
    for name, gpus in gpus_by_node.items():
        create_gpu_node(cluster.kube, cluster.settings, name, gpus,
                        labels=(labels or {}).get(name))
    try:
        yield
    finally:
        for name in gpus_by_node:
            cluster.kube.delete("v1", "Node", name)


def pods_of(cluster: Cluster, name: str) -> list[dict]:
    cluster.kubelet.check()
    pods = cluster.kube.list("v1", "Pod", NAMESPACE, labelSelector=f"app={name}")
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def describe(pods: list[dict]) -> str:
    """Each pod's node, or why it has none (its PodScheduled condition)."""
    lines = []
    for p in pods:
        scheduled = next((c for c in p["status"].get("conditions", [])
                          if c["type"] == "PodScheduled"), {})
        where = p["spec"].get("nodeName") or scheduled.get("message") or "not scheduled yet"
        lines.append(f"  {p['metadata']['name']}: {where}")
    return "\n".join(lines)


@contextmanager
def running(cluster: Cluster, name: str, objects: list[dict], pods: int) -> Iterator[list[dict]]:
    """Create `objects` (a workload whose pods are labelled app=`name`, and its Service), wait
    until its `pods` pods are all bound and yield them; afterwards delete the objects and wait
    until the pods are gone, so that the next run starts on empty nodes."""
    try:
        for obj in objects:
            cluster.kube.create(obj)

        def all_bound():
            current = pods_of(cluster, name)
            bound = len(current) == pods and all(p["spec"].get("nodeName") for p in current)
            return current if bound else None
        yield wait_until(all_bound, f"{pods} pods of {name} to be bound", timeout=BOUND_TIMEOUT,
                         explain=lambda: describe(pods_of(cluster, name)))
    finally:
        for obj in objects:
            # Background: the garbage collector removes what the object owns (a Job's own
            # default would orphan its pods).
            cluster.kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                                NAMESPACE, propagation="Background")
        wait_until(lambda: not pods_of(cluster, name), f"the pods of {name} to be gone",
                   timeout=BOUND_TIMEOUT, explain=lambda: describe(pods_of(cluster, name)))


def per_node(pods: list[dict]) -> Counter:
    return Counter(p["spec"]["nodeName"] for p in pods)


def under_each_scheduler(cluster: Cluster, base: str, make: Make,
                         pods: int) -> dict[str, Counter]:
    """Pods per node of the workload `make(name, scheduler, settings)` under each scheduler in
    turn, each run removed before the next."""
    placed = {}
    for label, scheduler in cluster.schedulers.items():
        name = f"{base}-{label}"
        with running(cluster, name, make(name, scheduler, cluster.settings), pods) as bound:
            placed[label] = per_node(bound)
    return placed


def show(cluster: Cluster, title: str, placed: dict[str, Counter], started: float) -> None:
    print(f"\n{title}:")
    for label, counts in placed.items():
        nodes = ", ".join(f"{node}: {n}" for node, n in sorted(counts.items()))
        print(f"  {cluster.schedulers[label]}: {nodes}")
    print(f"  ({time.monotonic() - started:.1f}s in all)")


# --- scenarios ------------------------------------------------------------------------------

def test_deployment_replicas_behind_a_service_pack_onto_one_node(cluster):
    started = time.monotonic()
    with gpu_nodes(cluster, THREE_EMPTY_NODES):
        placed = under_each_scheduler(cluster, "web", served_deployment(6), pods=6)
    show(cluster, "Deployment of six 1-GPU replicas behind a Service, three empty 8-GPU nodes",
         placed, started)
    assert list(placed["binpack"].values()) == [6], "the binpack scheduler spread the replicas"
    assert sorted(placed["default"].values()) == [2, 2, 2]


def test_stateful_set_replicas_pack_onto_one_node(cluster):
    def make(name, scheduler, settings):
        return [service(name, headless=True),
                stateful_set(name, 6, gpu_template(name, scheduler, settings))]
    started = time.monotonic()
    with gpu_nodes(cluster, THREE_EMPTY_NODES):
        placed = under_each_scheduler(cluster, "db", make, pods=6)
    show(cluster, "StatefulSet of six 1-GPU replicas with its headless Service, three empty "
         "8-GPU nodes", placed, started)
    assert list(placed["binpack"].values()) == [6], "the binpack scheduler spread the replicas"
    assert sorted(placed["default"].values()) == [2, 2, 2]


def job_status(kube: Kube, name: str) -> dict:
    return kube.get("batch/v1", "Job", name, NAMESPACE).get("status", {})


def job_complete(kube: Kube, name: str) -> bool:
    return any(c["type"] == "Complete" and c["status"] == "True"
               for c in job_status(kube, name).get("conditions", []))


def test_job_workers_a_headless_service_selects_pack_onto_one_node_and_the_job_completes(
        cluster):
    started = time.monotonic()
    placed = {}
    with gpu_nodes(cluster, THREE_EMPTY_NODES):
        for label, scheduler in cluster.schedulers.items():
            name = f"train-{label}"
            workers = indexed_job(name, 6, gpu_template(name, scheduler, cluster.settings))
            with running(cluster, name, [service(name, headless=True), workers], pods=6) as pods:
                placed[label] = per_node(pods)
                for worker in pods:
                    succeed(cluster.kube, worker)
                # Fails the test, with the Job's status, if the Job never completes.
                wait_until(lambda name=name: job_complete(cluster.kube, name),
                           f"Job {name} to complete", timeout=BOUND_TIMEOUT,
                           explain=lambda name=name:
                           f"Job status: {job_status(cluster.kube, name)}")
    show(cluster, "Job of six 1-GPU workers (Indexed, parallelism 6) a headless Service selects, "
         "three empty 8-GPU nodes; both Jobs complete", placed, started)
    assert list(placed["binpack"].values()) == [6], "the binpack scheduler spread the workers"
    assert sorted(placed["default"].values()) == [2, 2, 2]


def spread_evenly(name: str) -> dict:
    return {"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": name}}}]}


def one_per_node(name: str) -> dict:
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": name}}}]}}}


@pytest.mark.parametrize("rule, what, replicas, expected", [
    (spread_evenly, "a topology spread constraint (maxSkew 1, DoNotSchedule)", 6, [2, 2, 2]),
    (one_per_node, "a required pod anti-affinity", 3, [1, 1, 1]),
], ids=["topology-spread-max-skew-1", "required-pod-anti-affinity"])
def test_the_users_hard_spread_rules_still_spread_under_binpack(cluster, rule, what, replicas,
                                                                expected):
    started = time.monotonic()
    with gpu_nodes(cluster, THREE_EMPTY_NODES):
        placed = under_each_scheduler(cluster, "spread", served_deployment(replicas, rule),
                                      pods=replicas)
    show(cluster, f"Deployment of {replicas} 1-GPU replicas with {what} on {HOSTNAME}, three "
         "empty 8-GPU nodes", placed, started)
    assert sorted(placed["binpack"].values()) == expected
    assert sorted(placed["default"].values()) == expected


PRODUCT = "nvidia.com/gpu.product"    # the model label GPU Feature Discovery sets
H100 = "NVIDIA-H100-80GB-HBM3"


def test_required_node_affinity_keeps_replicas_on_matching_nodes_packed(cluster):
    products = {"node-a": "NVIDIA-A100-SXM4-80GB", "node-b": H100, "node-c": H100}
    on_h100 = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": PRODUCT, "operator": "In", "values": [H100]}]}]}}}}
    started = time.monotonic()
    with gpu_nodes(cluster, THREE_EMPTY_NODES,
                   labels={node: {PRODUCT: product} for node, product in products.items()}):
        placed = under_each_scheduler(cluster, "h100", served_deployment(4, lambda _: on_h100),
                                      pods=4)
    show(cluster, f"Deployment of four 1-GPU replicas requiring {PRODUCT}={H100}, one A100 and "
         "two H100 8-GPU nodes", placed, started)
    h100_nodes = {node for node, product in products.items() if product == H100}
    assert set(placed["binpack"]) <= h100_nodes and list(placed["binpack"].values()) == [4]
    assert set(placed["default"]) <= h100_nodes


def test_at_300_nodes_replicas_go_to_the_one_busy_node(cluster):
    """Above 100 nodes kube-scheduler's adaptive percentageOfNodesToScore stops scoring early
    and can miss the one busy node; the binpack profile must still find it."""
    started = time.monotonic()
    nodes = {f"node-{i:03d}": 8 for i in range(300)} | {"node-busy": 8}
    with gpu_nodes(cluster, nodes):
        created = time.monotonic() - started
        busy = pod("running-on-node-busy", NAMESPACE, gpus=4, settings=cluster.settings,
                   node_name="node-busy")
        cluster.kube.create(busy)
        try:
            placed = under_each_scheduler(cluster, "big", served_deployment(4), pods=4)
        finally:
            cluster.kube.delete("v1", "Pod", busy["metadata"]["name"], NAMESPACE)
    show(cluster, f"Deployment of four 1-GPU replicas, 300 empty 8-GPU nodes and node-busy with "
         f"4 of 8 GPUs busy (the {len(nodes)} nodes created in {created:.1f}s)", placed, started)
    assert placed["binpack"] == {"node-busy": 4}
    assert "node-busy" not in placed["default"]
