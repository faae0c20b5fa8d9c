"""Fault remediation: GPU nodes whose GPUs show a fault that takes them out of service are
quarantined and, on `drain`, emptied of their GPU pods; they return to service when an operator
labels them repaired.

Each pass asks Prometheus which GPU nodes show each fault now (the faults' one classification,
base/gpu_faults.py; a node whose exporter is not scraped has no answer: missing data is never a
fault). Then:
- a quarantined node labelled `<repairedLabel>=true` returns to service: the taint, its
  annotations and the label go;
- a GPU node with a quarantining fault, not yet out of service, is quarantined: the taint
  `<taintKey>=<fault>:NoSchedule` (nothing but the GPU node's own DaemonSets tolerates it, so
  its exporter keeps reporting), and annotations that say since when and why; at most
  `maxNodes` and `maxShare` of the GPU nodes are taken out within `window`: a fault beyond
  that is reported (an event, once), not acted on; on the DRA path, the failed GPUs alone
  leave service instead, through a DeviceTaintRule each, the node annotated with the fault;
- on `drain`, every GPU pod on a quarantined node (on the DRA path, every pod whose claims hold
  a failed GPU) leaves: a team's pod that a Kueue workload holds goes back to its queue with
  the whole workload (kueue_requeue.py), any other is evicted through the eviction API (a
  disruption budget that refuses is respected, and asked again next pass). DaemonSet pods
  stay.
On `report`, the events and the log say what would be done, and nothing is changed.

Standard library only: it runs from a ConfigMap in a stock Python image, as the Deployment's
container (`main`, a pass every `intervalSeconds`); the tests call `plan` and `run`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import TypedDict

from components.base import metrics_http
from components.base.gpu_count import DeviceView, device_view, gpus_held
from components.base.gpu_faults import (
    GAUGES,
    GPU_HOURS_LOST,
    GPUS_OUT_OF_SERVICE,
    METRICS,
    PODS_MOVED,
    QUARANTINES,
)
from components.base.kube_api import (
    Api,
    add_connection_arguments,
    connect,
    event,
    format_time,
    parse_time,
    patch_node,
    record,
)
from components.base.kueue_requeue import (
    Requeue,
    controller,
    kueue_workload,
    put_back_left,
    requeue,
)

QUARANTINED, HELD, RETURNED = "GpuNodeQuarantined", "GpuFaultNotQuarantined", "GpuNodeReturned"
DRAINED, REFUSED = "GpuFaultEvicted", "GpuFaultEvictionRefused"
METRICS_PORT = 8080


class FaultQuery(TypedDict):
    name: str
    action: str                     # quarantine or watch
    meaning: str
    query: str                      # per node: `node` label, the evidence as value


class Config(Requeue):
    """What a pass reads (its config.json): components/gpu_remediation/manifests.py writes it
    from the stack's settings, typed by this one definition."""

    prometheusUrl: str
    faults: list[FaultQuery]
    mode: str                       # report, quarantine or drain
    maxNodes: int                   # taken out within the window, at most
    maxShare: float
    window: str
    windowSeconds: float
    gpuTaintKey: str                # every GPU node carries it
    taintKey: str
    sinceAnnotation: str            # when the node was quarantined (RFC 3339)
    reasonAnnotation: str           # why, in a sentence
    repairedLabel: str              # set to "true" by an operator: back in service
    faultAnnotation: str            # on the DRA path: the fault the node's devices are out for
    ruleNodeLabel: str              # on its DeviceTaintRules: the node
    nvsentinel: bool                # NVSentinel quarantines and returns nodes; a pass drains
    nvsentinelStateLabel: str
    nvsentinelOutOfService: list[str]   # its states of a node out of service
    gpuResource: str
    draDriver: str | None
    controller: str                 # the events' reportingController
    intervalSeconds: float


@dataclass(frozen=True)
class Fault:
    """A fault a node shows now: which, its evidence (an XID code, a count) and the UUIDs of
    the GPUs that show it."""

    name: str
    evidence: float
    meaning: str
    devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """What a pass does to one node: `quarantine`, `hold` (a fault beyond the limit), `return`
    or `drain`; `why` for the events and the log."""

    node: str
    action: str
    why: str
    fault: str = ""
    devices: tuple[str, ...] = ()       # the failed GPUs' UUIDs, on quarantine


def limit(config: Config, gpu_nodes: int) -> int:
    """GPU nodes taken out of service within the window, at most: maxNodes and maxShare (one
    at least)."""
    return min(config["maxNodes"], max(1, math.floor(config["maxShare"] * gpu_nodes)))


def is_gpu_node(node: dict, config: Config) -> bool:
    return any(t.get("key") == config["gpuTaintKey"] for t in node["spec"].get("taints") or [])


def quarantine_of(node: dict, config: Config) -> str | None:
    """The fault the node is out of service for, if it is: the platform's taint's, or where
    NVSentinel detects, its state."""
    if config["nvsentinel"]:
        state = (node["metadata"].get("labels") or {}).get(config["nvsentinelStateLabel"])
        return f"NVSentinel: {state}" if state in config["nvsentinelOutOfService"] else None
    tainted = next((t.get("value", "") for t in node["spec"].get("taints") or []
                    if t.get("key") == config["taintKey"]), None)
    return tainted or (node["metadata"].get("annotations") or {}).get(config["faultAnnotation"])


def describe(fault: Fault) -> str:
    return f"{fault.name} ({fault.meaning}; evidence {fault.evidence:g})"


def plan(config: Config, nodes: list[dict], faults: dict[str, list[Fault]], now: float
         ) -> list[Step]:
    """What a pass does at `now`, given the GPU nodes' faults (only quarantining ones count).
    The nodes taken out within the window count against the limit (one whose time is not
    known counts)."""
    gpu_nodes = sorted((n for n in nodes if is_gpu_node(n, config)),
                       key=lambda n: n["metadata"]["name"])
    steps: list[Step] = []
    out = 0
    for node in gpu_nodes:
        name = node["metadata"]["name"]
        held_for = quarantine_of(node, config)
        if held_for is None:
            continue
        if (not config["nvsentinel"] and (node["metadata"].get("labels") or {}).get(
                config["repairedLabel"]) == "true"):
            steps.append(Step(name, "return", f"labelled {config['repairedLabel']}=true",
                              held_for))
        else:
            since = parse_time((node["metadata"].get("annotations") or {}).get(
                config["sinceAnnotation"]))
            out += since is None or now - since < config["windowSeconds"]
            steps.append(Step(name, "drain", f"out of service for {held_for}", held_for))
    if config["nvsentinel"]:
        return steps        # NVSentinel takes nodes out of service itself
    room = limit(config, len(gpu_nodes)) - out
    for node in gpu_nodes:
        name = node["metadata"]["name"]
        shown = faults.get(name) or []
        if not shown or quarantine_of(node, config) is not None:
            continue
        fault = shown[0]
        if room > 0:
            room -= 1
            steps.append(Step(name, "quarantine", describe(fault), fault.name, fault.devices))
        else:
            steps.append(Step(name, "hold", f"{describe(fault)}, but {out} of the "
                          f"{limit(config, len(gpu_nodes))} GPU nodes that may be taken out "
                          f"of service within {config['window']} were already (maxNodes "
                          f"{config['maxNodes']}, maxShare {config['maxShare']:g})",
                          fault.name))
    return steps


# --- in the Deployment's pod ---------------------------------------------------------------------

def query_faults(config: Config) -> dict[str, list[Fault]]:
    """Each GPU node's quarantining faults now, the order of the classification, each with
    the GPUs that show it (the queries answer by node and UUID)."""
    faults: dict[str, list[Fault]] = {}
    for fault in config["faults"]:
        if fault["action"] != "quarantine":
            continue
        address = (f"{config['prometheusUrl'].rstrip('/')}/api/v1/query?"
                   + urllib.parse.urlencode({"query": fault["query"]}))
        with urllib.request.urlopen(address, timeout=30) as reply:
            answer = json.load(reply)
        if answer.get("status") != "success" or answer["data"]["resultType"] != "vector":
            raise RuntimeError(f"Prometheus did not answer the {fault['name']} query: {answer}")
        shown: dict[str, tuple[float, list[str]]] = {}
        for series in answer["data"]["result"]:
            labels = series.get("metric", {})
            if labels.get("node"):
                evidence, uuids = shown.get(labels["node"], (0.0, []))
                shown[labels["node"]] = (max(evidence, float(series["value"][1])),
                                         [*uuids, *([labels["UUID"]] if "UUID" in labels
                                                    else [])])
        for node, (evidence, uuids) in shown.items():
            faults.setdefault(node, []).append(
                Fault(fault["name"], evidence, fault["meaning"], tuple(sorted(uuids))))
    return faults


def node_event(config: Config, node: str, reason: str, kind: str, action: str, note: str,
               now: float) -> dict:
    return event(config["controller"], {"apiVersion": "v1", "kind": "Node", "name": node,
                                        "namespace": ""}, "default", reason, kind, action, note,
                 now)


@dataclass
class Memory:
    """What a pass remembers for the next (the Deployment's process): what it reported once,
    and the counters it serves Prometheus (from zero at each start, as counters do)."""

    reported: set[tuple[str, ...]] = field(default_factory=set)
    counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def first(self, *key: str) -> bool:
        if key in self.reported:
            return False
        self.reported.add(key)
        return True

    def count(self, metric: str, value: float = 1.0, **labels: str) -> None:
        key = (metric, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0.0) + value

    def out_of_service(self, gpus: dict[tuple[str, str], float]) -> None:
        """The GPUs out of service now, by (node, fault): the gauge, set anew."""
        self.gauges = {(GPUS_OUT_OF_SERVICE, (("node", node), ("value", fault))): count
                       for (node, fault), count in gpus.items()}

    def exposition(self) -> str:
        """The counters and gauges in Prometheus' text format."""
        lines = []
        for kind, metrics, values in (("counter", METRICS, self.counters),
                                      ("gauge", GAUGES, self.gauges)):
            for metric, help_text in metrics.items():
                lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
                for (name, labels), value in sorted(values.items()):
                    if name == metric:
                        text = ",".join(f'{key}="{label}"' for key, label in labels)
                        lines.append(f"{metric}{{{text}}} {value:g}")
        return "\n".join(lines) + "\n"


def gpu_pods(pods: list[dict], config: Config, devices: DeviceView | None
             ) -> list[tuple[dict, int]]:
    """Of a node's pods, those that hold GPUs, but the DaemonSets', each with its GPUs."""
    held = gpus_held(pods, config["gpuResource"], devices)
    return sorted(((p, held[(p["metadata"]["namespace"], p["metadata"]["name"])]) for p in pods
                   if held[(p["metadata"]["namespace"], p["metadata"]["name"])] > 0
                   and not p["metadata"].get("deletionTimestamp")
                   and (controller(p) or {}).get("kind") != "DaemonSet"),
                  key=lambda pair: (pair[0]["metadata"]["namespace"],
                                    pair[0]["metadata"]["name"]))


def drain(api: Api, config: Config, node: str, fault: str, pods: list[tuple[dict, int]],
          now: float, memory: Memory, requeued: set[str]) -> list[str]:
    """Moves the node's GPU pods (each with the GPUs it holds) away: a team workload back to
    its queue whole, any other pod evicted; what happened to each."""
    lines = []
    for pod, gpus in pods:
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        ref = {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace,
               "uid": meta.get("uid", "")}
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        workload = kueue_workload(api, config, pod)
        if workload and workload["metadata"]["uid"] in requeued:
            continue
        status, answer = api.call("POST", f"{path}/eviction" + ("?dryRun=All" if workload
                                                                else ""), {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace}})
        if status == 404:
            continue
        if status == 429:
            if memory.first(node, namespace, name, "refused"):
                record(api, event(config["controller"], ref, namespace, REFUSED, "Warning",
                                  "Evict", f"Pod {namespace}/{name} is on node {node}, out of "
                                  f"service for {fault}, but a disruption budget refused its "
                                  f"eviction: {answer.get('message', '')}. Asked again every "
                                  f"pass.", now))
            lines.append(f"{namespace}/{name}: eviction refused by a disruption budget")
            continue
        if status >= 300:
            raise RuntimeError(f"evicting {namespace}/{name}: {status} "
                               f"{answer.get('message', answer)}")
        memory.count(PODS_MOVED, namespace=namespace,
                      how="requeued" if workload else "evicted")
        started = parse_time((pod.get("status") or {}).get("startTime"))
        if started is not None:
            memory.count(GPU_HOURS_LOST, gpus * max(0.0, now - started) / 3600,
                         namespace=namespace)
        if workload:
            requeued.add(workload["metadata"]["uid"])
            back = requeue(api, config, workload, now)
            note = (f"Pod {namespace}/{name} was on node {node}, out of service for {fault}: "
                    f"its Kueue workload {workload['metadata']['name']} was stopped whole and "
                    f"{'is' if back else 'will be'} back in its queue, to run again on healthy "
                    f"nodes.")
            lines.append(f"{namespace}/{name}: requeued with its workload")
        else:
            note = (f"Pod {namespace}/{name} was evicted from node {node}, out of service for "
                    f"{fault}.")
            lines.append(f"{namespace}/{name}: evicted")
        record(api, event(config["controller"], ref, namespace, DRAINED, "Warning", "Evict",
                          note, now))
    return lines


DEVICE_TAINT_RULES = "/apis/resource.k8s.io/v1/devicetaintrules"


def rule_name(node: str, device: str) -> str:
    """A DeviceTaintRule's name for a node's device (a DNS subdomain, at most 253)."""
    return f"gpu-fault-{node}-{device}".lower()[:253].rstrip("-.")


def taint_devices(api: Api, config: Config, step: Step, now: float) -> list[str]:
    """On the DRA path: a DeviceTaintRule (NoSchedule) for each of the node's devices whose
    UUID shows the fault, named and labelled after the node; their names. None found (a
    driver that publishes no UUID): the node is tainted instead."""
    selector = urllib.parse.quote(f"spec.nodeName={step.node},spec.driver={config['draDriver']}")
    found = []
    for slice_ in api.items(f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={selector}"):
        for device in slice_["spec"].get("devices") or []:
            uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
            if uuid in step.devices:
                found.append((slice_["spec"]["pool"]["name"], device["name"]))
    for pool, device in found:
        status, answer = api.call("POST", DEVICE_TAINT_RULES, {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(step.node, device),
                         "labels": {config["ruleNodeLabel"]: step.node},
                         "annotations": {config["sinceAnnotation"]: format_time(now),
                                         config["reasonAnnotation"]: step.why}},
            "spec": {"deviceSelector": {"driver": config["draDriver"], "pool": pool,
                                        "device": device},
                     "taint": {"key": config["taintKey"], "value": step.fault,
                               "effect": "NoSchedule"}}})
        if status >= 300 and status != 409:
            raise RuntimeError(f"creating the DeviceTaintRule of {step.node}/{device}: "
                               f"{status} {answer.get('message', answer)}")
    return [device for _, device in found]


def tainted_devices(api: Api, config: Config, node: str) -> set[tuple[str, str, str]]:
    """The (driver, pool, device) the remediation's DeviceTaintRules take out on `node`."""
    selector = urllib.parse.quote(f"{config['ruleNodeLabel']}={node}")
    return {(rule["spec"]["deviceSelector"]["driver"], rule["spec"]["deviceSelector"]["pool"],
             rule["spec"]["deviceSelector"]["device"])
            for rule in api.items(f"{DEVICE_TAINT_RULES}?labelSelector={selector}")}


def act(api: Api, config: Config, step: Step, now: float, memory: Memory) -> list[str]:
    key, node = config["taintKey"], step.node
    report = config["mode"] not in ("quarantine", "drain")
    if step.action == "hold":
        if memory.first(node, step.fault, "held"):
            record(api, node_event(config, node, HELD, "Warning", "Quarantine",
                                   f"Node {node} shows {step.why}: left in service.", now))
        return [f"{node}: not quarantined, {step.why}"]
    if step.action == "quarantine":
        if report:
            if memory.first(node, step.fault, "report"):
                record(api, node_event(config, node, HELD, "Warning", "Quarantine",
                                       f"Node {node} shows {step.why}: it would be taken out "
                                       f"of service (remediation.mode is report).", now))
            return [f"{node}: would be quarantined, {step.why}"]
        memory.count(QUARANTINES, fault=step.fault)
        annotations = {config["sinceAnnotation"]: format_time(now),
                       config["reasonAnnotation"]: step.why}
        devices = taint_devices(api, config, step, now) if config["draDriver"] else []
        if devices:
            # The node stays in service for its healthy GPUs.
            patch_node(api, node, lambda taints: taints,
                       {**annotations, config["faultAnnotation"]: step.fault})
            what = f"its GPUs {', '.join(devices)} are"
        else:
            patch_node(api, node, lambda taints: [*[t for t in taints if t["key"] != key],
                                                  {"key": key, "value": step.fault,
                                                   "effect": "NoSchedule"}], annotations)
            what = "it is"
        record(api, node_event(config, node, QUARANTINED, "Warning", "Quarantine",
                               f"Node {node}: {what} out of service: {step.why}. No new pod "
                               f"gets them" + (" and the pods that hold them leave"
                                               if config["mode"] == "drain" else "")
                               + f"; label the node {config['repairedLabel']}=true once "
                               f"repaired.", now))
        return [f"{node}: quarantined, {step.why}"
                + (f" (devices {', '.join(devices)})" if devices else "")]
    if step.action == "return":
        if config["draDriver"]:
            selector = urllib.parse.quote(f"{config['ruleNodeLabel']}={node}")
            api.ok("DELETE", f"{DEVICE_TAINT_RULES}?labelSelector={selector}")
        patch_node(api, node, lambda taints: [t for t in taints if t["key"] != key],
                   {config["sinceAnnotation"]: None, config["reasonAnnotation"]: None,
                    config["faultAnnotation"]: None},
                   {config["repairedLabel"]: None})
        record(api, node_event(config, node, RETURNED, "Normal", "Return",
                               f"Node {node} is back in service ({step.why}).", now))
        return [f"{node}: back in service"]
    return []


def gpus_out(api: Api, config: Config, nodes: list[dict], out: list[Step]
             ) -> dict[tuple[str, str], float]:
    """The GPUs out of service on each node out, with its fault: its failed devices on the DRA
    path, else all its GPUs."""
    allocatable = {n["metadata"]["name"]: int((n.get("status") or {}).get("allocatable", {}).get(
        config["gpuResource"], 0)) for n in nodes}
    found = {}
    for step in out:
        devices = tainted_devices(api, config, step.node) if config["draDriver"] else set()
        found[(step.node, step.fault)] = float(len(devices) or allocatable.get(step.node, 0))
    return found


def run(api: Api, config: Config, faults: dict[str, list[Fault]], now: float,
        memory: Memory | None = None) -> list[str]:
    """One pass at `now`, given the faults Prometheus reports; what it did, a line each."""
    memory = memory or Memory()
    nodes = api.items("/api/v1/nodes")
    steps = plan(config, nodes, faults, now)
    lines = [line for step in steps for line in act(api, config, step, now, memory)]
    out = [s for s in steps if s.action in ("drain", "quarantine")]
    if config["mode"] in ("quarantine", "drain"):
        memory.out_of_service(gpus_out(api, config, nodes, out))
    if config["mode"] != "drain" or not out:
        return lines
    # Pods and claims are listed only where a node is out of service: a pass on a healthy
    # fleet reads its nodes alone.
    devices = device_view(api, config["draDriver"])
    requeued: set[str] = set()
    for step in out:
        pods = api.items("/api/v1/pods?fieldSelector=" + urllib.parse.quote(
            f"spec.nodeName={step.node},status.phase!=Succeeded,status.phase!=Failed"))
        moved = gpu_pods(pods, config, devices)
        if devices is not None and (tainted := tainted_devices(api, config, step.node)):
            # Only the failed GPUs are out of service: the pods that hold them leave.
            holders = devices.holders(tainted)
            moved = [(pod, gpus) for pod, gpus in moved if (
                pod["metadata"]["namespace"], pod["metadata"]["name"]) in holders]
        lines += drain(api, config, step.node, step.fault, moved, now, memory, requeued)
    return lines


def serve_metrics(memory: Memory, port: int) -> None:
    """The counters at /metrics on `port`."""
    metrics_http.serve(lambda _path: (200, memory.exposition()), port=port)


def main(argv: list[str]) -> int:
    # `python -OO` strips the docstring: the help then goes without a description.
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the settings (JSON)")
    parser.add_argument("--prometheus-url", help="instead of the configured one")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--metrics-port", type=int, default=METRICS_PORT,
                        help="where Prometheus scrapes the counters (/metrics)")
    add_connection_arguments(parser)
    args = parser.parse_args(argv)
    with open(args.config) as f:
        config = json.load(f)
    if args.prometheus_url:
        config["prometheusUrl"] = args.prometheus_url
    api = connect(args)
    memory = Memory()
    if not args.once:
        serve_metrics(memory, args.metrics_port)
    while True:
        try:
            if config["mode"] == "drain":
                for workload in put_back_left(api, config):
                    print(f"{workload}: put back in its queue", flush=True)
            faults = {} if config["nvsentinel"] else query_faults(config)
            for line in run(api, config, faults, time.time(), memory):
                print(line, flush=True)
        except Exception:   # a pass that fails changes nothing; the next tries again
            if args.once:
                raise
            traceback.print_exc()
        if args.once:
            return 0
        time.sleep(config["intervalSeconds"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
