"""The benchmark's workload: what GPU pods ask for (size mixes), which cluster they run on, and a
seeded trace of batch Jobs and inference Deployments that scale up and down (see
docs/benchmarks/README.md).

Two sources of request sizes:
- `synthetic`: 1, 2, 4 or 8 GPUs at 60/15/15/10%, CPU and memory drawn per GPU; the project's own
  choice, shaped after published studies of training clusters.
- `alibaba` and `alibaba-multigpu50`: tasks of Alibaba's public cluster-trace-gpu-v2023
  (`openb_pod_list_default.csv` and its `multigpu50` resampling, Weng et al., USENIX ATC 2023):
  GPUs, CPU and memory of a task drawn together from the trace's GPU tasks. A task that shares a
  GPU (`gpu_milli` < 1000) asks for one whole GPU here. The files are read from the shared
  traces folder ($GPU_PLATFORM_TRACES, default ../shared/traces/alibaba-gpu-v2023 beside the
  clone), never copied into the project.

Run times are log-normal by size for every mix (the trace's creation and deletion times describe
a snapshot of long-running pods, not job lengths).
"""

from __future__ import annotations

import csv
import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("GPU_PLATFORM_TRACES",
                             ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"))

# Median run time in simulated hours by GPUs asked for, and the spread of the log-normal.
MEDIAN_HOURS = {1: 1.0, 2: 2.0, 4: 3.0, 8: 4.0}
SIGMA = 1.0


@dataclass(frozen=True)
class Task:
    """What one pod asks for."""
    gpus: int
    cpu_milli: int
    memory_mib: int


# --- size mixes -----------------------------------------------------------------------------

SYNTHETIC_SIZES = {1: 0.60, 2: 0.15, 4: 0.15, 8: 0.10}
# CPU cores and GiB of memory per GPU, drawn per task: real jobs differ (data loading,
# preprocessing), so CPU and memory do not simply track GPUs.
SYNTHETIC_CPU_PER_GPU = (2, 4, 6)
SYNTHETIC_MEMORY_GIB_PER_GPU = (16, 32, 48)


def synthetic_task(rng: random.Random) -> Task:
    sizes, weights = list(SYNTHETIC_SIZES), list(SYNTHETIC_SIZES.values())
    gpus = rng.choices(sizes, weights)[0]
    return Task(gpus, gpus * 1000 * rng.choice(SYNTHETIC_CPU_PER_GPU),
                gpus * 1024 * rng.choice(SYNTHETIC_MEMORY_GIB_PER_GPU))


@cache
def trace_tasks(file: str) -> tuple[Task, ...]:
    """The GPU tasks of one Alibaba pod list (CPU-only tasks left out)."""
    path = TRACES / file
    if not path.exists():
        raise FileNotFoundError(f"the Alibaba GPU trace is not at {path}: set GPU_PLATFORM_TRACES "
                                f"to the folder holding {file}")
    with open(path, newline="") as rows:
        return tuple(Task(int(r["num_gpu"]), int(r["cpu_milli"]), int(r["memory_mib"]))
                     for r in csv.DictReader(rows) if int(r["num_gpu"]) > 0)


def trace_mix(file: str) -> Callable[[random.Random], Task]:
    return lambda rng: rng.choice(trace_tasks(file))


MIXES: dict[str, Callable[[random.Random], Task]] = {
    "synthetic": synthetic_task,
    "alibaba": trace_mix("openb_pod_list_default.csv"),
    "alibaba-multigpu50": trace_mix("openb_pod_list_multigpu50.csv"),
}


def fitting(mix: str, fits: Callable[[Task], bool]) -> Callable[[random.Random], Task]:
    """The mix's tasks for which `fits` holds."""
    def draw(rng: random.Random) -> Task:
        while not fits(task := MIXES[mix](rng)):
            pass
        return task
    return draw


def size_shares(draw: Callable[[random.Random], Task], draws: int = 20000,
                seed: int = 0) -> dict[int, float]:
    """Share of tasks by GPUs asked for, estimated by drawing from a mix."""
    rng = random.Random(seed)
    counts: dict[int, int] = {}
    for _ in range(draws):
        gpus = draw(rng).gpus
        counts[gpus] = counts.get(gpus, 0) + 1
    return {g: counts[g] / draws for g in sorted(counts)}


# --- clusters -------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeShape:
    gpus: int
    cpu_milli: int
    memory_mib: int


# 8 cores and 64 GiB per GPU: a typical training node.
_SYNTHETIC_8 = NodeShape(8, 64_000, 512 * 1024)
_SYNTHETIC_4 = NodeShape(4, 32_000, 256 * 1024)
# The most common GPU node of the Alibaba trace (549 of 1,213 GPU nodes, model "G2").
_ALIBABA_G2 = NodeShape(8, 96_000, 384 * 1024)

CLUSTERS: dict[str, Callable[[int], dict[str, NodeShape]]] = {
    "homogeneous": lambda n: {f"gpu-{i:04d}": _SYNTHETIC_8 for i in range(n)},
    "mixed": lambda n: {f"gpu-{i:04d}": _SYNTHETIC_8 if i % 2 == 0 else _SYNTHETIC_4
                        for i in range(n)},
    "alibaba-g2": lambda n: {f"gpu-{i:04d}": _ALIBABA_G2 for i in range(n)},
}
# The cluster each mix is replayed on unless told otherwise.
DEFAULT_CLUSTER = {"synthetic": "homogeneous", "alibaba": "alibaba-g2",
                   "alibaba-multigpu50": "alibaba-g2"}


# --- the trace ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchJob:
    """A Job of one pod: it waits until placed, then runs for `duration`."""
    id: int
    task: Task
    arrival: float      # simulated hours
    duration: float

    @property
    def gpu_hours(self) -> float:
        return self.task.gpus * self.duration


@dataclass(frozen=True)
class Service:
    """An inference Deployment behind a Service: identical 1-GPU replicas."""
    id: int
    task: Task


@dataclass(frozen=True)
class Scale:
    time: float
    service: int
    replicas: int


@dataclass(frozen=True)
class Trace:
    jobs: list[BatchJob]
    services: list[Service]
    scales: list[Scale]
    horizon: float       # simulated hours observed: up to the last arrival

    def arrivals(self) -> list[tuple[float, int, object]]:
        """Time-ordered trace events: (time, order, BatchJob or Scale)."""
        events = [(j.arrival, 1, j) for j in self.jobs] + [(s.time, 0, s) for s in self.scales]
        return sorted(events, key=lambda e: (e[0], e[1]))


def mean_gpu_hours(draw: Callable[[random.Random], Task]) -> float:
    # E[lognormal] = median * exp(sigma^2 / 2), averaged over the mix's sizes
    spread = math.exp(SIGMA ** 2 / 2)
    return sum(share * g * MEDIAN_HOURS[g] * spread
               for g, share in size_shares(draw).items())


def fits_on(shape: NodeShape) -> Callable[[Task], bool]:
    return lambda task: (task.gpus <= shape.gpus and task.cpu_milli <= shape.cpu_milli
                         and task.memory_mib <= shape.memory_mib)


def generate(mix: str, seed: int, jobs: int, total_gpus: int, load: float,
             inference_share: float = 0.25, services: int = 0,
             scale_every_hours: float = 1.0,
             fits: Callable[[Task], bool] = lambda task: True) -> Trace:
    """`jobs` batch jobs whose Poisson arrivals, with the inference replicas, offer `load` x
    `total_gpus` GPUs on average; `inference_share` of that load is inference.

    Each inference service scales at Poisson times (mean `scale_every_hours`) to a replica
    count drawn uniformly from 1..2m-1, m its mean share of the inference load, so the
    inference load averages out at its share while single services swing widely.

    Tasks for which `fits` is false are drawn again: they are larger than any node of the
    cluster (the Alibaba trace comes from a cluster with bigger nodes than G2), and no scheduler
    could ever place them."""
    rng = random.Random(seed)
    draw = fitting(mix, fits)
    batch_rate = (1 - inference_share) * load * total_gpus / mean_gpu_hours(draw)
    t, batch = 0.0, []
    for i in range(jobs):
        t += rng.expovariate(batch_rate)
        task = draw(rng)
        batch.append(BatchJob(i, task, t, MEDIAN_HOURS[task.gpus] * math.exp(rng.gauss(0, SIGMA))))
    horizon = t
    inference, scales = [], []
    if inference_share > 0:
        count = services or max(2, total_gpus // 32)
        mean_replicas = inference_share * load * total_gpus / count
        top = max(1, round(2 * mean_replicas - 1))
        one_gpu = [task for task in (draw(rng) for _ in range(1000)) if task.gpus == 1]
        for s in range(count):
            inference.append(Service(s, rng.choice(one_gpu)))
            scales.append(Scale(0.0, s, rng.randint(1, top)))
            when = rng.expovariate(1 / scale_every_hours)
            while when < horizon:
                scales.append(Scale(when, s, rng.randint(1, top)))
                when += rng.expovariate(1 / scale_every_hours)
    return Trace(batch, inference, scales, horizon)


@dataclass(frozen=True)
class Case:
    """One replay's setting: a mix on its default cluster of `size` nodes, and a seed."""
    mix: str
    cluster: str
    size: int
    nodes: dict[str, NodeShape]
    seed: int

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.nodes.values())

    @property
    def biggest(self) -> NodeShape:
        return max(self.nodes.values(), key=lambda shape: shape.gpus)

    @property
    def key(self) -> dict:
        """How results files name it."""
        return {"mix": self.mix, "cluster": self.cluster, "nodes": self.size, "gpus": self.gpus,
                "seed": self.seed}

    def describe(self) -> str:
        return (f"{self.mix} on {self.size} {self.cluster} nodes ({self.gpus} GPUs), "
                f"seed {self.seed}")


def cases(mixes: list[str], sizes: list[int], seeds: list[int]) -> Iterator[Case]:
    """Every mix on its default cluster at every size, with every seed."""
    for mix in mixes:
        cluster = DEFAULT_CLUSTER[mix]
        for size in sizes:
            nodes = CLUSTERS[cluster](size)
            for seed in seeds:
                yield Case(mix, cluster, size, nodes, seed)
