"""A reservation run at fleet size: it reads every page of a list, keeps only the fields it
reads (and plans from them as from whole objects), and plans for 5,000 nodes well within its
run deadline."""

import gc
import json
import time

import pytest

from components.base import gpu_count, kube_api
from components.base.gpu_count import DeviceView
from components.gpu_reservation import TAINT_KEY, actor_config
from components.gpu_reservation.actor import gpu_reservation as run
from components.gpu_reservation.manifests import (
    POD_ANNOTATION,
    RUN_DEADLINE_SECONDS,
    UNTIL_ANNOTATION,
)
from tests.unit.test_reservation import reservation_inputs

NOW = 1.8e9
CREATED, STARTED = kube_api.format_time(NOW - 7200), kube_api.format_time(NOW - 3600)
DRIVER = "gpu.nvidia.com"
CONFIG = actor_config(reservation_inputs())
MANAGED = [{"manager": "kubelet", "fieldsV1": {f"f:{k}": {} for k in range(20)}}]


def fleet(nodes: int, dra: bool) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """`nodes` 8-GPU nodes with 7 running 1-GPU pods each (every tenth node's pods serve,
    the others end within 10 hours), a tenth as many waiting pods (one in five asks for 8
    GPUs), the first node reserved; objects as the API server lists them, managed fields and
    node images included."""
    config = CONFIG
    node_list, pods, slices, claims = [], [], [], []
    for i in range(nodes):
        name = f"gpu-{i}"
        annotations = {POD_ANNOTATION: "ml/w-0", UNTIL_ANNOTATION: kube_api.format_time(
            NOW + 3600)} if i == 0 else {}
        taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}] + (
            [{"key": TAINT_KEY, "value": "w-0", "effect": "NoSchedule"}] if i == 0 else [])
        node_list.append({"metadata": {"name": name, "annotations": annotations,
                                       "labels": {"zone": "a"}, "managedFields": MANAGED},
                          "spec": {"taints": taints},
                          "status": {"allocatable": {} if dra else {"nvidia.com/gpu": "8"},
                                     "images": [{"names": [f"image-{k}"]} for k in range(20)]}})
        if dra:
            slices.append({"metadata": {"name": f"{name}-slice"},
                           "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name},
                                    "devices": [{"name": f"gpu-{d}"} for d in range(8)]}})
        for j in range(7):
            pod = f"p-{i}-{j}"
            owner = "ReplicaSet" if i % 10 == 0 else "Job"
            pods.append(gpu_pod(config, pod, 1, dra, nodeName=name, ownerKind=owner,
                                deadline=36000 - 60 * (i % 50)))
            if dra:
                claims.append(claim(pod, 1, {"allocation": {"devices": {"results": [
                    {"driver": DRIVER, "pool": name, "device": f"gpu-{j}"}]}},
                    "reservedFor": [{"resource": "pods", "name": pod}]}))
    for k in range(max(1, nodes // 10)):
        gpus = 8 if k % 5 == 0 else 2
        pods.append(gpu_pod(config, f"w-{k}", gpus, dra, deadline=1800 * (k % 3)))
        if dra:
            claims.append(claim(f"w-{k}", gpus, {}))
    return node_list, pods, slices, claims


def gpu_pod(config, name: str, gpus: int, dra: bool, nodeName: str = "",
            ownerKind: str = "Job", deadline: int = 0) -> dict:
    resources = {} if dra else {"nvidia.com/gpu": str(gpus)}
    spec: dict = {"schedulerName": config["schedulerName"],
                  "containers": [{"name": "main", "image": "train:1", "env": [{"name": "A"}],
                                  "resources": {"limits": resources, "requests": resources}}],
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                  "volumes": [{"name": "data"}]}
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    status: dict = {"phase": "Running" if nodeName else "Pending",
                    "startTime": STARTED} if nodeName else {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                            "reason": "Unschedulable", "message": "no room"}]}
    if nodeName:
        spec["nodeName"] = nodeName
    if dra:
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return {"metadata": {"name": name, "namespace": "ml", "uid": name, "labels": {"a": "b"},
                         "creationTimestamp": CREATED,
                         "managedFields": MANAGED,
                         "ownerReferences": [{"kind": ownerKind, "name": "o", "uid": "u",
                                              "controller": True}]},
            "spec": spec, "status": status}


def claim(pod: str, gpus: int, status: dict) -> dict:
    return {"metadata": {"name": f"{pod}-gpu", "namespace": "ml", "managedFields": MANAGED},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": DRIVER, "count": gpus}}]}}, "status": status}


class PagedApi(kube_api.Api):
    """An API server that lists `objects[kind]` a page at a time, as JSON text."""

    def __init__(self, objects: dict[str, list[dict]]):
        self.objects, self.requests = objects, []
        self.PAGE = 7

    def call(self, method, path, body=None, content_type="application/json"):
        self.requests.append(path)
        items = next(v for k, v in self.objects.items() if f"/{k}?" in path)
        start = int(path.split("continue=")[1]) if "continue=" in path else 0
        end = start + self.PAGE
        return 200, json.loads(json.dumps({
            "metadata": {"continue": str(end) if end < len(items) else ""},
            "items": items[start:end]}))


def config_for(dra: bool) -> run.Config:
    dra_path = run.Dra(driver=DRIVER, deviceClasses=[DRIVER]) if dra else None
    return run.Config(**{**CONFIG, "dra": dra_path})


@pytest.mark.parametrize("dra", [False, True], ids=["device plugin", "DRA"])
def test_the_plan_from_the_fields_a_run_keeps_is_the_plan_from_whole_objects(dra):
    nodes, pods, slices, claims = fleet(40, dra)
    config = config_for(dra)
    api = PagedApi({"nodes": nodes, "pods": pods, "resourceslices": slices,
                    "resourceclaims": claims})
    kept_nodes, kept_pods, kept_devices = gpu_count.observe(api, DRIVER if dra else None)
    assert len(kept_pods) == len(pods) and len(kept_nodes) == len(nodes)
    assert sum("continue=" in path for path in api.requests) >= len(pods) // api.PAGE
    assert not any("managedFields" in p["metadata"] for p in kept_pods)
    assert not any("images" in n["status"] for n in kept_nodes)

    def planned(nodes, pods, devices):
        waiting = run.waiting_pods(config, pods, devices, run.created_at)
        views = run.node_views(config, nodes, pods, devices, run.started_at)
        return run.plan(config, views, waiting, NOW)
    whole = planned(nodes, pods, DeviceView(slices, claims, DRIVER) if dra else None)
    assert {s.action for s in whole} >= {"reserve"}
    assert planned(kept_nodes, kept_pods, kept_devices) == whole


def test_a_run_plans_for_5000_nodes_well_within_its_deadline():
    """35,500 pods: planning grew with nodes times pods once (75 s of CPU on the device plugin
    path, 115 s on DRA); it must leave the run's deadline to the API calls. On the DRA path,
    which counts pods per node as the other does and GPUs from slices and claims besides."""
    dra = True
    gc.disable()    # building 100,000 objects would run the collector over and over
    try:
        nodes, pods, slices, claims = fleet(5000, dra)
    finally:
        gc.enable()
    config = config_for(dra)
    devices = DeviceView(slices, claims, DRIVER) if dra else None
    started = time.process_time()
    waiting = run.waiting_pods(config, pods, devices, run.created_at)
    views = run.node_views(config, nodes, pods, devices, run.started_at)
    steps = run.plan(config, views, waiting, NOW)
    took = time.process_time() - started
    print(f"\nplanning for 5,000 nodes on the DRA path: {took:.2f} s")
    assert steps and took < RUN_DEADLINE_SECONDS / 8
