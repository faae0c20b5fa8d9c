"""One idle-GPU reclaim run: report idle GPU pods of the opted-in namespaces to their owners
and, where the stack says so, evict those still idle after the grace period.

Which pods are idle is Prometheus' answer to the stack's query (the usage rules' definition,
with the reclaim window and threshold: a pod that held GPUs for the whole window, none of them
active at any sample within it). Of those, a pod is acted on only if it is in a namespace that
opted in and is not exempt, is Running and was started at least a window ago, and, where the
stack honours it, does not carry its owner's keep annotation.

Each namespace has its policy (its team's or its own, else the stack's): its action, grace
period and whether the keep annotation holds. A pod idle and not yet reported gets a `GpuIdle`
event, on it and on its controller, and an annotation with the time of that first report.
Where the action is `evict`, a reported pod still idle once the grace period has passed since
then is evicted through the eviction API, so that PodDisruptionBudgets hold: a refusal (429) is
reported and tried again next run. At most
`maxEvictionsPerRun` pods are evicted per run, the longest reported first. A reported pod that
is no longer idle loses the annotation, so its grace period starts over. Where the action is
`evict`, the report also writes when the pod may be evicted, and the pod's owner may restart
the grace period by annotating the pod with the keep-alive annotation, up to the policy's
`keepAlives` times: the run removes the annotation, counts it on the pod and reports again
(`GpuIdleKeptAlive`).

In a team namespace, a pod that a Kueue Workload holds (the pod's own, its Job's, or that of
the framework's object above the Job) goes back to the queue with its workload instead: once a
dry-run eviction shows its disruption budgets allow it, the Workload is deactivated
(`spec.active: false`), so that Kueue stops it and frees its quota, then activated again once
Kueue has, so that it is queued again. A Workload the run
could not put back (Kueue had not freed it yet) carries an annotation, and the next run puts it
back.

Standard library only: it runs from a ConfigMap in a stock Python image, as the CronJob's
container (`main`); the tests call `decide`, and the benchmark calls `run` on its simulated
clock.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TypedDict

from components.base.kube_api import (
    Api,
    add_connection_arguments,
    connect,
    event,
    format_time,
    parse_time,
)
from components.base.kueue_requeue import (
    Requeue,
    controller,
    kueue_workload,
    put_back_left,
    requeue,
)

IDLE, EVICTED, REFUSED = "GpuIdle", "GpuIdleEvicted", "GpuIdleEvictionRefused"
KEPT_ALIVE = "GpuIdleKeptAlive"


class Policy(TypedDict):
    """What a run does in one namespace (the team's or namespace's policy, else the stack's)."""

    action: str                     # report or evict
    gracePeriod: str
    gracePeriodSeconds: float
    allowKeep: bool
    keepAlives: int                 # grace periods an owner may restart (keepAliveAnnotation)


class Config(Requeue):
    """What a run reads (its config.json): components/gpu_reclaim/manifests.py writes it from
    the stack's settings, typed by this one definition."""

    prometheusUrl: str
    query: str                      # the idle pods, as Prometheus answers it
    idleBelow: float
    idleFor: str
    idleForSeconds: float
    policies: dict[str, Policy]     # the opted-in namespaces, each with its policy
    exemptNamespaces: list[str]
    keepAnnotation: str
    maxEvictionsPerRun: int
    reportedAnnotation: str
    deadlineAnnotation: str         # on evict: when the pod may be evicted if still idle
    keepAliveAnnotation: str        # set by the owner: restart the grace period
    keepAlivesAnnotation: str       # how many times it was
    controller: str                 # the events' reportingController


@dataclass(frozen=True)
class Decision:
    """What a run does with one pod: `report` (first report: event and annotation), `evict`,
    `clear` (active again: the annotation removed) or `skip` (nothing; `why` says why)."""

    namespace: str
    pod: str
    action: str
    why: str
    gpus: int = 0
    reported_at: float | None = None


def format_duration(seconds: float) -> str:
    """A duration as people read it: 2h, 1h30m, 45m, 1d6h, 30s."""
    seconds = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])


def idle_set(result: list[dict]) -> dict[tuple[str, str], int]:
    """(namespace, pod) -> GPUs held, from the query's instant vector."""
    idle: dict[tuple[str, str], int] = {}
    for series in result:
        labels = series.get("metric", {})
        if labels.get("namespace") and labels.get("pod"):
            key = (labels["namespace"], labels["pod"])
            idle[key] = idle.get(key, 0) + int(float(series["value"][1]))
    return idle


def kept(pod: dict, config: Config) -> bool:
    """The owner asked to keep the pod's GPUs (whether or not the stack honours it)."""
    value = (pod["metadata"].get("annotations") or {}).get(config["keepAnnotation"])
    return value is not None and value.strip().lower() != "false"


def keep_alives_used(pod: dict, config: Config) -> int:
    """How many times the pod's owner restarted its grace period since its first report."""
    value = (pod["metadata"].get("annotations") or {}).get(config["keepAlivesAnnotation"], "0")
    return int(value) if value.isdigit() else 0


def judge(config: Config, pod: dict, reported_at: float | None, now: float) -> tuple[str, str]:
    """(action, why) for one idle pod of an opted-in namespace."""
    meta, status = pod["metadata"], pod.get("status") or {}
    policy = config["policies"][meta["namespace"]]
    started = parse_time(status.get("startTime") or "")
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return "skip", "not running"
    if started is None or now - started < config["idleForSeconds"]:
        return "skip", f"started less than {config['idleFor']} ago"
    if policy["allowKeep"] and kept(pod, config):
        return "skip", f"kept by its owner ({config['keepAnnotation']})"
    if reported_at is None:
        return "report", "idle"
    if policy["action"] != "evict":
        return "skip", "reported already (action: report)"
    annotations = meta.get("annotations") or {}
    if config["keepAliveAnnotation"] in annotations:
        used = keep_alives_used(pod, config)
        if used < policy["keepAlives"]:
            return "keep-alive", f"kept alive by its owner ({used + 1} of {policy['keepAlives']})"
    if now - reported_at < policy["gracePeriodSeconds"]:
        return "skip", (f"in its grace period until "
                        f"{format_time(reported_at + policy['gracePeriodSeconds'])}")
    return "evict", "idle after its grace period"


def decide(config: Config, idle: dict[tuple[str, str], int], pods: list[dict],
           now: float) -> list[Decision]:
    """What a run does with each pod of `pods` that is idle or was reported, given the idle set
    Prometheus answered. Only pods of the opted-in namespaces, less the exempt ones, are
    considered, whatever the answer holds."""
    namespaces = set(config["policies"]) - set(config["exemptNamespaces"])
    reported_key = config["reportedAnnotation"]
    decisions: list[Decision] = []
    due: list[Decision] = []
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if namespace not in namespaces:
            continue
        reported = (meta.get("annotations") or {}).get(reported_key)
        reported_at = parse_time(reported) if reported is not None else None
        gpus = idle.get((namespace, name))
        if gpus is None:
            if reported is not None:
                decisions.append(Decision(namespace, name, "clear", "active again"))
            continue
        action, why = judge(config, pod, reported_at, now)
        decision = Decision(namespace, name, action, why, gpus,
                            now if action in ("report", "keep-alive") else reported_at)
        (due if action == "evict" else decisions).append(decision)
    # The longest reported first, up to the run's limit.
    due.sort(key=lambda d: (d.reported_at or now, d.namespace, d.pod))
    limit = config["maxEvictionsPerRun"]
    decisions += due[:limit]
    decisions += [Decision(d.namespace, d.pod, "skip",
                           f"over this run's limit of {limit} evictions", d.gpus, d.reported_at)
                  for d in due[limit:]]
    return decisions


def report_note(config: Config, decision: Decision, pod: dict) -> str:
    """The first report's message: how long the pod has been idle, what the policy will do,
    and how to keep it."""
    name = f"{decision.namespace}/{decision.pod}"
    policy = config["policies"][decision.namespace]
    note = (f"Pod {name} has held {decision.gpus} GPU(s) with no activity above "
            f"{config['idleBelow']:.0%} for at least {config['idleFor']}. ")
    if policy["action"] == "evict":
        when = format_time((decision.reported_at or 0) + policy["gracePeriodSeconds"])
        note += (f"Policy: it will be evicted if still idle after {policy['gracePeriod']} "
                 f"(from {when}); any GPU activity first starts the count again. ")
        left = policy["keepAlives"] - keep_alives_used(pod, config)
        if left > 0:
            note += (f"Need it a while longer? Annotate the pod {config['keepAliveAnnotation']}"
                     f"=true to restart the grace period ({left} time(s) more). ")
    else:
        note += "Policy: report only; nothing will be done to it. "
    if policy["allowKeep"]:
        template = " (in its pod template)" if controller(pod) else ""
        note += (f"Done with it? Delete it to free the GPUs. To keep them, annotate it"
                 f"{template}: {config['keepAnnotation']}=true.")
    else:
        note += (f"Done with it? Delete it to free the GPUs. This cluster does not honour "
                 f"{config['keepAnnotation']}.")
    return note


def regarding(pod: dict) -> list[dict]:
    """The pod and its controller, as events refer to them."""
    meta = pod["metadata"]
    refs = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
             "namespace": meta["namespace"], "uid": meta.get("uid", "")}]
    if owner := controller(pod):
        refs.append({"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                     "name": owner["name"], "namespace": meta["namespace"],
                     "uid": owner.get("uid", "")})
    return refs


# --- in the CronJob's pod ----------------------------------------------------------------------

def query_idle(url: str, query: str) -> dict[tuple[str, str], int]:
    """Prometheus' answer to the idle query, now."""
    address = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(address, timeout=60) as reply:
        answer = json.load(reply)
    if answer.get("status") != "success" or answer["data"]["resultType"] != "vector":
        raise RuntimeError(f"Prometheus at {url} did not answer the idle query: {answer}")
    return idle_set(answer["data"]["result"])


def annotate(api: Api, path: str, annotations: dict) -> bool:
    """Sets (None: removes) annotations of the pod at `path`; False if the pod is gone (deleted
    since the run listed it)."""
    status, answer = api.call("PATCH", path, {"metadata": {"annotations": annotations}},
                              "application/merge-patch+json")
    if status == 404:
        return False
    if status >= 300:
        raise RuntimeError(f"PATCH {path}: {status} {answer.get('message', answer)}")
    return True


def act(api: Api, config: Config, decision: Decision, pod: dict, now: float,
        requeued: set[str]) -> str:
    """Carry out one decision; what happened, for the log. `requeued`: the Workloads this run
    put back in their queue already (with every pod of theirs)."""
    namespace, name = decision.namespace, decision.pod
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    events = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    if decision.action == "clear":
        if not annotate(api, path, dict.fromkeys(
                (config["reportedAnnotation"], config["deadlineAnnotation"],
                 config["keepAlivesAnnotation"]))):
            return "gone before its report was cleared"
        return "active again: report cleared"
    if decision.action in ("report", "keep-alive"):
        # The events first: should the annotations fail, the next run reports again.
        policy = config["policies"][namespace]
        reported = {config["reportedAnnotation"]: format_time(now)}
        if policy["action"] == "evict":
            reported[config["deadlineAnnotation"]] = format_time(
                now + policy["gracePeriodSeconds"])
        if decision.action == "keep-alive":
            used = keep_alives_used(pod, config) + 1
            reported |= {config["keepAliveAnnotation"]: None,
                         config["keepAlivesAnnotation"]: str(used)}
            note = (f"Pod {namespace}/{name}: its owner kept it alive ({used} of "
                    f"{policy['keepAlives']}). It will be evicted if still idle after "
                    f"{policy['gracePeriod']} (from {reported[config['deadlineAnnotation']]}).")
            reason, action, what = KEPT_ALIVE, "KeepAlive", "keep-alive"
            outcome = "kept alive: grace period restarted"
        else:
            note = report_note(config, decision, pod)
            reason, action, what, outcome = IDLE, "Report", "report", "reported"
        for ref in regarding(pod):
            api.ok("POST", events, event(config["controller"], ref, namespace, reason,
                                         "Normal", action, note, now))
        if not annotate(api, path, reported):
            return f"gone before its {what} was recorded"
        return outcome
    if decision.action == "evict":
        # A team's pod that Kueue admitted goes back to the queue with its workload, once its
        # disruption budgets allow the eviction (asked as a dry run).
        workload = kueue_workload(api, config, pod)
        if workload and workload["metadata"]["uid"] in requeued:
            return "requeued with its workload"
        status, answer = api.call(
            "POST", f"{path}/eviction" + ("?dryRun=All" if workload else ""), {
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}})
        since = format_duration(now - (decision.reported_at or now))
        if status == 429:
            note = (f"Pod {namespace}/{name} holds {decision.gpus} idle GPU(s), reported {since} "
                    f"ago, but its eviction was refused: {answer.get('message', '')}. Tried "
                    f"again next run.")
            for ref in regarding(pod):
                api.ok("POST", events, event(config["controller"], ref, namespace, REFUSED,
                                             "Warning", "Evict", note, now))
            return "eviction refused by a disruption budget"
        if status == 404:
            return "gone before its eviction"
        if status >= 300:
            raise RuntimeError(f"evicting {namespace}/{name}: {status} "
                               f"{answer.get('message', answer)}")
        idle = (f"its {decision.gpus} GPU(s) stayed at or below {config['idleBelow']:.0%} "
                f"activity for at least {config['idleFor']}, and {since} after the first report "
                f"(grace period {config['policies'][namespace]['gracePeriod']}) it was still "
                f"idle")
        if workload:
            requeued.add(workload["metadata"]["uid"])
            back = requeue(api, config, workload, now)
            note = (f"Pod {namespace}/{name} was stopped with its Kueue workload "
                    f"{workload['metadata']['name']}: {idle}. The workload's quota is free, and "
                    f"it {'is' if back else 'will be'} back in its queue: it runs again when "
                    f"the quota admits it.")
            outcome = "requeued with its workload"
        else:
            note = f"Pod {namespace}/{name} was evicted: {idle}."
            outcome = "evicted"
        for ref in regarding(pod):
            api.ok("POST", events, event(config["controller"], ref, namespace, EVICTED,
                                         "Normal", "Evict", note, now))
        return outcome
    policy = config["policies"][namespace]
    if decision.reported_at is not None and policy["action"] == "evict":
        # The deadline the owner reads, kept true where the policy changed since the report.
        deadline = format_time(decision.reported_at + policy["gracePeriodSeconds"])
        if (pod["metadata"].get("annotations") or {}).get(config["deadlineAnnotation"]) \
                != deadline:
            annotate(api, path, {config["deadlineAnnotation"]: deadline})
    return decision.why


def run(api: Api, config: Config, idle: dict[tuple[str, str], int], now: float) -> dict[str, int]:
    """One run's decisions on the opted-in namespaces' pods, given the idle set Prometheus
    answered, carried out at `now` (seconds since the epoch); how many pods had each outcome."""
    pods = [pod for namespace in sorted(set(config["policies"]) -
                                        set(config["exemptNamespaces"]))
            for pod in api.ok("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]]
    by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    counts: dict[str, int] = {}
    requeued: set[str] = set()
    for decision in decide(config, idle, pods, now):
        outcome = act(api, config, decision, by_name[(decision.namespace, decision.pod)], now,
                      requeued)
        kind = decision.action if decision.action != "evict" else outcome
        counts[kind] = counts.get(kind, 0) + 1
        print(f"{decision.namespace}/{decision.pod}: {outcome}", flush=True)
    return counts


def main(argv: list[str]) -> int:
    # `python -OO` strips the docstring: the help then goes without a description.
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the run's settings (JSON)")
    parser.add_argument("--prometheus-url", help="instead of the configured one")
    add_connection_arguments(parser)
    args = parser.parse_args(argv)
    with open(args.config) as f:
        config = json.load(f)
    api = connect(args)
    actions = sorted({policy["action"] for policy in config["policies"].values()})
    if "evict" in actions:
        for workload in put_back_left(api, config):
            print(f"{workload}: put back in its queue", flush=True)
    idle = query_idle(args.prometheus_url or config["prometheusUrl"], config["query"])
    counts = run(api, config, idle, time.time())
    print(f"gpu reclaim ({', '.join(actions)}): {len(idle)} idle GPU pods in Prometheus' answer; "
          + ", ".join(f"{kind}: {count}" for kind, count in sorted(counts.items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
