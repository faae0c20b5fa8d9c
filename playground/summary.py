"""What `playground status` prints: each GPU node's GPUs, who holds them, and what waits and why.
Pure functions of the objects the API server lists."""

from __future__ import annotations

from components.base.facts import GPU_PRESENT_LABEL, GPU_RESOURCE
from components.base.gpu_count import ENDED, DeviceView, gpus_held, node_gpus, pod_gpus


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
    held = gpus_held(live, GPU_RESOURCE, devices)

    def gpus(pod: dict) -> int:
        return held[(pod["metadata"]["namespace"], pod["metadata"]["name"])]

    gpu_nodes = sorted((n for n in nodes
                        if n["metadata"].get("labels", {}).get(GPU_PRESENT_LABEL[0]) ==
                        GPU_PRESENT_LABEL[1]), key=lambda n: n["metadata"]["name"])
    lines = ["GPU nodes:"]
    for node in gpu_nodes:
        name = node["metadata"]["name"]
        capacity = node_gpus(node, GPU_RESOURCE, devices)
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
        asks = pod_gpus(pod, GPU_RESOURCE) or pod["spec"].get("resourceClaims")
        if pod["spec"].get("nodeName") or not asks or pod["spec"].get("schedulingGates"):
            continue    # placed, no GPU, or held by Kueue (its workload is listed above)
        reason = _reason(pod["status"].get("conditions", []), "PodScheduled") or "not yet"
        waiting.append(f"  {pod['metadata']['namespace']}/{pod['metadata']['name']}"
                       f"{_owner(pod)}: not placed: {reason}")
    lines += ["Waiting:", *(waiting or ["  nothing"])]
    return "\n".join(lines)
