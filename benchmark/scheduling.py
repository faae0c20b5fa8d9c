"""The binpack scheduler's throughput and failover, settings side by side
(`bash tests/run benchmark --scheduling`): each client rate binds the same burst of pending
1-GPU pods on a fresh control plane, and each set of leader-election timings has its leader
killed several times. Every measurement is kept in results/scheduling.jsonl, and
report.scheduling_page renders the tables from it."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from benchmark import (
    binpack,  # noqa: F401  (puts the project and the integration helpers on the path)
    report,
)
from components.binpack_scheduler import scheduler_configuration
from components.platform.settings import StackSettings
from tests.kit.cluster import load
from tests.kit.cluster.controlplane import ControlPlane
from tests.kit.harness import scheduler_of

# What is measured, and what it is compared with: kube-scheduler's own defaults first.
CLIENT_RATES = ((50, 100), (100, 200), (200, 400), (500, 1000))
LEASE_TIMINGS = (("15s", "10s", "2s"), ("10s", "8s", "2s"), ("6s", "4s", "1s"))


def configuration(settings: StackSettings, *, qps: int | None = None, burst: int | None = None,
                  lease: tuple[str, str, str] | None = None) -> dict:
    """The shipped KubeSchedulerConfiguration with another client rate or lease timings."""
    config = copy.deepcopy(scheduler_configuration(scheduler_of(settings)))
    if qps is not None:
        config["clientConnection"] = {"qps": qps, "burst": burst}
    election = config["leaderElection"]
    if lease is None:
        election["leaderElect"] = False
    else:
        election.update(leaderElect=True, leaseDuration=lease[0], renewDeadline=lease[1],
                        retryPeriod=lease[2])
    return config


def keep(out: Path, row: dict) -> None:
    with open(out / report.SCHEDULING_RESULTS, "a") as results:
        results.write(json.dumps(row) + "\n")


def measure(out: Path, settings: StackSettings, nodes: int, pods: int, crashes: int) -> None:
    for qps, burst in CLIENT_RATES:
        print(f"scheduling burst: {pods} pods, {nodes} nodes, qps {qps}", file=sys.stderr,
              flush=True)
        cp = ControlPlane().start()
        try:
            result = load.bind_burst(cp, settings, configuration(settings, qps=qps, burst=burst),
                                     cp.kubeconfig("scheduler"), nodes, pods)
        finally:
            cp.stop()
        keep(out, {"kind": "burst", "nodes": nodes, "pods": pods, "qps": qps, "burst": burst,
                   "seconds": result.seconds, "requests": result.requests})
    for lease in LEASE_TIMINGS:
        print(f"failover: lease {'/'.join(lease)}, {crashes} crashes", file=sys.stderr,
              flush=True)
        cp = ControlPlane().start()
        try:
            result = load.failover(cp, settings, configuration(settings, lease=lease),
                                   cp.kubeconfig("scheduler"), crashes)
        finally:
            cp.stop()
        keep(out, {"kind": "failover", "leaseDuration": lease[0], "renewDeadline": lease[1],
                   "retryPeriod": lease[2], "seconds": result.seconds})
