"""One reservation run: reserve, for GPU pods that need a whole node and have waited, the node
that will free soonest, so that it empties by attrition instead of being refilled by small pods;
release the node once the pod has landed, is gone or its reservation has expired.

A pod qualifies when the binpack scheduler could not place it (`PodScheduled` False), it asks
for at least `minGpus` GPUs, and it has waited `waitBefore` since it was created (or since its
last reservation expired). For each, oldest first, the run picks among the GPU nodes that hold
that many GPUs, are schedulable and whose taints it tolerates, the node that will free soonest:
where every GPU pod there declares a run time limit (`activeDeadlineSeconds`), the one whose
last such limit ends first; else the one with the fewest GPUs in use, then the one whose newest
GPU pod started longest ago. It taints that node `<taintKey>=<the pod's uid>:NoSchedule`, so no
new pod lands there but the waiting one, which gets the matching toleration (tolerations may be
added to a pod that waits). Pods already on the node run on: nothing is evicted.

Backfill (`backfill`): where every GPU pod on a reserved node declares when it ends, a smaller
waiting pod whose own limit ends by then gets the reservation's toleration too and may use the
node's free GPUs meanwhile: it is gone before the node would have emptied, so the pod the node
is kept for starts no later.

No reservation where a node is already free for the pod (the scheduler places it), or where no
node could ever hold it (it is reported instead). At most `maxNodes` nodes, and at most
`maxShare` of the GPU nodes, are reserved at once; a reservation ends after `expireAfter`.

Standard library only: it runs from a ConfigMap in a stock Python image (`main`); the tests
call `plan`, and the benchmark calls `run` on its simulated clock.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from components.base import kube_api
from components.base.gpu_count import (
    ENDED,
    DeviceView,
    gpus_held,
    node_gpus,
    observe,
    pod_gpus,
)
from components.base.kube_api import (
    Api,
    add_connection_arguments,
    connect,
    format_time,
    parse_time,
    patch_node,
    record,
)

RESERVED, RELEASED, UNPLACEABLE, BACKFILLED = (
    "GpuNodeReserved", "GpuNodeReservationEnded", "GpuNodeTooSmall", "GpuNodeBackfilled")


class Dra(TypedDict):
    """On the DRA path: the driver whose ResourceSlices list the GPUs, and the DeviceClasses
    of whole GPUs a claim asks for."""

    driver: str
    deviceClasses: list[str]


class Config(TypedDict):
    """What a run reads (its config.json): components/gpu_reservation/manifests.py writes it
    from the stack's settings, typed by this one definition."""

    schedulerName: str
    gpuResource: str
    dra: Dra | None
    minGpus: int
    waitBefore: str
    waitBeforeSeconds: float
    expireAfter: str
    expireAfterSeconds: float
    maxNodes: int
    maxShare: float
    backfill: bool                  # let pods that end before a reserved node empties use it
    taintKey: str                   # the reservation taint; its value is the pod's uid
    podAnnotation: str              # on the node: the pod it is reserved for (namespace/name)
    untilAnnotation: str            # on the node: when the reservation ends (RFC 3339)
    endedAnnotation: str            # on the pod: when its last reservation expired (RFC 3339)
    controller: str                 # the events' reportingController


@dataclass(frozen=True)
class NodeView:
    name: str
    gpus: int
    used: int
    schedulable: bool
    taints: tuple[dict, ...]        # all but a reservation's
    reserved_for: str | None        # the pod's uid
    reserved_pod: str | None        # namespace/name
    reserved_until: float | None
    frees_at: float | None          # every GPU pod's run time limit ends by then
    serving: int                    # GPU pods that run until scaled down (ReplicaSet's...)
    newest_start: float             # of its GPU pods (0 when none)


@dataclass(frozen=True)
class Waiting:
    uid: str
    namespace: str
    name: str
    gpus: int
    waiting_since: float
    tolerations: tuple[dict, ...]
    limit: float | None = None      # its run time limit (activeDeadlineSeconds), if declared

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Step:
    """`reserve` `node` for `pod`, `release` it (`why`), `backfill` it with `pod` (which
    ends by `until`), or `report` that `pod` fits nowhere."""

    action: str
    node: str | None
    pod: Waiting | None
    why: str
    until: float | None = None
    reserved_for: str = ""          # backfill: the uid of the pod the node is kept for


def tolerates(tolerations: tuple[dict, ...], taint: dict) -> bool:
    """Whether a pod with `tolerations` may be scheduled onto a node with `taint`."""
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") == taint["key"] and (t.get("operator") == "Exists"
                                             or t.get("value", "") == taint.get("value", "")):
            return True
    return False


def cap(config: Config, gpu_nodes: int) -> int:
    """How many nodes may be reserved at once: `maxNodes`, and `maxShare` of the GPU nodes
    (one at least, where there is a GPU node)."""
    return min(config["maxNodes"], max(1 if gpu_nodes else 0,
                                       math.floor(config["maxShare"] * gpu_nodes)))


def soonest(node: NodeView) -> tuple[float, int, int]:
    """A node's rank: the one that will free soonest first. A serving pod ends only when
    scaled down, so a node holding one frees later than any holding batch pods only."""
    return (node.frees_at if node.frees_at is not None else math.inf, node.serving,
            node.used)


def candidates(pod: Waiting, nodes: list[NodeView]) -> list[NodeView]:
    """The nodes that could be kept for `pod`: large enough, schedulable, taints tolerated."""
    return [n for n in nodes if n.gpus >= pod.gpus and n.schedulable
            and all(tolerates(pod.tolerations, t) for t in n.taints)]


def reservation_tolerated(config: Config, pod: Waiting) -> set[str]:
    """The uids of the pods whose reserved nodes `pod` may land on."""
    return {t.get("value", "") for t in pod.tolerations if t.get("key") == config["taintKey"]}


def best(nodes: list[NodeView]) -> NodeView:
    """The node that will free soonest; of equals, the one whose newest pod is oldest."""
    return min(nodes, key=lambda n: (soonest(n), n.newest_start, n.name))


def plan(config: Config, nodes: list[NodeView], waiting: list[Waiting], now: float
         ) -> list[Step]:
    """What a run does: releases first (a reservation moved to a node that will free sooner
    among them), then reservations, oldest waiting pod first, then backfill."""
    by_uid = {pod.uid: pod for pod in waiting}
    # Reservations a waiting pod was let onto by backfill: such a pod could still land on the
    # node the reservation would move to, which may empty before the pod ends.
    backfilled_into = {uid for pod in waiting for uid in reservation_tolerated(config, pod)
                       if uid != pod.uid}
    steps: list[Step] = []
    kept: set[str] = set()
    open_nodes = [n for n in nodes if n.reserved_for is None]
    for node in nodes:
        if node.reserved_for is None:
            continue
        pod = by_uid.get(node.reserved_for)
        if pod is None:
            steps.append(Step("release", node.name, None,
                              f"{node.reserved_pod or 'its pod'} landed or is gone"))
            continue
        if node.reserved_until is not None and now >= node.reserved_until:
            steps.append(Step("release", node.name, pod,
                              f"expired after {config['expireAfter']}"))
            continue
        kept.add(pod.uid)
        # Another node has come to hold fewer GPUs (or to end sooner): the reservation moves
        # there, with its end unchanged; the node it leaves takes pods again.
        better = [] if pod.uid in backfilled_into else [
            n for n in candidates(pod, open_nodes) if soonest(n) < soonest(node)]
        if better:
            target = best(better)
            open_nodes.remove(target)
            steps += [Step("release", node.name, None, f"moved to {target.name}"),
                      Step("reserve", target.name, pod,
                           f"{target.used} of its {target.gpus} GPUs in use, against "
                           f"{node.used} on {node.name}", until=node.reserved_until)]
    free_slots = cap(config, sum(1 for n in nodes if n.gpus)) - len(kept)
    for pod in sorted(waiting, key=lambda p: (p.waiting_since, p.key)):
        if (pod.uid in kept or pod.gpus < config["minGpus"]
                or now - pod.waiting_since < config["waitBeforeSeconds"]):
            continue
        if not any(n.gpus >= pod.gpus for n in nodes):
            steps.append(Step("report", None, pod, f"no GPU node holds {pod.gpus} GPUs "
                              f"(the largest holds {max((n.gpus for n in nodes), default=0)})"))
            continue
        fits = candidates(pod, open_nodes)
        if free_slots <= 0 or not fits or any(n.gpus - n.used >= pod.gpus for n in fits):
            continue
        node = best(fits)
        open_nodes.remove(node)
        free_slots -= 1
        steps.append(Step("reserve", node.name, pod,
                          f"{node.used} of its {node.gpus} GPUs in use", until=now
                          + config["expireAfterSeconds"]))
    return steps + backfills(config, nodes, waiting, steps, now) if config["backfill"] \
        else steps


def backfills(config: Config, nodes: list[NodeView], waiting: list[Waiting],
              steps: list[Step], now: float) -> list[Step]:
    """Waiting pods let onto reserved nodes whose pods all declare when they end, oldest
    first: each must end (placed now, run to its limit) by the time the node would have
    emptied, and fit the node's free GPUs less those of pods let on before that have not
    landed yet."""
    released = {s.node for s in steps if s.action == "release"}
    kept = {n.name: n.reserved_for for n in nodes
            if n.reserved_for and n.name not in released}
    kept |= {s.node: s.pod.uid for s in steps if s.action == "reserve" and s.node and s.pod}
    reserved_pods = set(kept.values())
    # A reserved node's free GPUs, when its pods end, and the taints a pod must tolerate.
    room: dict[str, tuple[int, float, tuple[dict, ...]]] = {}
    for node in nodes:
        if node.name in kept and node.frees_at is not None:
            let_on = sum(p.gpus for p in waiting if p.uid not in reserved_pods
                         and kept[node.name] in reservation_tolerated(config, p))
            room[node.name] = (node.gpus - node.used - let_on, node.frees_at, node.taints)
    found = []
    for pod in sorted(waiting, key=lambda p: (p.waiting_since, p.key)):
        if pod.uid in reserved_pods or pod.limit is None \
                or reservation_tolerated(config, pod) & reserved_pods:
            continue
        ends = now + pod.limit
        fits = [(free, name) for name, (free, frees_at, taints) in room.items()
                if free >= pod.gpus and ends <= frees_at
                and all(tolerates(pod.tolerations, t) for t in taints)]
        if not fits:
            continue
        free, name = min(fits)      # the fullest node that fits, as the scheduler packs
        _, frees_at, taints = room[name]
        room[name] = (free - pod.gpus, frees_at, taints)
        found.append(Step("backfill", name, pod, f"its limit ends by {format_time(ends)}, "
                          f"before the node's pods end at {format_time(frees_at)}",
                          until=ends, reserved_for=kept[name]))
    return found


# --- what the API server lists, as the plan sees it -------------------------------------------

def waiting_pods(config: Config, pods: list[dict], devices: DeviceView | None,
                 created: Callable[[dict], float | None]) -> list[Waiting]:
    """The binpack scheduler's GPU pods it could not place, with the GPUs each asks for, each
    waiting since it was `created` or its last reservation expired."""
    found = []
    for pod in pods:
        spec, meta, status = pod["spec"], pod["metadata"], pod["status"]
        if (spec.get("schedulerName") != config["schedulerName"] or spec.get("nodeName")
                or meta.get("deletionTimestamp") or spec.get("schedulingGates")
                or status.get("phase") in ENDED
                or not any(c["type"] == "PodScheduled" and c["status"] == "False"
                           for c in status.get("conditions") or [])):
            continue
        gpus = pod_gpus(pod, config["gpuResource"])
        if devices is not None and config["dra"] is not None:
            gpus = max(gpus, devices.asked(pod, config["dra"]["deviceClasses"], 0))
        ended = parse_time((meta.get("annotations") or {}).get(config["endedAnnotation"]))
        found.append(Waiting(meta["uid"], meta["namespace"], meta["name"], gpus,
                             max(created(pod) or 0.0, ended or 0.0),
                             tuple(spec.get("tolerations") or []),
                             spec.get("activeDeadlineSeconds")))
    return found


# Controllers whose pods run until scaled down.
SERVING_OWNERS = ("ReplicaSet", "StatefulSet", "LeaderWorkerSet")


def serves(pod: dict) -> bool:
    return any(o.get("controller") and o["kind"] in SERVING_OWNERS
               for o in pod["metadata"].get("ownerReferences") or [])


def node_views(config: Config, nodes: list[dict], pods: list[dict],
               devices: DeviceView | None,
               started: Callable[[dict], float | None]) -> list[NodeView]:
    held = gpus_held(pods, config["gpuResource"], devices)
    gpu_pods_on: dict[str, list[dict]] = {}
    for p in pods:
        if (p["spec"].get("nodeName") and p["status"].get("phase") not in ENDED
                and held[(p["metadata"]["namespace"], p["metadata"]["name"])]):
            gpu_pods_on.setdefault(p["spec"]["nodeName"], []).append(p)
    views = []
    for node in nodes:
        meta, spec = node["metadata"], node.get("spec") or {}
        gpus = node_gpus(node, config["gpuResource"], devices)
        if not gpus:
            continue
        on_node = gpu_pods_on.get(meta["name"], [])
        starts = [started(p) or 0.0 for p in on_node]
        limits = [start + p["spec"]["activeDeadlineSeconds"]
                  for p, start in zip(on_node, starts, strict=True)
                  if p["spec"].get("activeDeadlineSeconds")]
        reservation = [t for t in spec.get("taints") or [] if t["key"] == config["taintKey"]]
        annotations = meta.get("annotations") or {}
        views.append(NodeView(
            name=meta["name"], gpus=gpus,
            used=sum(held[(p["metadata"]["namespace"], p["metadata"]["name"])] for p in on_node),
            schedulable=not spec.get("unschedulable"),
            taints=tuple(t for t in spec.get("taints") or [] if t["key"] != config["taintKey"]),
            reserved_for=reservation[0].get("value") if reservation else None,
            reserved_pod=annotations.get(config["podAnnotation"]),
            reserved_until=parse_time(annotations.get(config["untilAnnotation"])),
            frees_at=max(limits) if on_node and len(limits) == len(on_node) else None,
            serving=sum(1 for p in on_node if serves(p)),
            newest_start=max(starts, default=0.0)))
    return views


# --- acting on it -------------------------------------------------------------------------------

def event(config: Config, pod: Waiting, reason: str, note: str, now: float) -> dict:
    return kube_api.event(config["controller"], {
        "apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
        "uid": pod.uid}, pod.namespace, reason, "Normal", "Reserve", note, now)


def reservation_toleration(config: Config, uid: str) -> dict:
    """Lets a pod onto the node reserved for the pod `uid`."""
    return {"key": config["taintKey"], "operator": "Equal", "value": uid,
            "effect": "NoSchedule"}


def add_toleration(api: Api, pod: Waiting, pod_path: str, toleration: dict) -> None:
    """Tolerations may be added to a pod that waits; the uid makes sure it is still the one
    the run saw."""
    if toleration not in pod.tolerations:
        api.ok("PATCH", pod_path, {"metadata": {"uid": pod.uid},
                                   "spec": {"tolerations": [*pod.tolerations, toleration]}},
               "application/strategic-merge-patch+json")


def act(api: Api, config: Config, step: Step, now: float) -> str:
    key = config["taintKey"]
    pod = step.pod
    pod_path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}" if pod else ""
    if step.action == "report":
        assert pod is not None
        record(api, event(config, pod, UNPLACEABLE, f"No node reserved: {step.why}.", now))
        return f"{pod.key}: not reserved, {step.why}"
    assert step.node is not None
    if step.action == "backfill":
        assert pod is not None
        add_toleration(api, pod, pod_path, reservation_toleration(config, step.reserved_for))
        record(api, event(config, pod, BACKFILLED, f"May use free GPUs of node {step.node}, "
                          f"reserved for another pod, meanwhile: {step.why}.", now))
        return f"{step.node}: backfilled with {pod.key} ({step.why})"
    if step.action == "release":
        patch_node(api, step.node, lambda taints: [t for t in taints if t["key"] != key],
                   {config["podAnnotation"]: None, config["untilAnnotation"]: None})
        if pod is not None:     # expired: the pod waits `waitBefore` again before the next
            api.call("PATCH", pod_path, {"metadata": {"annotations": {
                config["endedAnnotation"]: format_time(now)}}},
                "application/merge-patch+json")
            record(api, event(config, pod, RELEASED, f"Node {step.node} is no longer reserved "
                           f"for this pod: {step.why}.", now))
        return f"{step.node}: released, {step.why}"
    assert pod is not None and step.until is not None
    # The toleration first: a node reserved for a pod that cannot go there would only idle.
    add_toleration(api, pod, pod_path, reservation_toleration(config, pod.uid))
    patch_node(api, step.node, lambda taints: [*[t for t in taints if t["key"] != key],
                                               {"key": key, "value": pod.uid,
                                                "effect": "NoSchedule"}],
               {config["podAnnotation"]: pod.key, config["untilAnnotation"]:
                format_time(step.until)})
    record(api, event(config, pod, RESERVED, f"Node {step.node} is reserved for this pod until "
                   f"{format_time(step.until)} ({step.why}): no new pod lands there, and the "
                   f"pod lands once its {pod.gpus} GPUs are free.", now))
    return f"{step.node}: reserved for {pod.key} ({step.why})"


def created_at(pod: dict) -> float | None:
    return parse_time(pod["metadata"].get("creationTimestamp"))


def started_at(pod: dict) -> float | None:
    return parse_time(pod["status"].get("startTime"))


def run(api: Api, config: Config, now: float,
        created: Callable[[dict], float | None] = created_at,
        started: Callable[[dict], float | None] = started_at) -> list[str]:
    """One run at `now`; `created` and `started` say when a pod was created and started (the
    benchmark's simulated clock)."""
    nodes, pods, devices = observe(api, (config["dra"] or {}).get("driver"))
    waiting = waiting_pods(config, pods, devices, created)
    views = node_views(config, nodes, pods, devices, started)
    return [act(api, config, step, now) for step in plan(config, views, waiting, now)]


def main(argv: list[str]) -> int:
    # `python -OO` strips the docstring: the help then goes without a description.
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the run's settings (JSON)")
    add_connection_arguments(parser)
    args = parser.parse_args(argv)
    with open(args.config) as f:
        config = json.load(f)
    lines = run(connect(args), config, time.time())
    for line in lines:
        print(line, flush=True)
    print(f"gpu reservation: {len(lines)} changes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
