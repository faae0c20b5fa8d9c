"""The thresholds of one compaction run: which GPU nodes the run can empty, and the
HighNodeUtilization thresholds that make the descheduler empty just those.

One threshold for every run fits no state of the cluster. HighNodeUtilization evicts from every
node at or below its threshold and counts only the nodes above it as room for the evicted pods:
a low threshold never touches nodes 5 of 8 used that the others could absorb, a high one leaves
too little room above it and drains nodes only partly. It also visits the nodes below the
threshold in the order of the sum of their requests, memory counted in bytes: the order of
memory, not of GPUs, so a per-run eviction limit can be spent on the wrong node.

So before each run this chooses the nodes to empty: the least used first, each node whose pods
may all move and within the per-node limit, kept if the run would then leave more whole free
nodes. For each choice it replays what the descheduler would evict under its own rules and
limits, and where the binpack scheduler would then put each evicted pod. The run's thresholds
are the GPU usage of the busiest chosen node (never above `underusedPercent`) and the most pod
slots, CPU and memory a chosen node uses (see `separating_resources`), so that nodes as used
but with more of those count as room; the other nodes at or below them that hold a pod that
may move are left out of the run's node selector (by
`kubernetes.io/hostname`), so that they neither lose pods nor take the room the chosen nodes
need. When no choice would leave more whole free nodes than there are now, the run evicts
nothing. What it cannot foresee (a PodDisruptionBudget, node affinity, pods that arrive
meanwhile) the descheduler and the scheduler still decide: a pod that cannot move stays, and
its node is not emptied.

Standard library only: it runs from a ConfigMap in a stock Python image, as the CronJob's init
container (`main`), and the benchmark calls `planned_policy` directly.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import re
import ssl
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from datetime import datetime

BASE_RESOURCES = ("cpu", "memory", "pods")
HOSTNAME = "kubernetes.io/hostname"
CRITICAL_PRIORITY = 2_000_000_000        # system-cluster-critical and above are never evicted
IN_CLUSTER = "/var/run/secrets/kubernetes.io/serviceaccount"

_SUFFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "P": 1e15, "E": 1e18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40,
           "Pi": 2 ** 50, "Ei": 2 ** 60}


def quantity(text) -> float:
    """A Kubernetes quantity ("500m", "64Gi", "8") in its base unit."""
    match = re.fullmatch(r"([0-9.eE+-]+?)([numkMGTPE]i?|)", str(text))
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match.groups()
    return float(number) * _SUFFIX[suffix]


def amounts(resources: dict, names) -> dict[str, int]:
    """Quantities as the descheduler counts them: CPU in millicores, the rest in whole units."""
    return {name: round(quantity(resources[name]) * (1000 if name == "cpu" else 1))
            for name in names if name in resources}


def go_duration_seconds(text: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ns|us|ms|s|m|h)", text))


# --- the cluster, as the descheduler sees it ---------------------------------------------------

@dataclass
class Pod:
    name: str
    requests: dict[str, int]
    movable: bool                   # the evictor would evict it, and it requests a GPU
    priority: int
    node_selector: dict[str, str]
    movable_without_gpu: bool = False   # the evictor would evict it, and it requests no GPU


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    schedulable: bool
    pods: list[Pod] = field(default_factory=list)

    def used(self, name: str) -> int:
        return sum(p.requests.get(name, 0) for p in self.pods)

    def free(self, name: str) -> int:
        return self.allocatable.get(name, 0) - self.used(name)

    def fits(self, pod: Pod) -> bool:
        return all(self.labels.get(k) == v for k, v in pod.node_selector.items()) and \
            all(self.free(name) >= amount for name, amount in pod.requests.items())

    def percent(self, name: str) -> float:
        """Usage of one resource as the descheduler computes it (0 where there is none)."""
        capacity = self.allocatable.get(name, 0)
        return float(self.used(name)) / float(capacity) * 100 if capacity > 0 else 0.0


def pod_requests(spec: dict, names) -> dict[str, int]:
    """Effective requests: the containers' sum, or the largest init container's if larger."""
    total: dict[str, int] = {"pods": 1}
    for container in spec.get("containers", []):
        for name, amount in amounts(container.get("resources", {}).get("requests", {}),
                                    names).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers", []):
        for name, amount in amounts(container.get("resources", {}).get("requests", {}),
                                    names).items():
            total[name] = max(total.get(name, 0), amount)
    for name, amount in amounts(spec.get("overhead") or {}, names).items():
        total[name] = total.get(name, 0) + amount
    return total


def evictable(pod: dict, evictor: dict, now: float) -> bool:
    """What the policy's DefaultEvictor, with its default protections, lets the descheduler
    evict."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    wanted = evictor.get("labelSelector", {}).get("matchLabels", {})
    owners = meta.get("ownerReferences", [])
    started = status.get("startTime")
    age = now - datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() \
        if started else -1.0
    return (all(meta.get("labels", {}).get(k) == v for k, v in wanted.items())
            and bool(owners) and not any(o.get("kind") == "DaemonSet" for o in owners)
            and "kubernetes.io/config.mirror" not in meta.get("annotations", {})
            and not meta.get("deletionTimestamp")
            and (spec.get("priority") or 0) < CRITICAL_PRIORITY
            and not any("emptyDir" in v or "hostPath" in v for v in spec.get("volumes", []))
            and age >= go_duration_seconds(evictor.get("minPodAge", "0s")))


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    terms = [t.partition("=") for t in selector.split(",") if t.strip()]
    return all(labels.get(k.strip()) == v.strip() for k, _, v in terms)


def ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))


def snapshot(nodes: list[dict], pods: list[dict], policy: dict, now: float) -> list[Node]:
    """The nodes compaction looks at (ready, matching the policy's node selector) with the pods
    on them that have not ended."""
    evictor = plugin_args(policy, "DefaultEvictor")
    gpu_resources = list(plugin_args(policy, "HighNodeUtilization")["thresholds"])
    names = [*gpu_resources, *BASE_RESOURCES]
    selector = policy.get("nodeSelector", "")
    seen: dict[str, Node] = {}
    for node in nodes:
        labels = node["metadata"].get("labels", {})
        if ready(node) and label_selector_matches(selector, labels):
            status = node.get("status", {})
            seen[node["metadata"]["name"]] = Node(
                node["metadata"]["name"], labels,
                amounts(status.get("allocatable") or status.get("capacity", {}), names),
                not node.get("spec", {}).get("unschedulable", False))
    for pod in pods:
        host = seen.get(pod["spec"].get("nodeName", ""))
        if host is None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        meta = pod["metadata"]
        requests = pod_requests(pod["spec"], names)
        # OnlyThresholdingResources with GPU thresholds: only GPU pods are evicted.
        gpu = any(requests.get(r, 0) > 0 for r in gpu_resources)
        may_go = evictable(pod, evictor, now)
        host.pods.append(Pod(f"{meta.get('namespace', '')}/{meta['name']}", requests,
                             may_go and gpu, pod["spec"].get("priority") or 0,
                             pod["spec"].get("nodeSelector") or {}, may_go and not gpu))
    return list(seen.values())


# --- one run, replayed -------------------------------------------------------------------------

@dataclass
class Outcome:
    thresholds: dict[str, float]    # the run's HighNodeUtilization thresholds, percent
    evicted: list[str]
    emptied: list[str]          # nodes with pods now that the run leaves without any
    filled: list[str]           # empty nodes an evicted pod would land on
    gain: int                   # whole free nodes after the run minus before
    hidden: list[str] = field(default_factory=list)     # left out of the run's node selector
    # Nodes a run could empty if pods younger than minPodAge could move: what the age costs.
    held_by_age: list[str] = field(default_factory=list)


def level(node: Node, gpu_resources) -> float:
    """The lowest threshold that puts `node` below it: a node is below when every threshold
    resource is at or under it."""
    return max(node.percent(r) for r in gpu_resources)


def below(node: Node, thresholds: dict[str, float]) -> bool:
    """HighNodeUtilization's test for an underused node: every resource with a threshold is at
    or under it."""
    return all(node.percent(r) <= t for r, t in thresholds.items())


def separating_resources(nodes: list[Node], evictor: dict) -> tuple[str, ...]:
    """The resources besides GPUs that a run's thresholds may name. A node at or under the GPU
    usage of a node to empty counts as room only if it is above the threshold of another
    resource, so each one named lets more nodes take the evicted pods. Pods always: no container
    requests pods, so OnlyThresholdingResources still evicts GPU pods alone. CPU and memory only
    when no pod without GPUs could then be evicted: none on these nodes may move, and minPodAge
    is above zero, so that no such pod can be old enough by the run that was not here now."""
    if go_duration_seconds(evictor.get("minPodAge", "0s")) > 0 and \
            not any(p.movable_without_gpu for n in nodes for p in n.pods):
        return ("pods", "cpu", "memory")
    return ("pods",)


def run_thresholds(chosen: list[Node], gpu_resources, separating) -> dict[str, float]:
    """The thresholds that put the `chosen` nodes below and as few others as possible: the GPU
    usage of the busiest chosen node, and for each separating resource the most any chosen
    node uses. A node at or under that GPU usage that uses more of one of them is above, so it
    counts as room; by GPU usage alone it could not."""
    gpu = max(level(n, gpu_resources) for n in chosen)
    return {**{r: gpu for r in gpu_resources},
            **{r: max(n.percent(r) for n in chosen) for r in separating}}


def scheduler_score(node: Node, pod: Pod, scoring: dict) -> float:
    """NodeResourcesFit's RequestedToCapacityRatio score of `node` for `pod`, as the binpack
    scheduler computes it (shape points interpolated, weighted over the scored resources)."""
    shape = sorted((p["utilization"], p["score"])
                   for p in scoring["requestedToCapacityRatio"]["shape"])

    def shaped(utilization: float) -> float:
        if utilization <= shape[0][0]:
            return shape[0][1]
        for (u0, s0), (u1, s1) in itertools.pairwise(shape):
            if utilization <= u1:
                return s0 + (s1 - s0) * (utilization - u0) / (u1 - u0)
        return shape[-1][1]

    total = weights = 0.0
    for resource in scoring["resources"]:
        capacity = node.allocatable.get(resource["name"], 0)
        if capacity <= 0:
            continue
        used = node.used(resource["name"]) + pod.requests.get(resource["name"], 0)
        total += resource["weight"] * shaped(100.0 * used / capacity)
        weights += resource["weight"]
    return total / weights if weights else 0.0


def replay_run(nodes: list[Node], thresholds: dict[str, float], policy: dict, scoring: dict,
               hidden: frozenset = frozenset()) -> Outcome:
    """What one descheduler run with `thresholds`, not seeing the nodes named in `hidden`,
    evicts (HighNodeUtilization's order, room and limits; the evictor's node fit, over every
    node), and what the cluster looks like once the binpack scheduler has placed the evicted
    pods again."""
    args = plugin_args(policy, "HighNodeUtilization")
    gpu_resources = list(args["thresholds"])
    names = [*gpu_resources, *BASE_RESOURCES]
    nodes = [replace(n, pods=list(n.pods)) for n in nodes]
    seen = [n for n in nodes if n.name not in hidden]
    low = [n for n in seen if below(n, thresholds)]
    room = [n for n in seen if n not in low and n.schedulable]
    free_before = {n.name for n in nodes if not any(n.used(r) for r in gpu_resources)}
    evicted: list[tuple[Pod, Node]] = []
    if low and room and len(low) < len(seen) and len(low) > args.get("numberOfNodes", 0):
        available = {name: sum(n.free(name) for n in room) for name in names}
        per_node = policy.get("maxNoOfPodsToEvictPerNode")
        per_run = policy.get("maxNoOfPodsToEvictTotal")

        def sum_of_requests(node: Node) -> int:
            return sum(node.used(name) for name in names)
        for node in sorted(low, key=sum_of_requests):
            if min(available.values()) <= 0:
                break
            here = 0
            for pod in sorted((p for p in node.pods if p.movable), key=lambda p: p.priority):
                if per_node is not None and here >= per_node:
                    break
                if per_run is not None and len(evicted) >= per_run:
                    break
                if not any(other is not node and other.schedulable and other.fits(pod)
                           for other in nodes):
                    continue        # the evictor's nodeFit
                evicted.append((pod, node))
                here += 1
                for name in names:
                    available[name] -= pod.requests.get(name, 0)
                if min(available.values()) <= 0:
                    break
    for pod, node in evicted:
        node.pods.remove(pod)
    for pod, _ in evicted:
        fitting = [n for n in nodes if n.schedulable and n.fits(pod)]
        if fitting:
            max(fitting, key=lambda n: (scheduler_score(n, pod, scoring), n.name)).pods.append(pod)
    free_after = {n.name for n in nodes if not any(n.used(r) for r in gpu_resources)}
    return Outcome(thresholds, [p.name for p, _ in evicted], sorted(free_after - free_before),
                   sorted(free_before - free_after), len(free_after) - len(free_before),
                   sorted(hidden))


def best_run(nodes: list[Node], policy: dict, scoring: dict) -> Outcome:
    """The nodes to empty, chosen least used first: a node is added when the run with it leaves
    more whole free nodes than without. Threshold 0 (nothing evicted) when none is."""
    thresholds = plugin_args(policy, "HighNodeUtilization")["thresholds"]
    ceiling = min(thresholds.values())
    per_node = policy.get("maxNoOfPodsToEvictPerNode")
    per_run = policy.get("maxNoOfPodsToEvictTotal")

    def may_empty(node: Node) -> bool:
        return (0 < level(node, thresholds) <= ceiling and all(p.movable for p in node.pods)
                and (per_node is None or len(node.pods) <= per_node))
    separating = separating_resources(nodes, plugin_args(policy, "DefaultEvictor"))
    best, chosen = Outcome({r: 0.0 for r in thresholds}, [], [], [], 0), []
    for node in sorted(filter(may_empty, nodes),
                       key=lambda n: (sum(n.used(r) for r in thresholds), n.name)):
        if per_run is not None and len(best.evicted) + len(node.pods) > per_run:
            continue
        limits = run_thresholds([*chosen, node], thresholds, separating)
        # Nodes below the thresholds that would lose pods but cannot be emptied: left out.
        hidden = frozenset(n.name for n in nodes
                           if n not in chosen and n is not node and any(p.movable for p in n.pods)
                           and below(n, limits))
        if any(HOSTNAME not in n.labels for n in nodes if n.name in hidden):
            continue
        outcome = replay_run(nodes, limits, policy, scoring, hidden)
        if outcome.gain > best.gain:
            best, chosen = outcome, [*chosen, node]
    return best


def plugin_args(policy: dict, plugin: str) -> dict:
    return next(c["args"] for c in policy["profiles"][0]["pluginConfig"] if c["name"] == plugin)


def planned_policy(policy: dict, nodes: list[dict], pods: list[dict], scoring: dict,
                   now: float | None = None) -> tuple[dict, Outcome]:
    """`policy` with the thresholds of this run, and what the run is expected to do."""
    seen_at = time.time() if now is None else now
    outcome = best_run(snapshot(nodes, pods, policy, seen_at), policy, scoring)
    # The same cluster seen from the far future, where every started pod is old enough.
    ageless = outcome if seen_at == math.inf else \
        best_run(snapshot(nodes, pods, policy, math.inf), policy, scoring)
    if ageless.gain > outcome.gain:
        outcome.held_by_age = sorted(set(ageless.emptied) - set(outcome.emptied))
    planned = copy.deepcopy(policy)
    args = plugin_args(planned, "HighNodeUtilization")
    args["thresholds"] = outcome.thresholds
    if outcome.hidden:
        hostnames = {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(HOSTNAME)
                     for n in nodes}
        planned["nodeSelector"] = ",".join(filter(None, (
            policy.get("nodeSelector"),
            f"{HOSTNAME} notin ({','.join(sorted(hostnames[n] for n in outcome.hidden))})")))
    return planned, outcome


def describe(outcome: Outcome) -> str:
    held = (f"; pods younger than minPodAge keep {', '.join(outcome.held_by_age)} from being "
            f"emptied" if outcome.held_by_age else "")
    if not outcome.gain:
        return ("no run would leave more whole free GPU nodes: threshold 0, nothing is evicted"
                + held)
    others = ", ".join(f"{name} {value:.3g}%" for name, value in outcome.thresholds.items()
                       if name in BASE_RESOURCES)
    gpu = max(v for name, v in outcome.thresholds.items() if name not in BASE_RESOURCES)
    return (f"threshold {gpu:g}% of GPUs ({others}): {len(outcome.evicted)} pods to move, "
            f"expected to empty {', '.join(outcome.emptied)}"
            + (f" and to fill {', '.join(outcome.filled)}" if outcome.filled else "")
            + f" ({outcome.gain:+d} whole free nodes)"
            + (f", leaving out {', '.join(outcome.hidden)}" if outcome.hidden else "") + held)


# --- in the CronJob's pod ----------------------------------------------------------------------

def list_items(server: str, path: str, token: str, context: ssl.SSLContext) -> list[dict]:
    request = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, context=context, timeout=30) as reply:
        return json.load(reply)["items"]


def main(argv: list[str]) -> int:
    # `python -OO` strips the docstring: the help then goes without a description.
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--policy", required=True, help="the DeschedulerPolicy (JSON)")
    parser.add_argument("--scoring", required=True,
                        help="the binpack scheduler's NodeResourcesFit scoring strategy (JSON)")
    parser.add_argument("--out", required=True, help="where the run's policy is written")
    parser.add_argument("--server", default="https://{}:{}".format(
        os.environ.get("KUBERNETES_SERVICE_HOST", ""),
        os.environ.get("KUBERNETES_SERVICE_PORT", "")))
    parser.add_argument("--token-file", default=f"{IN_CLUSTER}/token")
    parser.add_argument("--ca-file", default=f"{IN_CLUSTER}/ca.crt")
    args = parser.parse_args(argv)
    with open(args.policy) as f:
        policy = json.load(f)
    with open(args.scoring) as f:
        scoring = json.load(f)
    with open(args.token_file) as f:
        token = f.read().strip()
    context = ssl.create_default_context(cafile=args.ca_file)
    nodes = list_items(args.server, "/api/v1/nodes", token, context)
    pods = list_items(args.server, "/api/v1/pods?fieldSelector=" + urllib.parse.quote(
        "status.phase!=Succeeded,status.phase!=Failed"), token, context)
    planned, outcome = planned_policy(policy, nodes, pods, scoring)
    with open(args.out, "w") as f:
        json.dump(planned, f, indent=1)
    print(f"compaction plan: {describe(outcome)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
