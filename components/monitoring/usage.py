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

from .inputs import MonitoringInputs

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
PRICE = "gpu_platform:price_per_gpu_hour:setting"
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


def gpu_hours(level: str, kind: str) -> str:
    """GPU-hours `allocated`, `used` (active) or `idle` over the window, by GPU model."""
    return f"gpu_platform:{level}_gpu_hours_{kind}:window"


def range_gpu_hours(level: str, select: str, over: str, priced: bool) -> dict[str, str]:
    """Showback over a range (`over`, a PromQL duration, `$__range` on the dashboard): each
    column with its query, one series per `level` (team or namespace) of the pods `select`
    matches. GPU-hours allocated, used and idle are sums of the minute samples the rules record;
    costs, where `priced`, multiply them by the price of each GPU model (a model without a
    price has no price series, and the join leaves it out). One definition for the dashboard's
    tables and the showback report."""
    def over_range(series: str) -> str:
        return f"sum_over_time({series}{{{select}}}[{over}])"
    allocated = over_range(held(level))
    used = over_range(active(level))
    idle = f"({allocated} - {used})"

    def total(expr: str) -> str:
        return f"sum by ({level}) ({expr}) / {SAMPLES_PER_HOUR}"

    def cost(expr: str) -> str:
        return total(f"{expr} * on (modelName) group_left () {PRICE}")
    columns = {"GPU-hours allocated": total(allocated), "GPU-hours used": total(used),
               "GPU-hours idle": total(idle)}
    if priced:
        columns |= {"cost": cost(allocated), "cost of idle GPUs": cost(idle)}
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


def _level_counts(level: str, by: str, gpus: str) -> list[dict]:
    """GPUs held and active now at one level; a GPU that several of its pods share (time
    slices, a shared claim) counts once per namespace and team."""
    distinct = gpus if level == "pod" else f"max by ({by}, UUID) ({gpus})"
    return [{"record": held(level), "expr": f"count by ({by}) ({distinct})"},
            {"record": active(level), "expr": f"sum by ({by}) ({distinct})"}]


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
    settings += [{"record": PRICE, "expr": f"vector({price!r})", "labels": {"modelName": model}}
                 for model, price in sorted(usage.price_per_gpu_hour.items())]
    levels = [("pod", POD_KEY, GPU_ACTIVE),
              ("namespace", "namespace, modelName", GPU_ACTIVE)]
    if teams:
        levels.append(("team", "team, modelName",
                       f"{GPU_ACTIVE} * on (namespace) group_left (team) {TEAM_NAMESPACE}"))
    counts = [rule for level, by, gpus in levels for rule in _level_counts(level, by, gpus)]
    hours = [rule for level, _, _ in levels for rule in _level_hours(level, window)]
    return [
        *settings,
        {"record": GPU_ACTIVITY, "expr": activity()},
        {"record": GPU_ACTIVE, "expr": f"{GPU_ACTIVITY} > bool {threshold!r}"},
        *counts,
        *hours,
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
