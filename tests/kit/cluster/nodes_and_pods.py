"""What the integration suite creates on the local control plane to run on: fake GPU nodes (Ready,
with the platform's taints and labels and their GPUs in their status, or in a ResourceSlice on the
DRA path), nodes without GPUs, namespaces, and GPU pods, pod templates and Jobs; and where a pod
was placed."""

from __future__ import annotations

from typing import Any

from components import gpu_operator
from components.base.facts import GPU_PRESENT_LABEL
from components.gpu_operator.dra import NVIDIA_DRA_DRIVER
from components.platform.settings import StackSettings
from tests.kit.cluster.controlplane import Kube, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.harness import operator_of

GPU = "nvidia.com/gpu"

# Per GPU, what a typical GPU node offers besides: CPU cores and memory.
CPU_PER_GPU = 8
MEMORY_GIB_PER_GPU = 64
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def mark_ready(kube: Kube, node: dict, capacity: dict[str, str]) -> dict:
    """What a kubelet and the node lifecycle controller do for a new node: report its capacity
    and a Ready condition, then lift the not-ready taint the API server put on at creation."""
    reported = kube.patch_status(node, {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node: no kubelet"}],
    })
    taints = [t for t in reported["spec"].get("taints", []) if t["key"] != NOT_READY_TAINT]
    return kube.request("PATCH", kube.path("v1", "Node", name=node["metadata"]["name"]),
                        body={"spec": {"taints": taints or None}},
                        content_type="application/merge-patch+json",
                        params={"fieldManager": "node-lifecycle-controller"},
                        what=f"lift the not-ready taint of {node['metadata']['name']}")


def kubelet_labels(name: str) -> dict[str, str]:
    """The labels a kubelet registers its node with."""
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64"}


def create_node(kube: Kube, name: str) -> dict:
    return mark_ready(kube, kube.create({"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": name,
                                                      "labels": kubelet_labels(name)}}),
                      {"cpu": "16", "memory": "64Gi", "pods": "110"})


def create_gpu_node(kube: Kube, settings: StackSettings, name: str, gpus: int,
                    capacity: dict[str, str] | None = None,
                    labels: dict[str, str] | None = None) -> dict:
    """A Ready Node that advertises `gpus` GPUs in its status (the extended-resource patch the
    device plugin's kubelet would make) and carries the platform's GPU taints and labels, GPU
    Feature Discovery's nvidia.com/gpu.present=true and `labels` (as GPU Feature Discovery adds
    them); `capacity`, if given, is its whole status capacity instead."""
    node = kube.create({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {**kubelet_labels(name),
                                              GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1],
                                              **settings.gpu_nodes.labels, **(labels or {})}},
        "spec": {"taints": [t.as_manifest() for t in settings.gpu_nodes.taints]},
    })
    return mark_ready(kube, node, capacity or {
        GPU: str(gpus), "cpu": str(gpus * CPU_PER_GPU),
        "memory": f"{gpus * MEMORY_GIB_PER_GPU}Gi", "pods": "110"})


def gpu_uuid(node: str, minor: int) -> str:
    """A simulated GPU's UUID, as the driver's ResourceSlice and the DCGM exporter name it."""
    return f"GPU-{node}-{minor:04d}"


def nvidia_resource_slice(node: str, gpus: int, product: str = "NVIDIA H100 80GB HBM3") -> dict:
    """A ResourceSlice as NVIDIA's DRA driver (v0.5.0, as GPU Operator v26.7.0 runs it)
    publishes a node's whole GPUs: one pool named after the node, in one slice, each GPU
    `gpu-<minor>` with the driver's attributes and its memory. Values are made up; the shape,
    names and types are the driver's."""
    def device(minor: int) -> dict:
        return {"name": f"gpu-{minor}", "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, minor)},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "595.91.7"},
            "cudaDriverVersion": {"version": "13.2.0"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + minor:02x}:00.0"}},
            "capacity": {"memory": {"value": "81559Mi"}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"00000-{NVIDIA_DRA_DRIVER}-{node}"},
            "spec": {"driver": NVIDIA_DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [device(minor) for minor in range(gpus)]}}


def create_dra_gpu_node(kube: Kube, settings: StackSettings, name: str, gpus: int,
                        driver: Kube, labels: dict[str, str] | None = None) -> dict:
    """A Ready GPU node of the DRA path: the platform's GPU taints and labels (and `labels`),
    CPU and memory but no GPU in its status, and its GPUs in a ResourceSlice that `driver`
    (NVIDIA's driver's identity) publishes."""
    node = create_gpu_node(kube, settings, name, gpus, labels=labels, capacity={
        "cpu": str(gpus * CPU_PER_GPU), "memory": f"{gpus * MEMORY_GIB_PER_GPU}Gi",
        "pods": "110"})
    driver.create(nvidia_resource_slice(name, gpus))
    return node


def pod(name: str, namespace: str, **spec: Any) -> dict:
    """A pod whose requests scale with its GPUs (CPU and memory as a GPU job asks for them);
    with GPUs it tolerates the GPU taints. `spec`: the arguments of `pod_spec`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": pod_spec(**spec)}


def pod_template(labels: dict[str, str], **spec: Any) -> dict:
    """The pod of `pod` as a workload's template: labelled for its selector, named by its
    controller."""
    return {"metadata": {"labels": labels}, "spec": pod_spec(**spec)}


# A Job whose pods checkpoint and resume: a pod that an eviction ends (the API server marks it
# with the DisruptionTarget condition) is replaced without counting against backoffLimit, which
# is what makes a batch Job safe to opt in to compaction (docs/concepts/compaction.md).
RESUME_AFTER_EVICTION = {"rules": [{"action": "Ignore",
                                    "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def job(name: str, namespace: str, template: dict, *, resumes_after_eviction: bool = False,
        **spec: Any) -> dict:
    """A Job of `template`'s pods that is not retried on failure (`spec`: further Job spec
    fields, such as completions and parallelism)."""
    template["spec"]["restartPolicy"] = "Never"
    spec = {"backoffLimit": 0, **spec, "template": template}
    if resumes_after_eviction:
        spec["podFailurePolicy"] = RESUME_AFTER_EVICTION
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pod_spec(*, gpus: int = 0, scheduler: str | None = None,
             settings: StackSettings | None = None, cpu: str | None = None,
             memory: str | None = None, node_name: str | None = None) -> dict:
    requests_ = {"cpu": cpu or (f"{gpus * CPU_PER_GPU // 2}" if gpus else "100m"),
                 "memory": memory or (f"{gpus * MEMORY_GIB_PER_GPU // 2}Gi" if gpus else "128Mi")}
    limits = {}
    if gpus:
        requests_[GPU] = limits[GPU] = str(gpus)
    spec: dict = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                  "resources": {"requests": requests_,
                                                **({"limits": limits} if limits else {})}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if gpus and settings is not None:
        spec["tolerations"] = gpu_operator.gpu_node_tolerations(operator_of(settings))
    if node_name:
        spec["nodeName"] = node_name
    return spec


def lands(kube: Kube, namespace: str, name: str, timeout: float = 60.0) -> str:
    """The node a pod that waits is bound to once its scheduler places it."""
    return wait_until(lambda: kube.get("v1", "Pod", name, namespace)["spec"].get("nodeName"),
                      f"{namespace}/{name} to be bound", timeout=timeout, interval=0.2)


def placement(kube: Kube, namespace: str, name: str, timeout: float = 30.0,
              poll: float = 0.1) -> str | None:
    """The node the pod was bound to, or None once its scheduler reports it unschedulable."""
    def decided():
        current = kube.get("v1", "Pod", name, namespace)
        if current["spec"].get("nodeName"):
            return ("bound", current["spec"]["nodeName"])
        for condition in current.get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return ("unschedulable", None)
        return None
    return wait_until(decided, f"pod {namespace}/{name} to be bound or found unschedulable",
                      timeout=timeout, interval=poll)[1]


def ensure_namespace(kube: Kube, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
               TEST_MANAGER)
