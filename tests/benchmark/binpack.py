"""How well a kube-scheduler profile packs GPU pods: a seeded trace of GPU pods arriving and
leaving in simulated time, replayed event by event against a real kube-scheduler on a local
control plane, and an offline reference for the same events.

The workload (see README, "Binpack benchmark"): request sizes of 1, 2, 4 and 8 GPUs with
probabilities SIZE_MIX, most jobs small; run times log-normal and longer for bigger jobs; Poisson
arrivals at the rate that offers `load` of the cluster's GPUs. Every pod also asks for CPU and
memory in proportion to its GPUs, so the scheduler weighs more than GPUs.

A pod that cannot be placed when it arrives is refused (deleted) and its GPU-time counts as not
placed: the replay measures placement at request time, with no queueing.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "integration")]

import cluster  # noqa: E402
import harness  # noqa: E402
from components.binpack_scheduler import scheduler_configuration  # noqa: E402
from components.settings import StackSettings  # noqa: E402
from controlplane import ControlPlane  # noqa: E402

# GPUs per pod and their probabilities (see README for where the shape comes from).
SIZE_MIX = {1: 0.60, 2: 0.15, 4: 0.15, 8: 0.10}
# Median run time in simulated hours by size, and the spread of the log-normal around it.
MEDIAN_HOURS = {1: 1.0, 2: 2.0, 4: 3.0, 8: 4.0}
SIGMA = 1.0
NAMESPACE = "bench"


# --- workload -------------------------------------------------------------------------------

# CPU cores and GiB of memory a job asks for per GPU: drawn per job, since real jobs differ
# (data loading, preprocessing), so CPU and memory do not simply track GPUs.
CPU_PER_GPU = (2, 4, 6)
MEMORY_GIB_PER_GPU = (16, 32, 48)


@dataclass(frozen=True)
class Job:
    id: int
    gpus: int
    arrival: float      # simulated hours
    duration: float
    cpu: int = 0        # cores
    memory_gib: int = 0

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.duration


def mean_gpu_hours() -> float:
    # E[lognormal] = median * exp(sigma^2 / 2)
    return sum(p * g * MEDIAN_HOURS[g] * math.exp(SIGMA ** 2 / 2) for g, p in SIZE_MIX.items())


def generate_trace(seed: int, jobs: int, total_gpus: int, load: float) -> list[Job]:
    """`jobs` jobs whose arrivals offer `load` x `total_gpus` GPUs on average."""
    rng = random.Random(seed)
    rate = load * total_gpus / mean_gpu_hours()       # arrivals per simulated hour
    sizes, weights = zip(*SIZE_MIX.items())
    t, trace = 0.0, []
    for i in range(jobs):
        t += rng.expovariate(rate)
        gpus = rng.choices(sizes, weights)[0]
        duration = MEDIAN_HOURS[gpus] * math.exp(rng.gauss(0, SIGMA))
        trace.append(Job(i, gpus, t, duration, cpu=gpus * rng.choice(CPU_PER_GPU),
                         memory_gib=gpus * rng.choice(MEMORY_GIB_PER_GPU)))
    return trace


def events(trace: list[Job]) -> list[tuple[float, int, Job]]:
    """(time, kind, job) in time order; kind 0 = departure, 1 = arrival, so that at equal times
    GPUs are freed before they are asked for."""
    out = [(j.arrival, 1, j) for j in trace] + [(j.arrival + j.duration, 0, j) for j in trace]
    return sorted(out, key=lambda e: (e[0], e[1], e[2].id))


# --- clusters -------------------------------------------------------------------------------

CLUSTERS: dict[str, Callable[[int], dict[str, int]]] = {
    "homogeneous": lambda n: {f"gpu-{i:03d}": 8 for i in range(n)},
    "mixed": lambda n: {f"gpu-{i:03d}": 8 if i % 2 == 0 else 4 for i in range(n)},
}


# --- outcome of one replay ------------------------------------------------------------------

@dataclass
class Sample:
    time: float
    placed_share: float       # of GPU-time requested so far
    stranded: int             # free GPUs on partially used nodes
    free_nodes: int           # nodes with every GPU free (8-GPU nodes counted)


@dataclass
class Outcome:
    scheduler: str
    requested_gpu_hours: float = 0.0
    placed_gpu_hours: float = 0.0
    refused: int = 0
    fragmentation_failures: int = 0     # refused although enough GPUs were free in total
    latencies: list[float] = field(default_factory=list)    # seconds, create to bound
    samples: list[Sample] = field(default_factory=list)

    @property
    def placed_share(self) -> float:
        return self.placed_gpu_hours / self.requested_gpu_hours if self.requested_gpu_hours else 1

    def mean_after_warmup(self, metric: str) -> float:
        """The mean over the second half of the samples (one per arrival), once the cluster has
        filled and churned."""
        tail = self.samples[len(self.samples) // 2:]
        return statistics.fmean(getattr(s, metric) for s in tail) if tail else 0.0

    def latency(self, quantile: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


class Ledger:
    """Which node holds which job's GPUs; the same bookkeeping for replays and the reference."""

    def __init__(self, nodes: dict[str, int]):
        self.capacity = dict(nodes)
        self.used = {n: 0 for n in nodes}
        self.where: dict[int, str] = {}

    def add(self, job: Job, node: str) -> None:
        self.where[job.id] = node
        self.used[node] += job.gpus

    def remove(self, job: Job) -> Optional[str]:
        node = self.where.pop(job.id, None)
        if node is not None:
            self.used[node] -= job.gpus
        return node

    def free_total(self) -> int:
        return sum(self.capacity[n] - self.used[n] for n in self.capacity)

    def stranded(self) -> int:
        return sum(self.capacity[n] - self.used[n] for n in self.capacity
                   if 0 < self.used[n] < self.capacity[n])

    def free_big_nodes(self) -> int:
        biggest = max(self.capacity.values())
        return sum(1 for n, c in self.capacity.items() if c == biggest and self.used[n] == 0)


def simulate(name: str, trace: list[Job], ledger: Ledger,
             place: Callable[[Job, Ledger], Optional[str]],
             release: Callable[[Job, str], None] = lambda job, node: None,
             progress: Callable[[int, int], None] = lambda done, total: None) -> Outcome:
    """Walk the events; `place` returns the node a job was given, or None if refused."""
    outcome = Outcome(name)
    timeline = events(trace)
    for done, (t, kind, job) in enumerate(timeline):
        if kind == 0:
            node = ledger.remove(job)
            if node is not None:
                release(job, node)
        else:
            outcome.requested_gpu_hours += job.gpu_hours
            free = ledger.free_total()
            node = place(job, ledger)
            if node is None:
                outcome.refused += 1
                if free >= job.gpus:
                    outcome.fragmentation_failures += 1
            else:
                ledger.add(job, node)
                outcome.placed_gpu_hours += job.gpu_hours
            outcome.samples.append(Sample(t, outcome.placed_share, ledger.stranded(),
                                          ledger.free_big_nodes()))
        progress(done + 1, len(timeline))
    return outcome


# --- the offline reference ------------------------------------------------------------------

def best_fit_decreasing(sizes: list[int], nodes: dict[str, int]) -> Optional[list[str]]:
    """Nodes for `sizes` (in the given order) by best-fit decreasing, or None if they do not
    all fit. With every size and node size a power of two, as here, decreasing-order packing
    is optimal for the GPU dimension."""
    free = dict(nodes)
    placed: dict[int, str] = {}
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        fits = [n for n in free if free[n] >= sizes[i]]
        if not fits:
            return None
        best = min(fits, key=lambda n: (free[n], n))
        free[best] -= sizes[i]
        placed[i] = best
    return [placed[i] for i in range(len(sizes))]


class RepackingLedger(Ledger):
    """The reference's cluster: every change repacks all live jobs from scratch, as if running
    pods could be moved for free."""

    def __init__(self, nodes: dict[str, int]):
        super().__init__(nodes)
        self.jobs: dict[int, Job] = {}

    def _repack(self) -> None:
        jobs = list(self.jobs.values())
        layout = best_fit_decreasing([j.gpus for j in jobs], self.capacity)
        assert layout is not None, "reference accepted a job it cannot pack"
        self.used = {n: 0 for n in self.capacity}
        self.where = {}
        for job, node in zip(jobs, layout):
            super().add(job, node)

    def add(self, job: Job, node: str) -> None:
        self.jobs[job.id] = job
        self._repack()

    def remove(self, job: Job) -> Optional[str]:
        if self.jobs.pop(job.id, None) is None:
            return None
        node = self.where[job.id]
        self._repack()
        return node


def reference(trace: list[Job], nodes: dict[str, int]) -> Outcome:
    """An upper bound for any scheduler on GPUs: an arrival is accepted whenever the live jobs
    and it can be packed at all."""
    def place(job: Job, ledger: RepackingLedger) -> Optional[str]:
        sizes = [j.gpus for j in ledger.jobs.values()] + [job.gpus]
        layout = best_fit_decreasing(sizes, nodes)
        return layout[-1] if layout else None

    return simulate("reference (repacking, best fit decreasing)", trace,
                    RepackingLedger(nodes), place)


# --- replay against a real kube-scheduler ---------------------------------------------------

DEFAULT_PROFILE = "default (LeastAllocated)"


def profiles(settings: StackSettings, variants: bool = False) -> dict[str, dict]:
    """The KubeSchedulerConfigurations compared: the project's rendered one (leader election
    off: one replica here), the default profile, and MostAllocated; with `variants`, the
    rendered one with other resource weights, which is how the shipped weights were chosen."""
    shipped = copy.deepcopy(scheduler_configuration(settings))
    shipped["leaderElection"] = {"leaderElect": False}
    chosen = {settings.scheduler.name: shipped,
              DEFAULT_PROFILE: cluster.scheduler_with_strategy("default-scheduler"),
              "MostAllocated": cluster.scheduler_with_strategy("most-allocated", {
                  "type": "MostAllocated",
                  "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]})}
    if variants:
        for label, weights in (("equal weights", {"cpu": 1, "memory": 1}), ("GPU only", {})):
            config = copy.deepcopy(shipped)
            strategy = config["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]
            strategy["resources"] = [{"name": r["name"], "weight": weights.get(r["name"], 1)}
                                     for r in strategy["resources"]
                                     if r["name"] not in ("cpu", "memory") or weights]
            chosen[f"{settings.scheduler.name}, {label}"] = config
    return chosen


def scheduler_name(config: dict) -> str:
    return config["profiles"][0]["schedulerName"]


def replay(label: str, config: dict, trace: list[Job], nodes: dict[str, int],
           settings: StackSettings,
           progress: Callable[[int, int], None] = lambda done, total: None) -> Outcome:
    """A fresh control plane with `nodes` as fake GPU nodes and one kube-scheduler running
    `config`; each arrival creates a pod and waits for it to be bound or found unschedulable
    (then deletes it); each departure deletes the pod."""
    cp = ControlPlane().start()
    try:
        kube = cp.admin
        for name, gpus in nodes.items():
            cluster.create_gpu_node(kube, settings, name, gpus)
        cluster.ensure_namespace(kube, NAMESPACE)
        cluster.Scheduler(cp, "scheduler", config, kubeconfig=cp.kubeconfig("scheduler"))
        name_of = scheduler_name(config)
        latencies: list[float] = []

        def place(job: Job, ledger: Ledger) -> Optional[str]:
            pod_name = f"job-{job.id}"
            started = time.monotonic()
            kube.create(cluster.pod(pod_name, NAMESPACE, gpus=job.gpus, scheduler=name_of,
                                    settings=settings, cpu=str(job.cpu),
                                    memory=f"{job.memory_gib}Gi"))
            node = cluster.placement(kube, NAMESPACE, pod_name, poll=0.005)
            if node is None:
                kube.delete("v1", "Pod", pod_name, NAMESPACE)
            else:
                latencies.append(time.monotonic() - started)
            return node

        def release(job: Job, node: str) -> None:
            kube.delete("v1", "Pod", f"job-{job.id}", NAMESPACE)

        outcome = simulate(label, trace, Ledger(nodes), place, release, progress)
        outcome.latencies = latencies
        return outcome
    finally:
        cp.stop()
