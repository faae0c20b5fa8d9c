"""The binpack benchmark's pages: the table of medians over seeds, rendered from the replays kept
in results/runs.jsonl, and the page of the scoring-cost measurement. `bash tests/run benchmark
--report` writes them into docs/benchmarks/; tests/unit/test_docs.py checks that the committed table
is what runs.jsonl renders. Standard library only, so the check needs no plotting library."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmark import binpack
from components.teams.settings import DEFAULT_QUEUEING_STRATEGY

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
DOCS = ROOT / "docs" / "benchmarks"
RESULTS_PAGE = "results.md"
PICTURE = "binpack.png"
LATENCY_PAGE = "latency.md"
DRA_LATENCY_PAGE = "dra-latency.md"
SCHEDULING_RESULTS = "scheduling.jsonl"
SCHEDULING_PAGE = "scheduling.md"
TEAMS_RESULTS = "teams.jsonl"
TEAMS_PAGE = "teams.md"
RECLAIM_RESULTS = "reclaim.jsonl"
CONTENDED_RESULTS = "contended.jsonl"
CONTENDED_PAGE = "contended.md"
RECLAIM_PAGE = "reclaim.md"
FAULTS_RESULTS = "faults.jsonl"
FAULTS_PAGE = "faults.md"


def kept(out: Path, name: str = "runs.jsonl") -> list[dict]:
    """Every measurement kept so far in `name` (by default, every replay's figures)."""
    path = out / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def spread(values: list[float | None], fmt: str) -> str:
    """The median and, over more than one value, the range in brackets (absent values
    skipped)."""
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    median = format(statistics.median(present), fmt)
    if len(present) == 1:
        return median
    return f"{median} ({format(min(present), fmt)}–{format(max(present), fmt)})"


def hours(values: list[float | None]) -> str:
    return spread([v * 60 for v in values if v is not None], ".0f")


def lost(shares: list[float | None]) -> str:
    """The median share of the GPU-time run that evictions threw away (work since the last
    checkpoint), when any was."""
    present = [v for v in shares if v]
    return f", {100 * statistics.median(present):.1f}% lost" if present else ""


def most_of_one_job(counts: list[int | None]) -> str:
    """The most evictions or preemptions one job took, over the seeds, where recorded."""
    present = [v for v in counts if v is not None]
    return f", at most {max(present)} of one job" if present and max(present) else ""


def table(rows: list[dict]) -> str:
    """Median over seeds, with the range in brackets."""
    header = ("| mix | nodes | scheduler | seeds | GPU-time vs reference | started on arrival | "
              "8-GPU wait p50 / p95, min | 1-GPU wait p95, min | free 8-GPU nodes | "
              "stranded GPUs | evictions or preemptions / h, GPU-time lost, most of one job | "
              "attempt p50 / p95, ms | "
              "scheduler CPU s / peak MiB |")
    lines = [header, "|" + " --- |" * 3 + " ---: |" * 10]
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["mix"], row["nodes"], row["scheduler"]), []).append(row)
    for (mix, nodes, scheduler), group in groups.items():
        def col(name, group=group):
            return [r.get(name) for r in group]
        def ms(v: float | None) -> float | None:
            return None if v is None else v * 1000
        latency = (f"{spread([ms(v) for v in col('attempt_p50')], '.1f')} / "
                   f"{spread([ms(v) for v in col('attempt_p95')], '.1f')}"
                   if group[0].get("attempt_p50") is not None else "-")
        costs = (f"{spread(col('cpu_seconds'), '.0f')} / {spread(col('peak_rss_mib'), '.0f')}"
                 if group[0].get("cpu_seconds") is not None else "-")
        lines.append(
            f"| {mix} | {nodes} | {scheduler} | {len(group)} | "
            f"{spread([100 * v for v in col('delivered_share')], '.1f')}% | "
            f"{spread([100 * v for v in col('started_on_arrival')], '.1f')}% | "
            f"{hours(col('wait_p50_8'))} / {hours(col('wait_p95_8'))} | "
            f"{hours(col('wait_p95_1'))} | {spread(col('free_nodes'), '.1f')} | "
            f"{spread(col('stranded'), '.1f')} | "
            f"{spread([v or 0.0 for v in col('evictions_per_hour')], '.1f')}"
            f"{lost(col('lost_share'))}{most_of_one_job(col('most_evictions_of_a_job'))} | "
            f"{latency} | {costs} |")
    return "\n".join(lines)


def reservation_table(rows: list[dict]) -> str:
    """The replays with reservation, each against the same seed's reference and the shipped
    profile's replay on the same GPU path without reservation: what the issue's targets are
    stated in."""
    def of(row: dict, scheduler: str) -> dict | None:
        return next((r for r in rows if r["scheduler"] == scheduler and all(
            r.get(k) == row.get(k) for k in ("mix", "nodes", "seed"))), None)

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    lines = ["| mix | scheduler | seeds | GPU-time vs reference | 8-GPU p95 wait vs reference: "
             "with / without reservation | 1-GPU p95 wait, min: with / without | "
             "reservations, pods backfilled, expired | GPU-hours held idle on reserved "
             "nodes |",
             "|" + " --- |" * 2 + " ---: |" * 6]
    groups: dict = {}
    for row in rows:
        if "reservations" in row:
            groups.setdefault((row["mix"], row["scheduler"]), []).append(row)
    for (mix, scheduler), group in groups.items():
        path = scheduler.rpartition(")")[2]     # the GPU path's part of the label
        pairs = [(r, of(r, binpack.REFERENCE), of(r, scheduler.partition(" + ")[0] + path))
                 for r in group]
        with_ = [ratio(r["wait_p95_8"], ref["wait_p95_8"]) for r, ref, _ in pairs if ref]
        without = [ratio(plain["wait_p95_8"], ref["wait_p95_8"])
                   for _, ref, plain in pairs if ref and plain]
        idle = [r["reserved_idle_gpu_hours"] / (r["gpus"] * r["samples"][-1][0]) for r in group]
        lines.append(
            f"| {mix} | {scheduler} | {len(group)} | "
            f"{spread([100 * r['delivered_share'] for r in group], '.1f')}% | "
            f"{spread(with_, '.2f')} / {spread(without, '.2f')} | "
            f"{hours([r['wait_p95_1'] for r in group])} / "
            f"{hours([plain['wait_p95_1'] for _, _, plain in pairs if plain])} | "
            f"{spread([r['reservations'] for r in group], '.0f')}, "
            f"{spread([r.get('backfills') for r in group], '.0f')}, "
            f"{spread([r['reservations_expired'] for r in group], '.0f')} | "
            f"{spread([100 * v for v in idle], '.1f')}% |")
    return "\n".join(lines)


def results_page(rows: list[dict]) -> str:
    """docs/benchmarks/results.md: every replay configuration of runs.jsonl, one row each."""
    return f"""# Binpack benchmark: every replay

<!-- Generated by `bash tests/run benchmark --report` from benchmark/results/runs.jsonl;
do not edit. -->

Median over seeds, with the range over seeds in brackets, one row per mix, cluster size and
scheduler configuration, in the order the replays were first run. The method, the commands that
produced these rows, the conditions of the measurement and what the figures show are in
[the benchmark's page](README.md); the compaction rows are discussed in
[the compaction study](compaction-study.md).

{table(rows)}
"""


def contended_page(rows: list[dict]) -> str:
    """docs/benchmarks/contended.md: the replays of contended traces (`--contended`)."""
    return f"""# Binpack benchmark: contended traces

<!-- Generated by `bash tests/run benchmark --contended SEEDS` from
benchmark/results/contended.jsonl; do not edit. -->

Traces on which even the repacking reference starts less than 80% of the batch GPU-time on
arrival: busy small clusters where whole-node jobs wait. Median over seeds, with the range over
seeds in brackets; columns as in [every replay](results.md). The method and what the figures
show: [the benchmark's page](README.md#contended-traces).

{table(rows)}
{reserving(rows)}"""


def reserving(rows: list[dict]) -> str:
    if not any("reservations" in r for r in rows):
        return ""
    return f"""
## Reservation by attrition

Each replay with reservation against the same seed's reference and the shipped profile's replay
without it on the same GPU path; GPU-hours held idle as a share of the cluster's GPU-hours
([Reservation by attrition](../concepts/reservation.md)).

{reservation_table(rows)}
"""


def latency_page(table_lines: list[str], dra: bool = False,
                 profiles: Sequence[tuple[str, list[str]]] = ()) -> str:
    """docs/benchmarks/latency.md: what scoring every node costs (`--latency`); with `dra`,
    docs/benchmarks/dra-latency.md: the same on both GPU paths of the DRA path's release. With
    `profiles`, where each probe's scheduler spent its CPU (`--pprof`)."""
    table_text = "\n".join(table_lines)
    where = "".join(f"\n### {probe}\n\n```\n" + "\n".join(top) + "\n```\n"
                    for probe, top in profiles)
    if where:
        where = ("\n## Where the time goes\n\nThe scheduler's CPU profile over the start of "
                 "each burst (`go tool pprof -top -cum`: the functions with the most CPU in "
                 "them and below them).\n" + where)
    command = "--latency NODES --dra" if dra else "--latency NODES"
    title = "the cost of the DRA path" if dra else "the cost of scoring every node"
    paths = ("on the DRA path's Kubernetes release, on each GPU path: nodes whose GPUs are\n"
             "in the node's status (device plugin) or in ResourceSlices served through the\n"
             "platform's DeviceClass (DRA)" if dra else "on the example stack's release")
    anchor = "the-dra-path" if dra else "the-cost-of-scoring-every-node"
    return f"""# Binpack benchmark: {title}

<!-- Written by `bash tests/run benchmark {command}`; do not edit. -->

Per cluster size, {paths}: a Deployment's 1-GPU replicas, created first and left
pending, placed on empty 8-GPU nodes by a scheduler started then: the shipped profile (every
feasible node scored), the same with kube-scheduler's adaptive share of nodes scored and with
other shares (`--shares`), and upstream's default profile, each on a fresh control plane. Pods
per second: the replicas over the time from the scheduler's start until the last is bound.
Nodes taken: how many nodes the burst's pods ended on (an eighth of the pods at best). What
the figures mean:
[the benchmark's page](README.md#{anchor}).

{table_text}
{where}"""


def scheduling_page(rows: list[dict]) -> str:
    """docs/benchmarks/scheduling.md: the binpack scheduler's throughput for each client rate
    and its failover for each set of lease timings (`--scheduling`)."""
    bursts = ["| nodes | pending 1-GPU pods | qps / burst | seconds from first to last binding "
              "| pods bound per second | scheduler requests per second |",
              "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in (r for r in rows if r["kind"] == "burst"):
        bursts.append(f"| {r['nodes']} | {r['pods']} | {r['qps']} / {r['burst']} | "
                      f"{r['seconds']:.1f} | {r['pods'] / r['seconds']:.0f} | "
                      f"{r['requests'] / r['seconds']:.0f} |")
    failovers = ["| leaseDuration / renewDeadline / retryPeriod | leader crashes | seconds until "
                 "a pod created at the crash is bound: median (range) |",
                 "| --- | ---: | ---: |"]
    for r in (r for r in rows if r["kind"] == "failover"):
        seconds = r["seconds"]
        failovers.append(f"| {r['leaseDuration']} / {r['renewDeadline']} / {r['retryPeriod']} "
                         f"| {len(seconds)} | {statistics.median(seconds):.1f} "
                         f"({min(seconds):.1f}–{max(seconds):.1f}) |")
    burst_table, failover_table = "\n".join(bursts), "\n".join(failovers)
    return f"""# Binpack scheduler: throughput and failover

<!-- Generated by `bash tests/run benchmark --scheduling` from
benchmark/results/scheduling.jsonl; do not edit. -->

Each client rate binds the same burst of pending 1-GPU pods on a fresh control plane, and each
set of lease timings has its leader killed several times. What the figures mean and why the
shipped settings are what they are:
[the benchmark's page](README.md#scheduler-throughput-and-failover).

{burst_table}

{failover_table}
"""


# Kueue's reasons for preempting a Workload that mean its lender took its GPUs back.
RECLAIM = ("InCohortReclamation", "InCohortReclaimWhileBorrowing")


def preempted(team: dict, causes: tuple[str, ...]) -> float:
    """A team's Workloads preempted per simulated hour for these causes."""
    return sum(team["preempted_per_hour"].get(cause, 0.0) for cause in causes)


def teams_page(rows: list[dict]) -> str:
    """docs/benchmarks/teams.md: the replay with teams against the same trace without them and
    the repacking reference, and each team's figures (`--teams`); medians over seeds, range in
    brackets."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        traces = "contended" if r.get("contended") else "the benchmark's"
        declared = re.search(r"declaring (\S+) times", r.get("reservation", ""))
        queueing = r.get("queueing", DEFAULT_QUEUEING_STRATEGY) \
            + (" + reservation" if r.get("reservation") else "") \
            + (f" (jobs declaring {declared[1]}× their run time)" if declared else "")
        groups.setdefault((r["mix"], r["nodes"], r["gpus"], r["load"], traces, queueing),
                          []).append(r)
    overall = ["| mix | nodes (GPUs) | load | traces | queueing | seeds | GPU-time with teams / "
               "without | with teams / reference | without teams / reference | hours when every "
               "team wanted more than its quota |",
               "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    replays = ("with_teams", "without_teams", "reference")
    reservations = ["| mix | nodes | load | traces | queueing | seeds | 1-GPU jobs' p95 wait, "
                    "min: with teams / without / reference | with teams / without: "
                    "reservations | pods backfilled | expired | GPU-hours held idle on "
                    "reserved nodes |", "| --- | ---: | ---: | --- | --- |" + " ---: |" * 6]
    whole_node = ["| mix | nodes | load | traces | queueing | seeds | started on arrival: with "
                  "teams / without / reference | whole-node jobs' p95 wait, min: with teams / "
                  "without / reference | the same against the reference's, same seed: with "
                  "teams / without | stranded GPUs: with teams / without / reference |",
                  "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    per_team = ["| mix | nodes | load | traces | queueing | team | quota (share) | "
                "GPU-time / entitlement | "
                "admission wait within quota, p50 / p95 (min) | beyond quota, p50 / p95 (min) | "
                "preempted per hour: reclaim / fair sharing | GPU-hours lost to preemption | "
                "contended hours: worst gap to its share, GPUs running / quota held (pp) | "
                "contended hours within 5 pp (%) | preempted before starting, never queued again |",
                "| --- | ---: | ---: | --- | --- | --- |" + " ---: |" * 9]
    for (mix, nodes, gpus, load, traces, queueing), runs in sorted(groups.items()):
        overall.append(
            f"| {mix} | {nodes} ({gpus}) | {load} | {traces} | {queueing} | {len(runs)} | "
            f"{spread([100 * r['delivered_vs_without_teams'] for r in runs], '.1f')}% | "
            f"{spread([100 * r['delivered_vs_reference'] for r in runs], '.1f')}% | "
            f"{spread([100 * r['without_teams_vs_reference'] for r in runs], '.1f')}% | "
            f"{spread([r['contended_hours'] for r in runs], '.0f')} |")
        measured = [r for r in runs if "whole_node_wait_p95" in r]
        if measured:
            def each(key: str, scale: float, fmt: str, runs=measured) -> str:
                return " / ".join(spread([None if r[key][k] is None else scale * r[key][k]
                                          for r in runs], fmt) for k in replays)
            waits = [r["whole_node_wait_p95"] for r in measured]
            def against_reference(replay: str, waits=waits) -> str:
                return spread([w[replay] / w["reference"] if w[replay] is not None
                               and w["reference"] else None for w in waits], ".1f")
            whole_node.append(
                f"| {mix} | {nodes} | {load} | {traces} | {queueing} | {len(measured)} | "
                f"{each('started_on_arrival', 100, '.1f')} | "
                f"{each('whole_node_wait_p95', 60, '.0f')} | "
                f"{against_reference('with_teams')} / {against_reference('without_teams')} | "
                f"{each('stranded', 1, '.1f')} |")
        reserved = [r for r in runs if "reserved" in r]
        if reserved:
            def held(key: str, fmt: str, scale: float = 1, runs=reserved) -> str:
                return " / ".join(spread([scale * r["reserved"][k][key] for r in runs], fmt)
                                  for k in ("with_teams", "without_teams"))
            one_gpu = " / ".join(spread([None if r["one_gpu_wait_p95"][k] is None
                                         else 60 * r["one_gpu_wait_p95"][k] for r in reserved],
                                        ".0f") for k in replays)
            reservations.append(
                f"| {mix} | {nodes} | {load} | {traces} | {queueing} | {len(reserved)} | "
                f"{one_gpu} | {held('reservations', '.0f')} | {held('backfills', '.0f')} | "
                f"{held('reservations_expired', '.0f')} | {held('idle_share', '.1f', 100)}% |")
        for team in runs[0]["teams"]:
            t = [r["teams"][team] for r in runs]
            def pp(key: str, t=t) -> list[float | None]:
                return [None if x.get(key) is None else 100 * x[key] for x in t]
            per_team.append(
                f"| {mix} | {nodes} | {load} | {traces} | {queueing} | {team} | "
                f"{t[0]['quota']} ({100 * t[0]['share']:.0f}%) | "
                f"{spread([100 * x['gpu_time_vs_entitlement'] for x in t], '.0f')}% | "
                f"{spread([x['wait_within_p50'] for x in t], '.1f')} / "
                f"{spread([x['wait_within_p95'] for x in t], '.1f')} | "
                f"{spread([x['wait_beyond_p50'] for x in t], '.0f')} / "
                f"{spread([x['wait_beyond_p95'] for x in t], '.0f')} | "
                f"{spread([preempted(x, RECLAIM) for x in t], '.2f')} / "
                f"{spread([preempted(x, ('InCohortFairSharing',)) for x in t], '.2f')} | "
                f"{spread([x['lost_gpu_hours'] for x in t], '.1f')} | "
                f"{spread(pp('worst_hourly_share_gap'), '.1f')} / "
                f"{spread(pp('worst_hourly_quota_gap'), '.1f')} | "
                f"{spread(pp('hours_within_5pp'), '.0f')} | "
                f"{spread([x.get('never_requeued') for x in t], '.0f')} |")
    overall_table, team_table = "\n".join(overall), "\n".join(per_team)
    reservation_section = "" if len(reservations) == 2 else (
        "With reservation by attrition, played in the replays with and without teams: what "
        "small jobs\npay, and what the reservations did ([Reservation by attrition]"
        "(../concepts/reservation.md)).\n\n" + "\n".join(reservations) + "\n\n")
    whole_node_section = "" if len(whole_node) == 2 else (
        "Whole-node jobs (as many GPUs as the biggest node has) on the replays that recorded "
        "them: how\nlong they waited to start, and the free GPUs stranded on partly used nodes "
        "(mean over the\nsecond half of each replay).\n\n" + "\n".join(whole_node) + "\n\n")
    return f"""# Binpack benchmark with teams

<!-- Generated by `bash tests/run benchmark --teams` from benchmark/results/teams.jsonl;
do not edit. -->

The replay's load split over three teams with bursty demand, with the real Kueue admitting
it against the queues the platform declares; the same trace without teams and the repacking
reference for comparison. The method and what the figures mean:
[the benchmark's page](README.md#teams).

{overall_table}

{whole_node_section}{reservation_section}{team_table}
"""


def reclaim_page(rows: list[dict]) -> str:
    """docs/benchmarks/reclaim.md: each mode's figures, cluster-wide and per team; medians over
    seeds, range in brackets, GPU-hours used against reclaim off on the same seed."""
    groups: dict[tuple, dict[int, dict[str, dict]]] = {}
    for r in rows:
        groups.setdefault((r["mix"], r["nodes"], r["gpus"], r["load"]), {}).setdefault(
            r["seed"], {})[r["mode"]] = r
    cluster = ["| mix | nodes (GPUs) | load | reclaim | seeds | idle share of GPU-hours held | "
               "GPU-hours used, against off | batch wait mean / p95 (min) | 8-GPU wait p95 "
               "(min) | pods reported | keep-alives honoured | run, s |",
               "| --- | ---: | ---: | --- |" + " ---: |" * 8]
    teams = ["| reclaim | team | action | idle GPU-hours handed back (share of idle) | idle "
             "GPU-hours still held | pods evicted (busy; warned first) | notebooks cut short "
             "(work lost, GPU-hours) | stalled jobs evicted (work lost) | keep-alives sent |",
             "| --- | --- | --- |" + " ---: |" * 6]
    for (mix, nodes, gpus, load), seeds in sorted(groups.items()):
        modes = list(dict.fromkeys(mode for by_mode in seeds.values() for mode in by_mode))
        for mode in modes:
            runs = [by_mode[mode] for by_mode in seeds.values() if mode in by_mode]
            off = [by_mode.get("off") for by_mode in seeds.values() if mode in by_mode]
            used = [None if o is None else 100 * (r["used_gpu_hours"] / o["used_gpu_hours"] - 1)
                    for r, o in zip(runs, off, strict=True)]
            label = mode + (" (shipped settings)" if runs[0].get("shipped") else "")
            cluster.append(
                f"| {mix} | {nodes} ({gpus}) | {load} | {label} | {len(runs)} | "
                f"{spread([100 * r['idle_share'] for r in runs], '.1f')}% | "
                f"{spread(used, '+.1f')}% | {hours([r['wait_mean'] for r in runs])} / "
                f"{hours([r['wait_p95'] for r in runs])} | "
                f"{hours([r['wait_p95_8'] for r in runs])} | "
                f"{spread([r['reported'] for r in runs], '.0f')} | "
                f"{spread([r['kept_alive'] for r in runs], '.0f')} | "
                f"{spread([r['run_seconds_mean'] for r in runs], '.2f')} |")
            for team in runs[0]["teams"]:
                t = [r["teams"][team] for r in runs]
                action = ("off" if mode == "off" else
                          "evict" if team in runs[0]["evicting"] else "report")
                teams.append(
                    f"| {label} | {team} | {action} | "
                    f"{spread([x['handed_back_gpu_hours'] for x in t], '.0f')} "
                    f"({spread([100 * x['handed_back_share'] for x in t], '.0f')}%) | "
                    f"{spread([x['idle_gpu_hours'] for x in t], '.0f')} | "
                    f"{spread([x['evicted'] for x in t], '.0f')} "
                    f"({max(x['evicted_busy'] for x in t)}; "
                    f"{'all' if all(x['evicted_warned'] == x['evicted'] for x in t) else 'not all'}"
                    f") | {spread([x['notebooks_cut_short'] for x in t], '.0f')} "
                    f"({spread([x['notebook_work_lost_gpu_hours'] for x in t], '.0f')}) | "
                    f"{spread([x['evicted_stalled'] for x in t], '.0f')} "
                    f"({spread([x['stalled_work_lost_gpu_hours'] for x in t], '.0f')}) | "
                    f"{spread([x['keep_alives_sent'] for x in t], '.0f')} |")
    cluster_table, teams_table = "\n".join(cluster), "\n".join(teams)
    return f"""# Binpack benchmark with idle GPUs

<!-- Generated by `bash tests/run benchmark --reclaim` from
benchmark/results/reclaim.jsonl; do not edit. -->

The replay's trace with batch jobs that hold their GPUs idle for hours and notebooks idle
between bursts, spread over two teams' namespaces, played with idle reclaim off, with one team
evicting while the other only reports, and with both evicting. The method and what the figures
mean: [the benchmark's page](README.md#idle-gpus).

## The cluster

{cluster_table}

## Each team

{teams_table}
"""


def faults_page(rows: list[dict]) -> str:
    """docs/benchmarks/faults.md: the trace with GPU failures replayed with fault remediation
    off (a person acts late) and on (`--faults`); medians over seeds, range in brackets."""
    from benchmark.faults import (
        FAILURE_WINDOW,
        FAILURES_PER_REPLAY,
        MODES,
        PASS_EVERY,
        PUBLISHED_GPU_FAILURES_PER_1000_GPU_DAYS,
        REPAIR_HOURS,
    )
    rate = PUBLISHED_GPU_FAILURES_PER_1000_GPU_DAYS
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        groups.setdefault((r["mix"], r["nodes"], r["gpus"], r["load"]), {}).setdefault(
            r["mode"], []).append(r)
    lines = ["| mix | nodes (GPUs) | load | failed node taken out | seeds | failures (taken out) "
             "| out after (min) | GPU-hours held hung | work lost, GPU-hours | lost per failure, "
             "GPU-hours | lost per 1000 GPU-days at the published rate | jobs hit | their "
             "completion (h) | batch wait mean / p95 (min) | 8-GPU wait p95 (min) |",
             "| --- | ---: | ---: | --- |" + " ---: |" * 11]
    for (mix, nodes, gpus, load), modes in sorted(groups.items()):
        for mode in [m.label for m in MODES if m.label in modes]:
            runs = modes[mode]
            lost = [r["hung_gpu_hours"] + r["lost_work_gpu_hours"] for r in runs]
            per_failure = [cost / r["failures"] for cost, r in zip(lost, runs, strict=True)]
            lines.append(
                f"| {mix} | {nodes} ({gpus}) | {load} | {mode} | {len(runs)} | "
                f"{spread([r['failures'] for r in runs], '.0f')} "
                f"({spread([r['taken_out'] for r in runs], '.0f')}) | "
                f"{hours([r['out_after_mean'] for r in runs])} | "
                f"{spread([r['hung_gpu_hours'] for r in runs], '.0f')} | "
                f"{spread([r['lost_work_gpu_hours'] for r in runs], '.0f')} | "
                f"{spread(per_failure, '.1f')} | "
                f"{spread([c * rate for c in per_failure], '.1f')} | "
                f"{spread([r['jobs_hit'] for r in runs], '.0f')} | "
                f"{spread([r['hit_completion_mean'] for r in runs], '.1f')} | "
                f"{hours([r['wait_mean'] for r in runs])} / "
                f"{hours([r['wait_p95'] for r in runs])} | "
                f"{hours([r['wait_p95_8'] for r in runs])} |")
    table_ = "\n".join(lines)
    low, high = FAILURE_WINDOW
    return f"""# Binpack benchmark with GPU failures

<!-- Generated by `bash tests/run benchmark --faults` from benchmark/results/faults.jsonl; do
not edit. -->

The replay's trace (the same seeds, jobs and arrivals as the other replays) with
{FAILURES_PER_REPLAY} GPU failures per replay, at uniform times between {low:.0%} and {high:.0%}
of the horizon, on uniform nodes, played on the real control plane and binpack scheduler: with fault
remediation off, where a person takes the failed node out after a delay, and with
`remediation.mode: drain` at its defaults, whose pass (the Deployment's own code, with its
ServiceAccount's rights) runs every {PASS_EVERY * 60:.0f} simulated minutes here (every 10 s when
deployed) and is told of the failures as Prometheus would answer them. A failure hangs every pod
on its node: the pods hold their GPUs without progress until taken off, and lose their work since
their last checkpoint (every 30 minutes); a pod that lands on the node before it is out hangs too
(the binpack scheduler prefers it, being busy). A node is repaired {REPAIR_HOURS:.0f} hours after it
was taken out, then returned. Remediation's `report` mode changes nothing in the cluster, so its
figures are those of the person it pages.

Lost GPU-hours are the hours held hung plus the work lost. {FAILURES_PER_REPLAY} failures in a
replay is far more than a cluster this size sees: the cost per failure is scaled to the rate
published for Llama 3's pre-training (419 unexpected interruptions in 54 days on 16,384 GPUs,
58.7% of them GPU issues, about {rate:.2f} GPU failures per 1000 GPU-days). With the defaults
(`maxNodes` 2, `maxShare` 0.1, `window` 1h) one of these 16 nodes may be taken out of service
within an hour: a failure within the hour after another waits for the window to have room, as a
person would not. The trace's jobs fit on one node; a job that spans nodes hangs whole on one
failed GPU.

{table_}
"""
