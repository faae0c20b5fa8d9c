"""The binpack benchmark: `bash tests/run benchmark [options]` (see README, "Binpack benchmark").

Replays one seeded trace per cluster against the real kube-scheduler with each profile, prints a
table and writes a plot of placed GPU share and stranded GPUs over the trace.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import binpack
import harness  # noqa: E402  (on the path binpack sets)

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def progress_printer(label: str):
    state = {"last": 0.0}

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - state["last"] >= 5:
            state["last"] = now
            print(f"  {label}: {done}/{total} events", file=sys.stderr, flush=True)
    return report


def run(sizes: list[int], clusters: list[str], seed: int, jobs_per_gpu: float, load: float,
        settings, variants: bool) -> list[dict]:
    rows = []
    for kind in clusters:
        for size in sizes:
            nodes = binpack.CLUSTERS[kind](size)
            total = sum(nodes.values())
            trace = binpack.generate_trace(seed, int(jobs_per_gpu * total), total, load)
            print(f"{kind} cluster, {size} nodes, {total} GPUs, {len(trace)} jobs "
                  f"(seed {seed}, offered load {load:.0%})", file=sys.stderr, flush=True)
            outcomes = [binpack.reference(trace, nodes)]
            for label, config in binpack.profiles(settings, variants).items():
                outcomes.append(binpack.replay(label, config, trace, nodes, settings,
                                               progress_printer(label)))
            rows += [{"cluster": kind, "nodes": size, "gpus": total, "outcome": o}
                     for o in outcomes]
    return rows


def table(rows: list[dict]) -> str:
    header = ("| cluster | nodes | scheduler | GPU-time placed | fragmentation failures | "
              "stranded GPUs | free 8-GPU nodes | latency p50 / p95 |")
    lines = [header, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        o: binpack.Outcome = row["outcome"]
        latency = (f"{o.latency(0.5) * 1000:.0f} / {o.latency(0.95) * 1000:.0f} ms"
                   if o.latencies else "-")
        lines.append(f"| {row['cluster']} | {row['nodes']} | {o.scheduler} | "
                     f"{o.placed_share:.1%} | {o.fragmentation_failures} | "
                     f"{o.mean_after_warmup('stranded'):.1f} | "
                     f"{o.mean_after_warmup('free_nodes'):.1f} | {latency} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["cluster"], r["nodes"]) for r in rows))
    fig, axes = plt.subplots(2, len(groups), figsize=(5 * len(groups), 6.5), squeeze=False,
                             sharex="col")
    for col, (kind, size) in enumerate(groups):
        for row in (r for r in rows if (r["cluster"], r["nodes"]) == (kind, size)):
            o = row["outcome"]
            t = [s.time for s in o.samples]
            style = {"linestyle": "--", "color": "black"} if o.scheduler.startswith("reference") \
                else {}
            axes[0][col].plot(t, [100 * s.placed_share for s in o.samples], label=o.scheduler,
                              **style)
            axes[1][col].plot(t, [s.stranded for s in o.samples], label=o.scheduler, **style)
        gpus = next(r["gpus"] for r in rows if (r["cluster"], r["nodes"]) == (kind, size))
        axes[0][col].set_title(f"{kind}, {size} nodes ({gpus} GPUs)")
        axes[0][col].set_ylabel("GPU-time placed when requested, %")
        axes[1][col].set_ylabel("free GPUs stranded on busy nodes")
        axes[1][col].set_xlabel("simulated hours")
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bash tests/run benchmark", description=__doc__)
    parser.add_argument("--nodes", default="16,64", help="cluster sizes, comma separated")
    parser.add_argument("--clusters", default="homogeneous,mixed",
                        help=f"of {', '.join(binpack.CLUSTERS)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs-per-gpu", type=float, default=3.0,
                        help="trace length: jobs per GPU of the cluster")
    parser.add_argument("--load", type=float, default=0.9,
                        help="offered load: requested GPU-time over GPU capacity")
    parser.add_argument("--variants", action="store_true",
                        help="also replay the shipped profile with other resource weights")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    clusters = args.clusters.split(",")
    unknown = [c for c in clusters if c not in binpack.CLUSTERS]
    if unknown:
        parser.error(f"--clusters: unknown {unknown}; allowed: {', '.join(binpack.CLUSTERS)}")
    sizes = [int(n) for n in args.nodes.split(",")]
    started = time.monotonic()
    rows = run(sizes, clusters, args.seed, args.jobs_per_gpu, args.load,
               harness.example_settings(), args.variants)
    text = table(rows)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "binpack.md").write_text(text + "\n")
    plot(rows, args.out / "binpack.png")
    print(f"\nwrote {args.out / 'binpack.md'} and {args.out / 'binpack.png'} "
          f"in {time.monotonic() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
