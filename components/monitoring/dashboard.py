"""The GPU platform's Grafana dashboard, built with grafana-foundation-sdk.

It answers the platform team's questions: who (namespace, pod) holds how many GPUs and how hard
they use them, which nodes can take a 1-, 2-, 4- or 8-GPU pod now, how many free GPUs are
stranded by fragmentation, which pods hold GPUs idle, and whether the GPUs are healthy. Capacity
panels read the recorded series of `gpu_rules` (kube-state-metrics); usage and health panels read
the DCGM exporter. See `gpu_rules` for how the two join.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import dashboard as board
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

from ..base.facts import AUDIT_LABEL, kueue_series, refusing_webhooks
from ..base.gpu_faults import (
    DCGM_JOB,
    FAULTS,
    GPU_HOURS_LOST,
    GPUS_OUT_OF_SERVICE,
    PODS_MOVED,
    QUARANTINE_TAINT,
)
from ..base.ksm import ksm_label
from .inputs import MonitoringInputs
from .rules import (
    NAMESPACE_ALLOCATED,
    NODE_ALLOCATABLE,
    NODE_ALLOCATED,
    NODE_FREE,
    POD_ALLOCATED,
    STRANDED,
    WHOLE_FREE_NODES,
    allocated_idle,
    domain_free_gpus,
    domain_whole_free_nodes,
    extra_device_plugins,
    unserved_gpu_nodes,
    untainted_gpu_nodes,
)
from .usage import (
    IDLE_POD_GPUS,
    TEAM_NAMESPACE,
    active,
    gpu_hours,
    held,
    idle_means,
    range_gpu_hours,
    team_joined,
    team_namespaces,
)

UID = "gpu-platform-gpus"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
POD_SIZES = (1, 2, 4, 8)
# Filters from the dashboard's variables. GPU model is a DCGM label, so it narrows the usage and
# health panels; the capacity panels show every node the node variable selects.
GPU_FILTER = 'node=~"$node", modelName=~"$model"'
POD_FILTER = f'{GPU_FILTER}, namespace=~"$namespace"'
WORKLOAD_FILTER = f'{POD_FILTER}, pod!=""'
POD_UTILIZATION = f"avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{{WORKLOAD_FILTER}}})"
POD_MEMORY = f"sum by (namespace, pod) (DCGM_FI_DEV_FB_USED{{{WORKLOAD_FILTER}}})"
# kube-scheduler's histogram of victims per preemption (count: preemptions, sum: pods).
PREEMPTION_VICTIMS = "scheduler_preemption_victims"


def _query(expr: str, legend: str = "", ref: str = "A", instant: bool = False):
    query = (prometheus.Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref)
             .datasource(DATASOURCE))
    return query.instant() if instant else query.range()


def _place(panel, title: str, description: str, targets: list, unit: str, width: int,
           height: int):
    panel = (panel.title(title).description(description).datasource(DATASOURCE).unit(unit)
             .span(width).height(height))
    for target in targets:
        panel = panel.with_target(target)
    return panel


def _timeseries(title, description, targets, unit="short", width=12, height=8):
    return _place(timeseries.Panel(), title, description, targets, unit, width, height)


def _stat(title, description, targets, unit="short", width=6, height=5):
    return _place(stat.Panel(), title, description, targets, unit, width, height)


def _bars(title, description, target, unit="short", width=12, height=8):
    return _place(bargauge.Panel(), title, description, [target], unit, width, height)


def _table(title, description, targets, unit="short", width=12, height=8):
    # One row per pod: the instant queries' results joined on their labels.
    return (_place(table.Panel(), title, description, targets, unit, width, height)
            .with_transformation(model.DataTransformerConfig(id_val="merge", options={})))


def _variable(name: str, label: str, query: str):
    return (board.QueryVariable(name).label(label).query(query).datasource(DATASOURCE)
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(model.VariableOption(selected=True, text="All", value="$__all")))


def _rows(inputs: MonitoringInputs) -> list[tuple[str, list]]:
    alerts = inputs.monitoring.alerts
    largest = inputs.monitoring.largest_common_request
    node = 'node=~"$node"'
    # The ServiceMonitor's job label is the scheduler's Service name.
    scheduler = f'job="{inputs.scheduler.name}"'
    taint = inputs.gpu_nodes.taints[0]
    refused_by = refusing_webhooks(inputs.admission.webhook_name, inputs.teams is not None)
    return [
        ("Capacity: where GPUs are free", [
            _stat("GPUs allocated / allocatable",
                  "GPUs requested by pods bound to a node and not finished, against what the "
                  "nodes advertise.",
                  [_query(f"sum({NODE_ALLOCATED}{{{node}}})", "allocated", "A", True),
                   _query(f"sum({NODE_ALLOCATABLE}{{{node}}})", "allocatable", "B", True)]),
            _stat("Nodes that can take an N-GPU pod now",
                  "Nodes whose free GPUs fit a pod of that size.",
                  [_query(f"count({NODE_FREE}{{{node}}} >= {size}) or vector(0)",
                          f"{size} GPU", chr(ord("A") + i), True)
                   for i, size in enumerate(POD_SIZES)], width=10),
            _stat("Largest GPU pod that can be placed",
                  "The most free GPUs on any one node.",
                  [_query(f"max({NODE_FREE}{{{node}}}) or vector(0)", "GPUs", "A", True)],
                  width=4),
            _stat("Stranded GPUs",
                  f"Free GPUs on busy nodes that cannot take a {largest}-GPU pod (or, on a "
                  "smaller node, a whole-node pod): capacity lost to fragmentation.",
                  [_query(STRANDED, "stranded", "A", True)], width=4),
            _bars("Free GPUs per node", "Allocatable minus allocated, per node.",
                  _query(f"{NODE_FREE}{{{node}}}", "{{node}}", "A", True)),
            *domain_panels(inputs),
            _timeseries("GPUs allocated and allocatable per node", "",
                        [_query(f"{NODE_ALLOCATED}{{{node}}}", "{{node}} allocated", "A"),
                         _query(f"{NODE_ALLOCATABLE}{{{node}}}", "{{node}} allocatable", "B")]),
            _timeseries("Stranded GPUs over time", "See 'Stranded GPUs'.",
                        [_query(STRANDED, "stranded", "A")], height=6),
            _timeseries("Whole free GPU nodes", "GPU nodes with every GPU free: room for a "
                        "whole-node job. Compaction, when on, makes more of them.",
                        [_query(WHOLE_FREE_NODES, "whole free nodes", "A")], height=6),
            _timeseries("Evictions per hour",
                        "Pod evictions the API server granted, and those a "
                        "PodDisruptionBudget refused (HTTP 429), cluster-wide: compaction's, "
                        "and node drains'.",
                        [_query('sum by (code) (increase(apiserver_request_total{'
                                'resource="pods", subresource="eviction", verb="POST", '
                                'code=~"201|429"}[1h]))', "HTTP {{code}}", "A")],
                        width=12, height=6),
            _timeseries("GPU pods preempted per hour",
                        "Pods of the preemptible class that the binpack scheduler preempted to "
                        "place a GPU pod that fit nowhere (see "
                        "docs/concepts/preemptible-gpu-pods.md), and the preemptions that made "
                        "room.",
                        [_query(f"sum(increase({PREEMPTION_VICTIMS}_sum{{{scheduler}}}[1h]))",
                                "pods preempted", "A"),
                         _query(f"sum(increase({PREEMPTION_VICTIMS}_count{{{scheduler}}}[1h]))",
                                "preemptions", "B")],
                        width=12, height=6),
        ]),
        ("Usage: who holds GPUs and how hard they use them", [
            _timeseries("GPUs allocated by namespace", "",
                        [_query(f'{NAMESPACE_ALLOCATED}{{namespace=~"$namespace"}}',
                                "{{namespace}}")]),
            _timeseries("GPU utilization by namespace",
                        "Average utilization of the GPUs allocated to the namespace's pods.",
                        [_query(f"avg by (namespace) (DCGM_FI_DEV_GPU_UTIL{{{WORKLOAD_FILTER}}})",
                                "{{namespace}}")], unit="percent"),
            _timeseries("GPU memory used by namespace", "Framebuffer memory, MiB.",
                        [_query(f"sum by (namespace) (DCGM_FI_DEV_FB_USED{{{WORKLOAD_FILTER}}})",
                                "{{namespace}}")], unit="decmbytes", width=24, height=6),
            _table("GPUs by pod", "Allocated GPUs, their average utilization and framebuffer "
                                  "memory used, per pod.",
                   [_query(f'{POD_ALLOCATED}{{namespace=~"$namespace"}}', "", "A", True),
                    _query(POD_UTILIZATION, "", "B", True),
                    _query(POD_MEMORY, "", "C", True)], width=24),
            _timeseries("GPU utilization by pod", "",
                        [_query(POD_UTILIZATION, "{{namespace}}/{{pod}}")], unit="percent"),
            _timeseries("GPU memory used by pod", "Framebuffer memory, MiB.",
                        [_query(POD_MEMORY, "{{namespace}}/{{pod}}")], unit="decmbytes"),
            _table(f"Idle for {alerts.idle_for} (GpuAllocatedIdle)",
                   "Pods that " + idle_means(inputs.monitoring.usage.active_threshold,
                                             alerts.idle_for) + ": the pods the alert names.",
                   [_query(allocated_idle(inputs, POD_FILTER), "", "A", True)], width=24),
        ]),
        ("Use and showback: GPU-hours allocated, used and idle", showback_panels(inputs)),
        ("Admission: pods that broke the rules", [
            _timeseries("Requests refused by the GPU admission policy",
                        "Pod, ephemeral-container and claim requests the policy refused, per "
                        "hour (the API server's own count; enforce and mutate modes).",
                        [_query(f"sum by (operation) (increase("
                                f"apiserver_admission_webhook_rejection_count{{name=~"
                                f'"{"|".join(refused_by)}", '
                                f'error_type="no_error"}}[1h]))', "{{operation}}")]),
            _timeseries("Pods admitted against the rules (audit mode)",
                        f"Pods carrying the {AUDIT_LABEL} label, by namespace: the ones "
                        "enforce mode would refuse.",
                        [_query(f"count by (namespace) (kube_pod_labels{{"
                                f'{ksm_label(AUDIT_LABEL)}="violation", '
                                f'namespace=~"$namespace"}})', "{{namespace}}")]),
        ]),
        ("Health", [
            _timeseries("Temperature per GPU", "", [_query(
                f"DCGM_FI_DEV_GPU_TEMP{{{GPU_FILTER}}}", "{{node}} gpu{{gpu}}")],
                unit="celsius"),
            _timeseries("Power per GPU", "", [_query(
                f"DCGM_FI_DEV_POWER_USAGE{{{GPU_FILTER}}}", "{{node}} gpu{{gpu}}")], unit="watt"),
            _timeseries("Utilization per GPU", "", [_query(
                f"DCGM_FI_DEV_GPU_UTIL{{{GPU_FILTER}}}", "{{node}} gpu{{gpu}} {{modelName}}")],
                unit="percent"),
            _timeseries("Memory used per GPU", "Share of framebuffer memory in use.", [_query(
                f"DCGM_FI_DEV_FB_USED{{{GPU_FILTER}}} / (DCGM_FI_DEV_FB_USED{{{GPU_FILTER}}} + "
                f"DCGM_FI_DEV_FB_FREE{{{GPU_FILTER}}})", "{{node}} gpu{{gpu}}")],
                unit="percentunit"),
            _table("GPU faults now",
                   "Every GPU showing a fault, whatever the filters: the fault, whether it "
                   "takes the node out of service (quarantine) or is watched, and the evidence "
                   "(an XID code, a count of errors).",
                   [_query(faults_now(inputs), "", "A", True)]),
            _stat("DCGM exporters up", "Scrape health of the exporter on each GPU node.",
                  [_query(f'up{{job="{DCGM_JOB}", {node}}}', "{{node}}", "A", True)], width=12),
        ]),
        ("GPU faults", [
            _stat("GPUs out of service",
                  "GPUs taken out of new placement after a fault (fault remediation), until "
                  "repaired.", [_query(f"{gpus_out(inputs)} or vector(0)", "", "A", True)]),
            _table("GPU nodes out of service",
                   "Each node with GPUs out of service and the fault that took them out; the "
                   "node's gpu-platform.io/gpu-fault-since annotation says since when.",
                   [_query(f"max by (node, value) ({out_by_node(inputs)})", "", "A", True)],
                   width=18),
            _timeseries("GPUs out of service over time", "",
                        [_query(gpus_out(inputs), "GPUs")], width=12),
            _table("GPU-hours lost to faults",
                   "Over the dashboard's range, by team (namespace outside teams): the GPU-hours "
                   "the pods moved off failed nodes had run there since they started (the work "
                   "lost where they do not checkpoint), and how many pods were moved (fault "
                   "remediation's counters).",
                   [_query(fault_costs(inputs, GPU_HOURS_LOST), "", "A", True),
                    _query(fault_costs(inputs, PODS_MOVED), "", "B", True)]),
        ]),
        # Every such node, whatever the node filter: the filter lists only nodes with GPUs.
        ("GPU nodes outside the platform's rules", [
            _table("GPU nodes without the GPU taint",
                   f"Nodes labelled as GPU nodes that do not carry {taint} (alert "
                   "GpuNodeUntainted).", [_query(untainted_gpu_nodes(inputs), "", "A", True)],
                   width=8),
            _table("GPU nodes whose GPUs nothing serves",
                   "Nodes labelled as GPU nodes " + ("for which the DCGM exporter reports no GPU"
                                                     if inputs.gpu_path == "dra" else
                                                     "that advertise no NVIDIA resource")
                   + " (alert GpuNodeGpusNotServed).",
                   [_query(unserved_gpu_nodes(inputs), "", "A", True)], width=8),
            _table("Nodes with more device plugins than allowed",
                   "Running device plugin pods per node, where the GPU path allows fewer (alert "
                   "GpuNodeExtraDevicePlugin).",
                   [_query(extra_device_plugins(inputs), "", "A", True)], width=8),
        ]),
    ]


def out_by_node(inputs: MonitoringInputs) -> str:
    """GPUs out of service by node and fault (`value`): the quarantined nodes' GPUs, or on the
    DRA path, where the failed devices are tainted instead, the remediation pod's count."""
    if inputs.gpu_path == "dra":
        return f"{GPUS_OUT_OF_SERVICE} > 0"
    return (f"{NODE_ALLOCATABLE} * on (node) group_right () max by (node, value) "
            f'(kube_node_spec_taint{{key="{QUARANTINE_TAINT}"}})')


def gpus_out(inputs: MonitoringInputs) -> str:
    return f"sum({out_by_node(inputs)})"


def fault_costs(inputs: MonitoringInputs, counter: str) -> str:
    """`counter` of fault remediation over the dashboard's range, by team where the namespace
    is a team's, else by namespace."""
    by_namespace = f"sum by (namespace) (increase({counter}[$__range]))"
    if not team_namespaces(inputs):
        return by_namespace
    return (f"sum by (team) ({team_joined(by_namespace)}) "
            f"or {by_namespace} unless on (namespace) {TEAM_NAMESPACE}")


def faults_now(inputs: MonitoringInputs) -> str:
    """Each GPU with a fault, labelled with the fault and its action (base/gpu_faults.py)."""
    codes = inputs.monitoring.alerts.fatal_xid_codes
    return " or ".join(fault.labelled(fault.expr(codes)) for fault in FAULTS)


def domain_panels(inputs: MonitoringInputs) -> list:
    """With a network topology (teams.topology): per domain of each level, its free GPUs and
    its whole free GPU nodes, which decide where a gang that must stay in one domain fits."""
    levels = inputs.teams.topology_levels if inputs.teams else []
    panels = []
    for level in levels:
        legend = "{{" + ksm_label(level) + "}}"
        panels += [
            _bars(f"Free GPUs per {level}", f"Free GPUs summed over the GPU nodes of each "
                  f"domain of the level {level}.", _query(domain_free_gpus(level), legend,
                                                          "A", True)),
            _bars(f"Whole free GPU nodes per {level}", "GPU nodes with every GPU free in each "
                  "domain: how many pods of a whole-node gang that requires one domain of this "
                  "level it can take now.", _query(domain_whole_free_nodes(level), legend, "A",
                                                   True)),
        ]
    return panels


def _columns(title: str, description: str, columns: list[tuple[str, str, str]], width: int):
    """A table of instant queries, one row per label set, each query a named column of its own
    unit (name, unit, expression)."""
    panel = _table(title, description, [_query(expr, "", chr(ord("A") + i), True)
                                        for i, (_, _, expr) in enumerate(columns)],
                   width=width).decimals(2).with_transformation(model.DataTransformerConfig(
                       id_val="organize", options={"excludeByName": {"Time": True}}))
    for i, (name, unit, _) in enumerate(columns):
        # Grafana names a merged query's value column after the query.
        panel = panel.override_by_name(f"Value #{chr(ord('A') + i)}", [
            model.DynamicConfigValue(id_val="displayName", value=name),
            model.DynamicConfigValue(id_val="unit", value=unit)])
    return panel


def _range_hours(level: str, select: str, priced: bool, currency: str | None) -> list:
    """The showback table's columns over the dashboard's time range, with their units."""
    money = f"suffix: {currency}" if currency else "none"
    return [(name, money if name.startswith("cost") else "none", expr)
            for name, expr in range_gpu_hours(level, select, "$__range", priced).items()]


def showback_panels(inputs: MonitoringInputs) -> list:
    """GPU use next to allocation: GPU-hours allocated, used and idle, and their cost, per team
    and namespace over the dashboard's range; GPUs held and active; the pods holding idle GPUs
    now."""
    usage = inputs.monitoring.usage
    priced = usage.priced()
    window, percent = usage.window, f"{usage.active_threshold * 100:g}%"
    model_filter = 'modelName=~"$model"'
    namespaces = f'namespace=~"$namespace", {model_filter}'
    pods = f'{namespaces}, node=~"$node"'
    active_means = (f"A GPU is active while its engine is busy more than {percent} of the "
                    "time (DCGM_FI_PROF_GR_ENGINE_ACTIVE; DCGM_FI_DEV_GPU_UTIL where the GPU "
                    "does not report it).")
    cost_means = (" Cost: each minute a GPU was held, its price per GPU-hour over 60: that of "
                  "the first of monitoring.usage.nodeGroupPrices its node matches, else "
                  "pricePerGpuHour of its model; unpriced GPUs cost nothing." if priced else "")
    teams = [
        _columns("GPU-hours per team",
                 "Over the dashboard's time range, GPUs of the team's namespaces: held "
                 "(allocated), active (used), and held but not active (idle). "
                 + active_means + cost_means,
                 _range_hours("team", model_filter, priced, usage.currency), width=12),
        _timeseries(f"Idle GPU-hours per team, over the last {window}", active_means,
                    [_query(f"sum by (team) ({gpu_hours('team', 'idle')}{{{model_filter}}})",
                            "{{team}}")], width=12),
    ] if team_namespaces(inputs) else []
    return [
        _stat("GPUs held, and active now",
              "GPUs the exporter sees allocated to pods, and those of them active. "
              + active_means,
              [_query(f"sum({held('namespace')}{{{namespaces}}})", "held", "A", True),
               _query(f"sum({active('namespace')}{{{namespaces}}})", "active", "B", True)],
              width=6),
        _timeseries("GPUs held and active", active_means,
                    [_query(f"sum({held('namespace')}{{{namespaces}}})", "held", "A"),
                     _query(f"sum({active('namespace')}{{{namespaces}}})", "active", "B")],
                    width=18, height=5),
        *teams,
        _columns("GPU-hours per namespace",
                 "Over the dashboard's time range: GPU-hours held (allocated), active (used), "
                 "and held but not active (idle). " + active_means + cost_means,
                 _range_hours("namespace", namespaces, priced, usage.currency),
                 width=12),
        _timeseries(f"Idle GPU-hours per namespace, over the last {window}", active_means,
                    [_query(f"sum by (namespace) ({gpu_hours('namespace', 'idle')}"
                            f"{{{namespaces}}})", "{{namespace}}")], width=12),
        _columns("Pods holding idle GPUs now",
                 f"Pods that have held their GPUs for the last {window} without any of them "
                 f"being active at any sample ({percent} engine activity or less); a pod "
                 "that started within it is not judged yet.",
                 [("GPUs", "none", f"{IDLE_POD_GPUS}{{{pods}}}"),
                  (f"GPU-hours idle, last {window}", "none",
                   f"{gpu_hours('pod', 'idle')}{{{pods}}} and on (namespace, pod) "
                   f"{IDLE_POD_GPUS}")], width=24),
    ]


TEAM = 'cluster_queue="$team"'


def team_panels() -> list:
    """One team's row (repeated for each team): its quota, what it uses, borrows and could lend,
    what waits, and how long workloads wait to be admitted."""
    usage = kueue_series("cluster_queue_resource_usage", "resource", f", {TEAM}")
    nominal = kueue_series("cluster_queue_nominal_quota", "resource", f", {TEAM}")
    lending = kueue_series("cluster_queue_lending_limit", "resource", f", {TEAM}")
    waits = f'kueue_admission_wait_time_seconds_bucket{{{TEAM}, replica_role!="follower"}}'
    return [
        _stat("GPU quota", "The team's nominal quota, per GPU resource.",
              [_query(nominal, "{{resource}}", "A", True)], width=4),
        _timeseries("GPUs in use", "GPUs of the team's admitted workloads, against its quota.",
                    [_query(usage, "in use {{resource}}", "A"),
                     _query(nominal, "quota {{resource}}", "B")], width=5),
        _timeseries("Borrowed, and idle quota others may borrow",
                    "Borrowed: what the team uses beyond its quota, from others' idle quota "
                    "(reclaimed when they need it). Lendable: its idle quota, up to its "
                    "lending limit; what other teams borrow comes from such quota.",
                    [_query(f"clamp_min({usage} - {nominal}, 0)", "borrowed {{resource}}", "A"),
                     _query(f"clamp_min({nominal} - {usage}, 0) < {lending} or "
                            f"{lending} <= clamp_min({nominal} - {usage}, 0)",
                            "lendable {{resource}}", "B")], width=5),
        _timeseries("Pending workloads",
                    "Workloads waiting for quota: active ones are tried again as quota frees; "
                    "inadmissible ones wait for something to change (a flavor, a quota).",
                    [_query(f'sum by (status) (kueue_pending_workloads{{{TEAM}, '
                            f'replica_role!="follower"}})', "{{status}}", "A")], width=5),
        _timeseries("Admission wait", "Time from a workload's creation (or requeue) to its "
                    "admission, p50 and p95 over an hour.",
                    [_query(f"histogram_quantile({q}, sum by (le) (rate({waits}[1h])))",
                            f"p{round(q * 100)}", ref)
                     for q, ref in ((0.5, "A"), (0.95, "B"))], unit="s", width=5),
    ]


def dashboard(inputs: MonitoringInputs) -> dict:
    """The dashboard model as Grafana stores it."""
    builder = (board.Dashboard("GPU platform: allocation, usage and free capacity")
               .uid(UID).tags(["gpu", "gpu-platform"]).timezone("browser").refresh("30s")
               .time("now-6h", "now").readonly()
               .with_variable(board.DatasourceVariable("datasource").label("Data source")
                              .type("prometheus"))
               .with_variable(_variable("namespace", "Namespace", f"label_values("
                                        f"{NAMESPACE_ALLOCATED}, namespace)"))
               .with_variable(_variable("node", "Node",
                                        f"label_values({NODE_ALLOCATABLE}, node)"))
               .with_variable(_variable("model", "GPU model",
                                        "label_values(DCGM_FI_DEV_GPU_UTIL, modelName)")))
    rows: list[tuple[str, list, str | None]] = [(title, panels, None)
                                                for title, panels in _rows(inputs)]
    if inputs.teams is not None:
        builder = builder.with_variable(_variable(
            "team", "Team", 'label_values(kueue_cluster_queue_nominal_quota{replica_role!='
                            '"follower"}, cluster_queue)'))
        rows.append(("Team $team", team_panels(), "team"))
    panel_id = 0
    for title, panels, repeat in rows:
        panel_id += 1
        row = board.Row(title).id(panel_id)
        builder = builder.with_row(row.repeat(repeat) if repeat else row)
        for panel in panels:
            panel_id += 1
            builder = builder.with_panel(panel.id(panel_id))
    return _without_nulls(json.loads(JSONEncoder(sort_keys=True).encode(builder.build())))


def _without_nulls(value: Any) -> Any:
    """Unset options are left out, as Grafana itself saves them, rather than sent as null."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def queries(board_json: dict) -> list[str]:
    """Every PromQL expression of a dashboard: its panels' targets and its query variables."""
    exprs = [target["expr"] for panel in board_json["panels"]
             for target in panel.get("targets", [])]
    exprs += [v["query"] for v in board_json["templating"]["list"] if v["type"] == "query"]
    return exprs
