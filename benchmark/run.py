"""The binpack benchmark: `bash tests/run benchmark [options]` (see docs/benchmarks/README.md).

Replays seeded traces against the real kube-scheduler with each profile and against the
repacking reference, keeps every replay's figures in results/runs.jsonl (so a long run can be
split and resumed), and writes the table of medians over seeds (report.py) and a plot into
docs/benchmarks/.
`--latency NODES` instead measures what scoring every node costs at those cluster sizes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from benchmark import (
    binpack,
    faults,
    real_cluster,
    reclaim,
    replay_setup,
    scheduling,
    teams,
    workload,
)
from benchmark.report import (
    CONTENDED_PAGE,
    CONTENDED_RESULTS,
    DOCS,
    DRA_LATENCY_PAGE,
    FAULTS_PAGE,
    FAULTS_RESULTS,
    LATENCY_PAGE,
    PICTURE,
    RECLAIM_PAGE,
    RECLAIM_RESULTS,
    RESULTS,
    RESULTS_PAGE,
    SCHEDULING_PAGE,
    SCHEDULING_RESULTS,
    TEAMS_PAGE,
    TEAMS_RESULTS,
    contended_page,
    faults_page,
    kept,
    latency_page,
    reclaim_page,
    results_page,
    scheduling_page,
    table,
    teams_page,
)
from components.teams.settings import (
    DEFAULT_QUEUEING_STRATEGY,
    QUEUEING_STRATEGIES,
)
from tests.kit import harness, tools

DEFAULT_OUT = RESULTS
SIZES = (1, 2, 4, 8)
DEFAULT_COMPACTION_INTERVAL = 0.25     # simulated hours: the shipped schedule, every 15 minutes


def progress_printer(label: str):
    state = {"last": 0.0}

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - state["last"] >= 10:
            state["last"] = now
            print(f"  {label}: {done}/{total} trace events", file=sys.stderr, flush=True)
    return report


def figures(outcome: binpack.Outcome, reference: binpack.Outcome) -> dict:
    """One replay's figures, as kept in runs.jsonl."""
    row = {"scheduler": outcome.scheduler,
           "delivered_share": outcome.delivered_gpu_hours() / reference.delivered_gpu_hours(),
           "utilization": outcome.delivered_gpu_hours() / (outcome.total_gpus * outcome.horizon),
           "started_on_arrival": outcome.started_on_arrival(),
           "free_nodes": outcome.mean_after_warmup("free_nodes"),
           "stranded": outcome.mean_after_warmup("stranded"),
           "waiting_gpus": outcome.mean_after_warmup("waiting_gpus"),
           "samples": [[s.time, s.free_nodes, s.stranded, s.waiting_gpus]
                       for s in outcome.samples],
           "evictions_per_hour": outcome.evictions / outcome.horizon,
           "lost_share": outcome.lost_gpu_hours / outcome.delivered_gpu_hours(),
           "resume_wait_p95": binpack.percentile(outcome.resume_waits(), 0.95),
           "most_evictions_of_a_job": max(outcome.evictions_by_job().values(), default=0),
           "job_backoff_hours": outcome.job_backoff_hours(),
           **outcome.scheduler_metrics}
    for gpus in SIZES:
        row[f"wait_p50_{gpus}"] = outcome.wait(gpus, 0.5)
        row[f"wait_p95_{gpus}"] = outcome.wait(gpus, 0.95)
    return row


def run(args, settings) -> None:
    """Replay every configuration asked for, keeping each replay's figures in runs.jsonl as
    soon as it ends; a replay already kept there (same trace and scheduler) is skipped."""
    configs = replay_setup.profiles(settings, args.variants, args.shares)
    shipped = configs[settings.scheduler.name]
    paths = gpu_paths(args)
    if args.dra:
        shares = [replay_setup.share_label(settings.scheduler.name, s) for s in args.shares]
        configs = {settings.scheduler.name: shipped} | {label: configs[label] for label in shares}
    if args.profiles:
        unknown = set(args.profiles) - set(configs)
        if unknown:
            sys.exit(f"--profile: unknown {sorted(unknown)}; allowed: {list(configs)}")
        configs = {k: v for k, v in configs.items() if k in args.profiles}
    for mix in args.mixes:
        kind = args.cluster or workload.DEFAULT_CLUSTER[mix]
        for size in args.nodes:
            nodes = workload.CLUSTERS[kind](size)
            total = sum(s.gpus for s in nodes.values())
            for seed in contended_seeds(args, mix, nodes) if args.contended else args.seeds:
                if args.contended and args.only_seeds and seed not in args.only_seeds:
                    continue
                biggest = max(nodes.values(), key=lambda shape: shape.gpus)
                trace = workload.generate(mix, seed, int(args.jobs_per_gpu * total), total,
                                          args.load, args.inference_share,
                                          fits=workload.fits_on(biggest))
                key = {"mix": mix, "cluster": kind, "nodes": size, "gpus": total, "seed": seed,
                       "jobs": len(trace.jobs), "load": args.load,
                       "inference_share": args.inference_share}
                done = {r["scheduler"] for r in kept(args.out, args.results)
                        if all(r.get(k) == v for k, v in key.items())}
                print(f"{mix} on {size} {kind} nodes ({total} GPUs), seed {seed}: "
                      f"{len(trace.jobs)} jobs, {len(trace.services)} inference services, "
                      f"{trace.horizon:.0f} simulated hours", file=sys.stderr, flush=True)
                best = binpack.reference(trace, nodes)
                if best.scheduler not in done:
                    keep(args.out, args.results, key | figures(best, best))
                for (name, config), path in itertools.product(configs.items(), paths):
                    label = name + path.label
                    if label in done:
                        continue
                    started = time.monotonic()
                    outcome = real_cluster.replay(label, config, trace, nodes, settings,
                                                  progress_printer(label), gpu_path=path)
                    print(f"  {label}: {time.monotonic() - started:.0f}s", file=sys.stderr,
                          flush=True)
                    keep(args.out, args.results, key | figures(outcome, best))
                for path in paths:
                    label = moving_label(args, settings, biggest.gpus)
                    if not label or label + path.label in done:
                        continue
                    compaction = replay_setup.compaction_for(
                        settings, trace, args.compaction, args.compaction_jobs,
                        args.compaction_interval, args.out / "work") \
                        if args.compaction is not None else None
                    preemptible = replay_setup.preemptible_jobs(trace, args.preemptible,
                                                                biggest.gpus)
                    reservation = reservation_play(args).on(settings, path) \
                        if args.reservation else None
                    started = time.monotonic()
                    outcome = real_cluster.replay(label + path.label, shipped, trace, nodes,
                                                  settings, progress_printer(label),
                                                  compaction, preemptible,
                                                  args.checkpoint_every, path, reservation)
                    print(f"  {label + path.label}: {time.monotonic() - started:.0f}s, "
                          f"{outcome.evictions} evictions and preemptions", file=sys.stderr,
                          flush=True)
                    keep(args.out, args.results, key | figures(outcome, best))


def contended_seeds(args, mix: str, nodes: dict) -> list[int]:
    """The first `args.contended` contended seeds of `mix` on `nodes` (binpack.contended_seeds)."""
    biggest = max(nodes.values(), key=lambda shape: shape.gpus)
    total = sum(s.gpus for s in nodes.values())
    return binpack.contended_seeds(args.contended, lambda seed: workload.generate(
        mix, seed, int(args.jobs_per_gpu * total), total, args.load, args.inference_share,
        fits=workload.fits_on(biggest)), nodes)


def gpu_paths(args) -> list[replay_setup.GpuPath]:
    """The GPU paths to replay: the device plugin on the example stack's release, or with
    --dra both paths (or the one --path names) on the release of the DRA path, so that they
    differ in nothing else."""
    if not args.dra:
        return [replay_setup.DEVICE_PLUGIN]
    return [replay_setup.GpuPath(dra, tools.DRA_KUBERNETES_VERSION) for dra in (False, True)
            if args.path in (None, "DRA" if dra else "device plugin")]


def moving_label(args, settings, whole_node_gpus: int) -> str:
    """Names a replay of the shipped profile whose pods may move, by what it varies: with
    compaction, the opted-in shares and the policy settings given with --compaction-set; with
    preemption, the share of jobs in the preemptible class ("" when neither is asked for)."""
    checkpoint = f"checkpoint every {args.checkpoint_every * 60:.0f} min"
    label = settings.scheduler.name
    if args.compaction is not None:
        jobs = f", {args.compaction_jobs:.0%} of jobs ({checkpoint})" \
            if args.compaction_jobs else ""
        # Rows from before threshold planning existed carry no word of it: planning off; those
        # from before the plan's pods, CPU and memory thresholds say "GPU threshold only".
        changed = "".join(f", {key}={value}" for key, value in args.compaction_set
                          if key != "planThreshold")
        if settings.compaction.plan_threshold:
            changed += ", nodes to empty planned per run"
        if args.compaction_interval != DEFAULT_COMPACTION_INTERVAL:
            changed += f", a run every {args.compaction_interval * 60:.0f} min"
        label += f" + compaction ({args.compaction:.0%} of services{jobs} opted in{changed})"
    if args.preemptible:
        label += (f" + preemption ({args.preemptible:.0%} of the jobs below "
                  f"{whole_node_gpus} GPUs preemptible, {checkpoint})")
    if args.reservation:
        label += " + " + reservation_play(args).label(settings)
    return "" if label == settings.scheduler.name else label


def reservation_play(args) -> replay_setup.ReservationPlay:
    return replay_setup.ReservationPlay(args.reservation_interval, args.declared_limits)


def with_section_settings(settings, section: str, changes: list[tuple[str, str]]):
    """`settings` with the settings of `section` named as in the stack file replaced,
    validated as a stack's would be."""
    if not changes:
        return settings
    current = getattr(settings, section)
    return settings.model_copy(update={section: type(current).model_validate(
        current.model_dump(by_alias=True) | dict(changes))})


def keep(out: Path, name: str, row: dict) -> None:
    with open(out / name, "a") as runs:
        runs.write(json.dumps(row) + "\n")


def plot(rows: list[dict], path: Path) -> None:
    """Whole free 8-GPU nodes and GPUs waiting over the trace (first seed of each group)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["mix"], r["nodes"]) for r in rows))
    labels = list(dict.fromkeys(r["scheduler"] for r in rows))
    # The legend goes below the plots, a line per scheduler, so it hides none of them.
    legend_inches = 0.2 * len(labels) + 0.3
    fig, axes = plt.subplots(2, len(groups), figsize=(5 * len(groups), 6.5 + legend_inches),
                             squeeze=False)
    for col, (mix, size) in enumerate(groups):
        mine = [r for r in rows if (r["mix"], r["nodes"]) == (mix, size)]
        first = min(r["seed"] for r in mine)
        for row in (r for r in mine if r["seed"] == first):
            # One colour and line style per scheduler in every panel (ten colours, then dotted).
            index = labels.index(row["scheduler"])
            style = {"linestyle": "--", "color": "black"} \
                if row["scheduler"].startswith("reference") else \
                {"color": f"C{index % 10}", "linestyle": ("-", ":", "-.")[index // 10 % 3]}
            t = [s[0] for s in row["samples"]]
            axes[0][col].plot(t, [s[1] for s in row["samples"]], label=row["scheduler"], **style)
            axes[1][col].plot(t, [s[3] for s in row["samples"]], label=row["scheduler"], **style)
        axes[0][col].set_title(f"{mix}, {size} nodes (seed {first})")
        axes[0][col].set_ylabel("whole free 8-GPU nodes")
        axes[1][col].set_ylabel("GPUs asked for by waiting pods")
        axes[1][col].set_xlabel("simulated hours")
    handles = {}
    for ax in axes[0]:
        for line in ax.get_lines():
            handles.setdefault(line.get_label(), line)
    fig.tight_layout(rect=(0, legend_inches / (6.5 + legend_inches), 1, 1))
    fig.legend([handles[label] for label in labels if label in handles],
               [label for label in labels if label in handles], loc="lower left",
               fontsize="small", frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def write_page(docs: Path, name: str, page: str) -> None:
    """A measurement's page, written into `docs` and shown."""
    docs.mkdir(parents=True, exist_ok=True)
    (docs / name).write_text(page)
    print(page)


def report(out: Path, docs: Path) -> None:
    """The table page and the picture, from the replays kept in `out`."""
    rows = kept(out)
    print(table(rows))
    docs.mkdir(parents=True, exist_ok=True)
    (docs / RESULTS_PAGE).write_text(results_page(rows))
    plot(rows, docs / PICTURE)
    print(f"\nwrote {docs / RESULTS_PAGE} and {docs / PICTURE}", file=sys.stderr)


def latency_probes(args, settings) -> list[tuple[str, dict, replay_setup.GpuPath]]:
    """(label, configuration, GPU path) of each probe at one size: the shipped profile (every
    feasible node scored), the same with kube-scheduler's adaptive share of nodes scored and
    with each share of --shares, and upstream's default profile; with --dra, each on both paths
    of the DRA path's release."""
    profiles = replay_setup.profiles(settings)
    shipped = profiles[settings.scheduler.name]
    rate, rated = {}, ""
    if args.client_rate:
        qps, burst = args.client_rate
        rate, rated = {"clientConnection": {"qps": qps, "burst": burst}}, f", qps {qps} / {burst}"
    chosen = [("all (shipped)", shipped), ("adaptive", replay_setup.with_share(shipped, 0)),
              *[(f"{share}%{rated}", replay_setup.with_share(shipped, share) | rate)
                for share in args.shares],
              (replay_setup.DEFAULT_PROFILE, profiles[replay_setup.DEFAULT_PROFILE])]
    return [(f"{label}{path.label}", config, path)
            for path in gpu_paths(args) for label, config in chosen]


def latency(args, settings) -> None:
    """Scheduling attempt cost and burst throughput of each latency probe, at each size; with
    --pprof, a CPU profile of the scheduler over each burst, summarised."""
    lines = ["| nodes | nodes scored | pods | attempt p50 / p95, ms | filter and score p50 / "
             "p95, ms | pods per second | scheduler CPU s | peak memory, MiB | wall s | "
             "nodes taken |",
             "| ---: | --- |" + " ---: |" * 8]
    profiles_seen = []
    for size in args.latency:
        for label, config, path in latency_probes(args, settings):
            print(f"latency probe: {size} nodes, {label}", file=sys.stderr, flush=True)
            m = real_cluster.latency_probe(config, size, args.probe_pods, settings, path,
                                           pprof_seconds=args.pprof,
                                           feature_gates=args.feature_gates)
            gated = f", {args.feature_gates}" if args.feature_gates else ""
            lines.append(f"| {size} | {label}{gated} | {args.probe_pods} | "
                         f"{m['attempt_p50'] * 1000:.1f} / {m['attempt_p95'] * 1000:.1f} | "
                         f"{m['algorithm_p50'] * 1000:.1f} / {m['algorithm_p95'] * 1000:.1f} | "
                         f"{args.probe_pods / m['wall_seconds']:.1f} | "
                         f"{m['cpu_seconds']:.1f} | {m['peak_rss_mib']:.0f} | "
                         f"{m['wall_seconds']:.0f} | {m['nodes_used']} |")
            print(lines[-1], file=sys.stderr, flush=True)
            if args.pprof:
                profiles_seen.append((f"{size} nodes, {label}", m["pprof_top"]))
    print("\n".join(lines))
    args.docs.mkdir(parents=True, exist_ok=True)
    page = DRA_LATENCY_PAGE if args.dra else LATENCY_PAGE
    (args.docs / page).write_text(latency_page(lines, dra=args.dra, profiles=profiles_seen))
    print(f"\nwrote {args.docs / page}", file=sys.stderr)


def client_rate(text: str) -> tuple[int, int]:
    qps, slash, burst = text.partition("/")
    if not slash or not (qps.isdigit() and burst.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected QPS/BURST, e.g. 400/800")
    return int(qps), int(burst)


def setting(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. underusedPercent=75")
    return key, value


def seeds(text: str) -> list[int]:
    """Seeds as ranges and single seeds, comma separated: `1-5`, `3`, `9,14,20-25`."""
    chosen = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        chosen += range(int(first), int(last or first) + 1)
    return chosen


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bash tests/run benchmark", description=__doc__)
    parser.add_argument("--mixes", default="synthetic,alibaba-multigpu50",
                        help=f"size mixes, of {', '.join(workload.MIXES)}")
    parser.add_argument("--cluster", choices=list(workload.CLUSTERS),
                        help="node shapes (default: homogeneous for synthetic, alibaba-g2 for "
                             "the Alibaba mixes)")
    parser.add_argument("--nodes", default="16,64", help="cluster sizes, comma separated")
    parser.add_argument("--seeds", type=seeds, default=seeds("1-5"), help="e.g. 1-5 or 3")
    parser.add_argument("--jobs-per-gpu", type=float, default=2.0,
                        help="trace length: batch jobs per GPU of the cluster")
    parser.add_argument("--load", type=float, default=0.9,
                        help="offered load: GPU-time asked for over GPU capacity")
    parser.add_argument("--inference-share", type=float, default=0.25,
                        help="share of the offered load that inference Deployments ask for")
    parser.add_argument("--variants", action="store_true",
                        help="also replay the shipped profile with other resource weights and "
                             "with kube-scheduler's adaptive share of nodes scored")
    parser.add_argument("--compaction", type=float, metavar="OPT_IN_SHARE",
                        help="also replay the shipped profile with compaction on, this share "
                             "(0..1) of the inference services opted in")
    parser.add_argument("--compaction-jobs", type=float, default=0.0, metavar="OPT_IN_SHARE",
                        help="with --compaction: this share (0..1) of the batch jobs opted in "
                             "too, as checkpointing Jobs that replace an evicted pod")
    parser.add_argument("--checkpoint-every", type=float, default=0.5, metavar="HOURS",
                        help="with --compaction-jobs or --preemptible: simulated hours "
                             "between a job's checkpoints; an evicted or preempted pod loses "
                             "the work since its last one")
    parser.add_argument("--compaction-interval", type=float, default=DEFAULT_COMPACTION_INTERVAL,
                        help="with --compaction: simulated hours between descheduler runs")
    parser.add_argument("--compaction-set", type=setting, action="append", default=[],
                        metavar="KEY=VALUE",
                        help="with --compaction: a compaction setting as in the stack file "
                             "(e.g. underusedPercent=75); repeatable")
    parser.add_argument("--preemptible", type=float, default=0.0, metavar="SHARE",
                        help="also replay the shipped profile with this share (0..1) of the "
                             "batch jobs smaller than a whole node in the preemptible priority "
                             "class, as checkpointing Jobs (with --compaction: one replay with "
                             "both)")
    parser.add_argument("--reservation", action="store_true",
                        help="also replay the shipped profile with reservation by attrition "
                             "on, as the stack file sets it (reservation.*)")
    parser.add_argument("--reservation-interval", type=float, default=2.0, metavar="MINUTES",
                        help="with --reservation: simulated minutes between runs")
    parser.add_argument("--reservation-set", type=setting, action="append", default=[],
                        metavar="KEY=VALUE",
                        help="with --reservation: a reservation setting as in the stack file "
                             "(e.g. maxNodes=4); repeatable")
    parser.add_argument("--declared-limits", type=float, metavar="FACTOR",
                        help="with --reservation: each batch job declares a run time limit "
                             "(activeDeadlineSeconds) of FACTOR times its run time")
    parser.add_argument("--profile", dest="profiles", action="append",
                        help="only this scheduler (a label as in the table); repeatable")
    parser.add_argument("--dra", action="store_true",
                        help="replay (or probe, with --latency) the shipped profile on the DRA "
                             "path's Kubernetes release, with the device plugin and with DRA")
    parser.add_argument("--path", choices=["device plugin", "DRA"],
                        help="with --dra: only this GPU path")
    parser.add_argument("--report", action="store_true",
                        help="rewrite the table and plot from runs.jsonl without replaying")
    parser.add_argument("--fresh", action="store_true", help="start a new runs.jsonl")
    parser.add_argument("--feature-gates", default="", metavar="GATES",
                        help="with --latency: run the probed schedulers with these feature gates "
                             "(as kube-scheduler's --feature-gates)")
    parser.add_argument("--pprof", type=int, default=0, metavar="SECONDS",
                        help="with --latency: record a CPU profile of the scheduler over the "
                             "first SECONDS of each burst and summarise where the time goes")
    parser.add_argument("--shares", type=lambda s: tuple(int(n) for n in s.split(",")),
                        default=(), metavar="PERCENTS",
                        help="also the shipped profile scoring these percentages of the nodes "
                             "(scheduler.percentageOfNodesToScore), comma separated: replayed, "
                             "or probed with --latency")
    parser.add_argument("--client-rate", type=client_rate, metavar="QPS/BURST",
                        help="with --latency and --shares: those probes' client rate "
                             "(scheduler.clientConnection) instead of the shipped one")
    parser.add_argument("--latency", type=lambda s: [int(n) for n in s.split(",")],
                        help="instead: measure scheduling latency at these node counts")
    parser.add_argument("--probe-pods", type=int, default=500,
                        help="with --latency: 1-GPU pods placed per measurement")
    parser.add_argument("--scheduling", action="store_true",
                        help="instead: measure the scheduler's throughput for each client rate "
                             "and its failover for each set of lease timings")
    parser.add_argument("--scheduling-nodes", type=int, default=128,
                        help="with --scheduling: empty 8-GPU nodes of the throughput burst")
    parser.add_argument("--scheduling-pods", type=int, default=1000,
                        help="with --scheduling: pending 1-GPU pods of the throughput burst")
    parser.add_argument("--crashes", type=int, default=5,
                        help="with --scheduling: leader crashes per set of lease timings")
    parser.add_argument("--contended", type=int, metavar="SEEDS",
                        help="instead of --seeds: the first SEEDS seeds from "
                             f"{binpack.CONTENDED_FROM} on whose reference starts less than "
                             f"{binpack.CONTENDED_BELOW * 100:.0f}%% of the batch GPU-time on "
                             f"arrival, kept in {CONTENDED_RESULTS} and {CONTENDED_PAGE} (with "
                             "--teams: of the teams' traces, kept with the other teams rows)")
    parser.add_argument("--only", type=seeds, dest="only_seeds", metavar="SEEDS",
                        help="with --contended: replay only those of its seeds (e.g. to split "
                             "a run over several processes)")
    parser.add_argument("--teams", action="store_true",
                        help="instead: replay each trace split over three teams with bursty "
                             "demand, with the real Kueue in the loop, against the same trace "
                             "without teams and the reference")
    parser.add_argument("--queueing", choices=QUEUEING_STRATEGIES,
                        default=DEFAULT_QUEUEING_STRATEGY,
                        help="with --teams: every team's queueing strategy (default: "
                             "%(default)s, the settings' default)")
    parser.add_argument("--reclaim", action="store_true",
                        help="instead: replay each trace with a share of batch jobs idle for "
                             "hours, with idle reclaim off, reporting and evicting")
    parser.add_argument("--faults", action="store_true",
                        help="instead: replay each trace with GPU nodes failing, with fault "
                             "remediation off (a person acts late) and on")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="where runs.jsonl is kept")
    parser.add_argument("--docs", type=Path,
                        help=f"where the table pages and the picture go (default: "
                             f"{DOCS.relative_to(binpack.ROOT)} with the default --out, else "
                             f"--out itself, so a trial run leaves the docs alone)")
    args = parser.parse_args(argv)
    args.results = CONTENDED_RESULTS if args.contended else "runs.jsonl"
    if args.docs is None:
        args.docs = DOCS if args.out.resolve() == DEFAULT_OUT else args.out
    args.mixes = args.mixes.split(",")
    unknown = [m for m in args.mixes if m not in workload.MIXES]
    if unknown:
        parser.error(f"--mixes: unknown {unknown}; allowed: {', '.join(workload.MIXES)}")
    args.nodes = [int(n) for n in args.nodes.split(",")]
    if args.dra and (args.preemptible or args.compaction is not None):
        # On the DRA path kube-scheduler does not preempt for devices and the descheduler
        # counts no GPUs (the settings refuse or warn of both): such a replay would stall.
        parser.error("--preemptible and --compaction replay the device plugin path only; "
                     "leave out --dra")
    if args.declared_limits is not None and (not args.reservation or args.declared_limits < 1):
        parser.error(f"--declared-limits {args.declared_limits:g}: a factor of 1 or more, with "
                     f"--reservation (a limit below the run time would end the job)")
    if args.reservation and args.compaction is not None:
        parser.error("--reservation and --compaction are replayed apart; give one")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.latency:
        latency(args, harness.example_settings())
        return
    if args.scheduling:
        scheduling.measure(args.out, harness.example_settings(), args.scheduling_nodes,
                           args.scheduling_pods, args.crashes)
        write_page(args.docs, SCHEDULING_PAGE,
                   scheduling_page(kept(args.out, SCHEDULING_RESULTS)))
        return
    if args.teams:
        if not args.report:
            teams.measure(args.out, harness.example_settings(), args.mixes, args.nodes,
                          args.seeds, args.jobs_per_gpu, args.load, args.inference_share,
                          progress_printer, args.contended, args.only_seeds, args.queueing,
                          reservation_play(args) if args.reservation else None)
        write_page(args.docs, TEAMS_PAGE, teams_page(kept(args.out, TEAMS_RESULTS)))
        return
    if args.reclaim:
        if not args.report:
            reclaim.measure(args.out, harness.example_settings(), args.mixes, args.nodes,
                            args.seeds, args.jobs_per_gpu, args.load, args.inference_share,
                            progress_printer)
        write_page(args.docs, RECLAIM_PAGE, reclaim_page(kept(args.out, RECLAIM_RESULTS)))
        return
    if args.faults:
        if not args.report:
            faults.measure(args.out, harness.example_settings(), args.mixes, args.nodes,
                           args.seeds, args.jobs_per_gpu, args.load, args.inference_share,
                           progress_printer)
        write_page(args.docs, FAULTS_PAGE, faults_page(kept(args.out, FAULTS_RESULTS)))
        return
    if not args.report:
        if args.fresh:
            (args.out / args.results).unlink(missing_ok=True)
        started = time.monotonic()
        settings = harness.example_settings()
        for section, changes in (("compaction", args.compaction_set),
                                 ("reservation", args.reservation_set)):
            try:
                settings = with_section_settings(settings, section, changes)
            except ValueError as error:
                parser.error(f"--{section}-set: {error}")
        run(args, settings)
        print(f"replayed in {time.monotonic() - started:.0f}s", file=sys.stderr)
    if args.contended:
        write_page(args.docs, CONTENDED_PAGE,
                   contended_page(kept(args.out, CONTENDED_RESULTS)))
        return
    report(args.out, args.docs)


if __name__ == "__main__":
    main(sys.argv[1:])
