"""GPU use next to allocation: recording rules that join each GPU's activity, as the DCGM exporter
reports it, to the pod that holds the GPU, its namespace and its team; they count GPUs held and
active, GPU-hours allocated, used and idle over `monitoring.usage.window`, and the pods that hold
GPUs idle.

Which pod holds a GPU is the exporter's own attribution on both GPU paths: on the device plugin
path it reads the kubelet's pod-resources, on the DRA path the claims' allocations (its DRA
mode); either way an allocated GPU's series carry `namespace`, `pod` and `container`, a free
GPU's none (the ServiceMonitor drops the exporter pod's own). A namespace's team comes from the
teams' settings, recorded as a series the team rules join on.

Activity is the profiling metric DCGM_FI_PROF_GR_ENGINE_ACTIVE (the fraction of time the
graphics/compute engine is busy, 0..1), which the pinned exporter collects by default
(dcp-metrics-included.csv, the counters file the GPU Operator selects). A GPU that does not report
it (profiling is not supported on every GPU, and a stack's own counters file may leave it out)
falls back to DCGM_FI_DEV_GPU_UTIL / 100, the fraction of time any kernel ran: coarser, it counts
a GPU busy with one small kernel as fully active.
"""

from __future__ import annotations

import json

from ..base.ksm import ksm_label
from .inputs import MonitoringInputs
from .settings import NodeGroupPrice, UsageSettings

GROUP = "gpu-platform-usage"
# The group runs once a minute whatever Prometheus' own evaluation interval: each sample of a
# series it records stands for one minute, so GPU-hours are sums of samples over 60.
INTERVAL = "1m"
SAMPLES_PER_HOUR = 60
PROFILING_ACTIVITY = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTILIZATION_PERCENT = "DCGM_FI_DEV_GPU_UTIL"
HELD = 'pod!=""'
# One series per GPU a pod holds: containers that share a GPU have a series each.
GPU_KEY = "namespace, pod, node, UUID, modelName"
POD_KEY = "namespace, pod, node, modelName"

# Recorded series, in evaluation order.
TEAM_NAMESPACE = "gpu_platform:namespace_team:info"
NODE_PRICE = "gpu_platform:node_price_per_gpu_hour:setting"
GPU_PRICE = "gpu_platform:gpu_price_per_hour:held"
GPU_ACTIVITY = "gpu_platform:gpu_activity:ratio"
GPU_ACTIVE = "gpu_platform:gpu_active:bool"
IDLE_POD_GPUS = "gpu_platform:idle_pod_gpus:count"
LEVELS = ("pod", "namespace", "team")


def held(level: str) -> str:
    """GPUs the level's pods hold now, by GPU model."""
    return f"gpu_platform:{level}_gpus_held:count"


def active(level: str) -> str:
    """Of those, the GPUs active now."""
    return f"gpu_platform:{level}_gpus_active:count"


def price_sum(level: str, kind: str) -> str:
    """What the level's GPUs `held` or `active` now cost an hour, by GPU model."""
    return f"gpu_platform:{level}_gpus_{kind}:price_per_hour"


def gpu_hours(level: str, kind: str) -> str:
    """GPU-hours `allocated`, `used` (active) or `idle` over the window, by GPU model."""
    return f"gpu_platform:{level}_gpu_hours_{kind}:window"


def range_gpu_hours(level: str, select: str, over: str, priced: bool) -> dict[str, str]:
    """Showback over a range (`over`, a PromQL duration, `$__range` on the dashboard): each
    column with its query, one series per `level` (team or namespace) of the pods `select`
    matches. GPU-hours allocated, used and idle are sums of the minute samples the rules record;
    costs, where `priced`, sums of the minute samples of what the GPUs held cost an hour (a GPU
    without a price adds nothing). One definition for the dashboard's tables and the showback
    report."""
    def over_range(series: str) -> str:
        return f"sum_over_time({series}{{{select}}}[{over}])"

    def total(expr: str) -> str:
        return f"sum by ({level}) ({expr}) / {SAMPLES_PER_HOUR}"

    allocated, used = over_range(held(level)), over_range(active(level))
    columns = {"GPU-hours allocated": total(allocated), "GPU-hours used": total(used),
               "GPU-hours idle": total(f"({allocated} - {used})")}
    if priced:
        cost, cost_active = over_range(price_sum(level, "held")), \
            over_range(price_sum(level, "active"))
        columns |= {"cost": total(cost), "cost of idle GPUs": total(f"({cost} - {cost_active})")}
    return columns


def team_namespaces(inputs: MonitoringInputs) -> dict[str, str]:
    """Each team namespace with its team; none without teams."""
    return dict(inputs.teams.namespaces) if inputs.teams is not None else {}


def _per_gpu(metric: str, select: str = HELD, over: str | None = None) -> str:
    """`metric` per held GPU (its containers' series as one), or its peak over `over`."""
    series = f"{metric}{{{select}}}"
    if over:
        series = f"max_over_time({series}[{over}])"
    return f"max by ({GPU_KEY}) ({series})"


def activity(over: str | None = None, select: str = HELD) -> str:
    """Each held GPU's activity, 0..1 (or its peak over `over`): the profiling metric where the
    GPU reports it, its utilization otherwise."""
    return (f"({_per_gpu(PROFILING_ACTIVITY, select, over)} or "
            f"{_per_gpu(UTILIZATION_PERCENT, select, over)} / 100)")


def team_joined(series: str) -> str:
    """`series` (by namespace), each series of a team's namespace labelled with its `team`; a
    namespace of no team drops out."""
    return f"{series} * on (namespace) group_left (team) {TEAM_NAMESPACE}"


def _of_level(level: str, series: str) -> str:
    """Per-GPU `series` with the level's label: a namespace's team joined where the level is
    team."""
    return team_joined(series) if level == "team" else series


def _level_counts(level: str, by: str) -> list[dict]:
    """GPUs held and active now at one level; a GPU that several of its pods share (time
    slices, a shared claim) counts once per namespace and team."""
    gpus = _of_level(level, GPU_ACTIVE)
    distinct = gpus if level == "pod" else f"max by ({by}, UUID) ({gpus})"
    return [{"record": held(level), "expr": f"count by ({by}) ({distinct})"},
            {"record": active(level), "expr": f"sum by ({by}) ({distinct})"}]


def _level_prices(level: str, by: str) -> list[dict]:
    """What the GPUs held and active now at one level cost an hour, a shared GPU once."""
    def summed(series: str) -> str:
        return f"sum by ({by}) (max by ({by}, UUID) ({_of_level(level, series)}))"
    return [{"record": price_sum(level, "held"), "expr": summed(GPU_PRICE)},
            {"record": price_sum(level, "active"), "expr": summed(f"{GPU_PRICE} * {GPU_ACTIVE}")}]


def _quoted(value: str) -> str:
    """A PromQL string (Go's escapes, which JSON's are)."""
    return json.dumps(value)


def _nodes(group: NodeGroupPrice) -> str:
    """The nodes whose labels, as kube-state-metrics exports them, match the group's selector."""
    selector = ", ".join(f"{ksm_label(key)}={_quoted(value)}"
                         for key, value in sorted(group.node_selector.items()))
    return f"group by (node) (kube_node_labels{{{selector}}})"


def node_price_rules(usage: UsageSettings) -> list[dict]:
    """Each GPU node's price per GPU-hour for each priced model it holds: that of the first of
    `nodeGroupPrices` whose selector the node matches and that prices the model, else the
    model's own (`pricePerGpuHour`); none where neither prices it. Each rule records the nodes
    no earlier rule for the model took."""
    groups = usage.node_group_prices
    models = {*usage.price_per_gpu_hour, *(m for g in groups for m in g.price_per_gpu_hour)}
    rules = []
    for model in sorted(models):
        of_model = f"modelName={_quoted(model)}"
        gpus = (f"group by (node, modelName) ({UTILIZATION_PERCENT}{{{of_model}}} or "
                f"{PROFILING_ACTIVITY}{{{of_model}}})")
        pricing = [group for group in groups if model in group.price_per_gpu_hour]
        choices = [(f"{gpus} and on (node) {_nodes(group)}", group.price_per_gpu_hour[model])
                   for group in pricing]
        if model in usage.price_per_gpu_hour:
            choices.append((gpus, usage.price_per_gpu_hour[model]))
        for index, (nodes, price) in enumerate(choices):
            taken = " or ".join(_nodes(group) for group in pricing[:index])
            picked = f"{nodes} unless on (node) ({taken})" if taken else nodes
            rules.append({"record": NODE_PRICE, "expr": f"({picked}) * 0 + {price!r}"})
    return rules


def _level_hours(level: str, window: str) -> list[dict]:
    allocated, used = gpu_hours(level, "allocated"), gpu_hours(level, "used")
    return [
        {"record": allocated,
         "expr": f"sum_over_time({held(level)}[{window}]) / {SAMPLES_PER_HOUR}"},
        {"record": used,
         "expr": f"sum_over_time({active(level)}[{window}]) / {SAMPLES_PER_HOUR}"},
        {"record": gpu_hours(level, "idle"), "expr": f"{allocated} - {used}"},
    ]


def usage_rules(inputs: MonitoringInputs) -> list[dict]:
    usage = inputs.monitoring.usage
    window, threshold = usage.window, usage.active_threshold
    teams = team_namespaces(inputs)
    # Settings as series, so that rules and the dashboard join on them.
    settings = [{"record": TEAM_NAMESPACE, "expr": "vector(1)",
                 "labels": {"namespace": namespace, "team": team}}
                for namespace, team in sorted(teams.items())]
    levels = [("pod", POD_KEY), ("namespace", "namespace, modelName")]
    if teams:
        levels.append(("team", "team, modelName"))
    counts = [rule for level, by in levels for rule in _level_counts(level, by)]
    hours = [rule for level, _ in levels for rule in _level_hours(level, window)]
    prices = [*node_price_rules(usage),
              {"record": GPU_PRICE,
               "expr": f"{GPU_ACTIVE} * 0 + on (node, modelName) group_left () {NODE_PRICE}"},
              *(rule for level, by in levels[1:] for rule in _level_prices(level, by))
              ] if usage.priced() else []
    return [
        *settings,
        {"record": GPU_ACTIVITY, "expr": activity()},
        {"record": GPU_ACTIVE, "expr": f"{GPU_ACTIVITY} > bool {threshold!r}"},
        *counts,
        *hours,
        *prices,
        {"record": IDLE_POD_GPUS, "expr": idle_pods(window, threshold)},
    ]


def idle_pods(window: str, threshold: float, where: str = "") -> str:
    """The GPUs of each idle pod: pods that held GPUs for the whole window (they held some a
    window ago: a pod that has just started is not judged yet) and none of whose GPUs was active
    (above `threshold`) at any scraped sample within it. The exporter's own samples, not the
    minute ones recorded above: a pod busy within the window is never idle. The one definition
    of idle, with one threshold (`monitoring.usage.activeThreshold`) and a window per purpose:
    the recorded series and the dashboard's list of pods idle now (`monitoring.usage.window`),
    the GpuAllocatedIdle alert and its dashboard list (`monitoring.alerts.idleFor`), and idle
    reclaim's query (`reclaim.idleFor`) are all this. `where`: label matchers the pods must
    have, as a dashboard's variables select them."""
    pods = f"{held('pod')}{{{where}}}" if where else held("pod")
    select = f"{HELD}, {where}" if where else HELD
    return (f"{pods} unless on (namespace, pod) ({activity(window, select)} > {threshold!r}) "
            f"and on (namespace, pod) ({pods} offset {window})")


def idle_means(threshold: float, window: str) -> str:
    """What idle_pods selects, as the alert and the dashboard say it."""
    return (f"held its GPUs for the last {window} without any of them active at any sample "
            f"(engine activity above {threshold * 100:g}%, or utilization where the GPU "
            "reports no engine activity)")


def usage_group(inputs: MonitoringInputs) -> dict:
    return {"name": GROUP, "interval": INTERVAL, "rules": usage_rules(inputs)}
