"""What `playground status` prints: each GPU node's GPUs, who holds them, and what waits and why.
Pure functions of the objects the API server lists."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from components.base.facts import GPU_PRESENT_LABEL, GPU_RESOURCE
from components.gpu_operator.dra import NVIDIA_DRA_DRIVER

ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class DeviceView:
    """The DRA path's GPUs, which no node status lists: NVIDIA's driver's ResourceSlices, and
    the ResourceClaims that allocate them (the scheduler's for pods asking for nvidia.com/gpu,
    and claims of the pods' own)."""
    slices: list[dict]
    claims: list[dict]

    def node_gpus(self, node: str) -> int:
        return sum(len(s["spec"].get("devices") or []) for s in self.slices
                   if s["spec"]["driver"] == NVIDIA_DRA_DRIVER
                   and s["spec"].get("nodeName") == node)

    def held(self) -> Counter[tuple[str, str]]:
        """The GPUs allocated to each pod (namespace, name) through the claims reserved for
        it."""
        held: Counter[tuple[str, str]] = Counter()
        for claim in self.claims:
            status = claim.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            gpus = sum(1 for r in results if r["driver"] == NVIDIA_DRA_DRIVER)
            for consumer in status.get("reservedFor") or []:
                if consumer.get("resource") == "pods":
                    held[(claim["metadata"]["namespace"], consumer["name"])] += gpus
        return held


def node_gpus(node: dict, devices: DeviceView | None) -> int:
    """The GPUs a node offers: in its status, or on the DRA path, in its ResourceSlices."""
    if devices is not None:
        return devices.node_gpus(node["metadata"]["name"])
    return int(node["status"].get("allocatable", {}).get(GPU_RESOURCE, 0))


def pod_gpus(pod: dict) -> int:
    """The GPUs a pod's containers ask for (limits, which the API server copies to requests)."""
    total = 0
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources", {})
        asked = resources.get("limits", {}).get(GPU_RESOURCE,
                                                resources.get("requests", {}).get(GPU_RESOURCE))
        total += int(asked or 0)
    return total


def _reason(conditions: list[dict], kind: str) -> str | None:
    for condition in conditions:
        if condition["type"] == kind and condition["status"] == "False":
            return condition.get("message") or condition.get("reason") or "not yet"
    return None


def _owner(obj: dict) -> str:
    owners = obj["metadata"].get("ownerReferences") or []
    return f" ({owners[0]['kind']} {owners[0]['name']})" if owners else ""


def render(nodes: list[dict], pods: list[dict], workloads: list[dict],
           topology_levels: list[str], devices: DeviceView | None = None) -> str:
    """Each GPU node (its topology domains, GPUs in use and free) with the pods holding its
    GPUs; then the team workloads that wait for quota (Kueue's reason) and the GPU pods no
    scheduler could place yet (the scheduler's reason). `devices`: on the DRA path, where the
    GPUs are listed and allocated."""
    live = [p for p in pods if p["status"].get("phase") not in ENDED
            and not p["metadata"].get("deletionTimestamp")]
    held = devices.held() if devices is not None else Counter(
        {(p["metadata"]["namespace"], p["metadata"]["name"]): pod_gpus(p) for p in live})

    def gpus(pod: dict) -> int:
        return held[(pod["metadata"]["namespace"], pod["metadata"]["name"])]

    gpu_nodes = sorted((n for n in nodes
                        if n["metadata"].get("labels", {}).get(GPU_PRESENT_LABEL[0]) ==
                        GPU_PRESENT_LABEL[1]), key=lambda n: n["metadata"]["name"])
    lines = ["GPU nodes:"]
    for node in gpu_nodes:
        name = node["metadata"]["name"]
        capacity = node_gpus(node, devices)
        holders = sorted((p for p in live if p["spec"].get("nodeName") == name and gpus(p)),
                         key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
        used = sum(gpus(p) for p in holders)
        labels = node["metadata"].get("labels", {})
        domains = " ".join(labels[level] for level in topology_levels if level in labels)
        lines.append(f"  {name:<20} {used}/{capacity} GPUs in use, {capacity - used} free"
                     + (f"  [{domains}]" if domains else ""))
        lines += [f"    {p['metadata']['namespace']}/{p['metadata']['name']}: {gpus(p)} "
                  f"GPU{'s' if gpus(p) > 1 else ''}{_owner(p)}" for p in holders]
    waiting = []
    for workload in sorted(workloads, key=lambda w: (w["metadata"]["namespace"],
                                                     w["metadata"]["name"])):
        conditions = workload.get("status", {}).get("conditions", [])
        if any(c["type"] == "Finished" and c["status"] == "True" for c in conditions):
            continue
        if reason := _reason(conditions, "QuotaReserved"):
            waiting.append(f"  {workload['metadata']['namespace']}/"
                           f"{workload['metadata']['name']}{_owner(workload)}: waits for "
                           f"quota: {reason}")
    for pod in sorted(live, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        asks = pod_gpus(pod) or pod["spec"].get("resourceClaims")
        if pod["spec"].get("nodeName") or not asks or pod["spec"].get("schedulingGates"):
            continue    # placed, no GPU, or held by Kueue (its workload is listed above)
        reason = _reason(pod["status"].get("conditions", []), "PodScheduled") or "not yet"
        waiting.append(f"  {pod['metadata']['namespace']}/{pod['metadata']['name']}"
                       f"{_owner(pod)}: not placed: {reason}")
    lines += ["Waiting:", *(waiting or ["  nothing"])]
    return "\n".join(lines)
