"""How well a kube-scheduler profile packs GPU pods, with queueing: a seeded trace (workload.py)
of batch Jobs and scaling inference Deployments, replayed in simulated time against a real
kube-scheduler and kube-controller-manager on a local control plane, and against an offline
reference that moves running pods freely.

A pod that cannot be placed waits, as on a real cluster, and the scheduler retries it whenever
the cluster changes. After every trace event the replay waits until the cluster has settled: the
controllers have created or removed the pods the event asks for, and no waiting pod fits on any
node any more (by the same arithmetic the scheduler's resource filter does). Simulated time stands
still meanwhile, so a pod bound during that wait started at the event's time.

This module holds what happened to each pod, the replay loop shared by the reference and the
real cluster, and the offline reference; the real cluster is real_cluster.py, and what a replay
there is given (scheduler profiles, GPU path, compaction, preemption) replay_setup.py. Importing
this module puts the project and the unit and integration suites' helpers on the path, which the
modules beside it rely on.
"""

from __future__ import annotations

import heapq
import statistics
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmark.workload import BatchJob, NodeShape, Scale, Task, Trace

ROOT = Path(__file__).resolve().parents[1]

NAMESPACE = "bench"
HOUR = 3600.0      # seconds in a simulated hour
SAMPLES = 200          # points of the over-time figures
PERIODIC = "periodic run"    # compaction or reclaim, every periodic_interval


# --- what happened to each pod --------------------------------------------------------------

@dataclass(eq=False)
class PodRecord:
    name: str
    task: Task
    created: float                  # simulated hours
    job: BatchJob | None = None  # None: an inference replica
    service: int | None = None
    node: str | None = None
    started: float | None = None
    ended: float | None = None
    resumed_at: float | None = None  # a job's replacement pod: hours of work checkpointed
    preemptible: bool = False           # in the platform's preemptible priority class
    nominated: str | None = None     # the node kube-scheduler preempted pods on for it
    namespace: str = NAMESPACE
    admitted: float | None = None    # with teams: when its team's queue let it start
    within_quota: bool | None = None  # with teams: its team asked for no more than its quota

    @property
    def remaining(self) -> float:
        """Simulated hours a job's pod runs once started."""
        if self.job is None:
            raise ValueError(f"{self.name} is an inference replica: it runs until scaled down")
        return self.job.duration - (self.resumed_at or 0.0)

    @property
    def pending(self) -> bool:
        return self.started is None and self.ended is None

    @property
    def running(self) -> bool:
        return self.started is not None and self.ended is None


@dataclass
class Sample:
    time: float
    free_nodes: int          # nodes of the largest size with every GPU free
    stranded: int            # free GPUs on partly used nodes
    waiting_gpus: int        # GPUs asked for by waiting pods


# The Job controller's wait before it replaces a failed pod, evicted pods included: 10 s,
# doubled with each failure of the Job since its last success, at most 10 min
# (DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff in pkg/controller/job of
# k8s.io/kubernetes, at the version tests/kit/tools.py builds).
JOB_BACKOFF_SECONDS = 10.0
JOB_BACKOFF_MAX_SECONDS = 600.0


def job_backoff_seconds(failure: int) -> float:
    """The wait before the replacement for a Job's `failure`-th failed pod (1 for the first)."""
    return min(JOB_BACKOFF_SECONDS * 2 ** (failure - 1), JOB_BACKOFF_MAX_SECONDS)


@dataclass
class Outcome:
    scheduler: str
    horizon: float
    total_gpus: int
    records: list[PodRecord]
    samples: list[Sample]
    scheduler_metrics: dict = field(default_factory=dict)
    evictions: int = 0              # by the descheduler, and preemptions by the scheduler
    lost_gpu_hours: float = 0.0     # work evicted pods did after their last checkpoint

    def delivered_gpu_hours(self) -> float:
        """GPU-time that ran within the observed window (batch and inference)."""
        return sum(r.task.gpus * (min(r.ended if r.ended is not None else self.horizon,
                                      self.horizon) - r.started)
                   for r in self.records if r.started is not None and r.started < self.horizon)

    @property
    def batch(self) -> list[PodRecord]:
        """Each batch job's first pod (the replacement of an evicted pod is not a new job)."""
        return [r for r in self.records if r.job is not None and r.resumed_at is None]

    def waits(self, gpus: int | None = None) -> list[float]:
        """Simulated hours each batch job waited; one still waiting at the end counts up to the
        end (a lower bound)."""
        return [(r.started if r.started is not None else self.horizon) - r.created
                for r in self.batch if gpus is None or r.task.gpus == gpus]

    def wait(self, gpus: int, quantile: float) -> float | None:
        return percentile(self.waits(gpus), quantile)

    def resume_waits(self) -> list[float]:
        """Simulated hours each evicted or preempted job's replacement pod waited."""
        return [(r.started if r.started is not None else self.horizon) - r.created
                for r in self.records if r.resumed_at is not None]

    def evictions_by_job(self) -> Counter:
        """How often each batch job lost its pod to an eviction or a preemption: the number of
        its replacement pods."""
        return Counter(r.job.id for r in self.records
                       if r.job is not None and r.resumed_at is not None)

    def job_backoff_hours(self) -> float:
        """Wall-clock hours the real Job controller makes these replacements wait before it
        creates them, summed over the jobs (the replay does not charge it to simulated time)."""
        return sum(job_backoff_seconds(failure) for count in self.evictions_by_job().values()
                   for failure in range(1, count + 1)) / 3600

    def started_on_arrival(self) -> float:
        """Share of the batch GPU-time asked for that started the moment it arrived."""
        asked = sum(r.job.gpu_hours for r in self.batch if r.job is not None)
        first = sum(r.job.gpu_hours for r in self.batch
                    if r.job is not None and r.started == r.created)
        return first / asked if asked else 1.0

    def mean_after_warmup(self, metric: str) -> float:
        tail = self.samples[len(self.samples) // 2:]
        return statistics.fmean(getattr(s, metric) for s in tail) if tail else 0.0


def percentile(values: list[float], quantile: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


# --- the replay loop, shared by the reference and the real cluster --------------------------

class Backend:
    """A cluster the trace is played on. Records pods as they are created, started and ended."""
    records: list[PodRecord]
    periodic_interval: float | None = None   # simulated hours between periodic runs
    evictions = 0
    lost_gpu_hours = 0.0

    def submit(self, job: BatchJob, now: float) -> None: ...
    def scale(self, service: int, replicas: int, now: float) -> None: ...
    def finish(self, record: PodRecord, now: float) -> None: ...
    def settle(self, now: float) -> list[PodRecord]:
        """Wait until nothing more can happen at `now`; the pods that started meanwhile (their
        `started` set to `now`)."""
        ...
    def sample(self, now: float) -> Sample: ...
    def periodic(self, now: float) -> None:
        """A run of what the platform runs on a schedule (compaction, reclaim)."""
        ...


def play(label: str, trace: Trace, backend: Backend, total_gpus: int,
         progress: Callable[[int, int], None] = lambda done, total: None) -> Outcome:
    """Walk the trace in simulated time: arrivals and scalings from the trace, and the end of
    each batch job `duration` after it started. At equal times jobs end before others arrive."""
    events: list = []
    order = 0
    for when, _kind, item in trace.arrivals():
        heapq.heappush(events, (when, 1, order, item))
        order += 1
    interval = backend.periodic_interval
    if interval:
        for tick in range(1, int(trace.horizon / interval) + 1):
            heapq.heappush(events, (tick * interval, 2, order, PERIODIC))
            order += 1
    sample_times = [trace.horizon * (i + 1) / SAMPLES for i in range(SAMPLES)]
    samples: list[Sample] = []
    total, done = len(events), 0
    while events and events[0][0] <= trace.horizon:
        now, _, _, item = heapq.heappop(events)
        while sample_times and sample_times[0] < now:
            samples.append(backend.sample(sample_times.pop(0)))
        if isinstance(item, BatchJob):
            backend.submit(item, now)
            done += 1
        elif isinstance(item, Scale):
            backend.scale(item.service, item.replicas, now)
            done += 1
        elif item is PERIODIC:
            backend.periodic(now)
        elif item.ended is None:        # not evicted meanwhile
            backend.finish(item, now)
        for record in backend.settle(now):
            if record.job is not None:
                heapq.heappush(events, (now + record.remaining, 0, order, record))
                order += 1
        progress(done, total)
    while sample_times:
        samples.append(backend.sample(sample_times.pop(0)))
    return Outcome(label, trace.horizon, total_gpus, backend.records, samples,
                   evictions=backend.evictions, lost_gpu_hours=backend.lost_gpu_hours)


def needs(task: Task) -> tuple[int, int, int]:
    """What a pod of `task` takes from a node: GPUs, CPU (milli) and memory (MiB)."""
    return task.gpus, task.cpu_milli, task.memory_mib


class Ledger:
    """Which node holds which pod, what is free where, and what preemption could free there
    (the requests of the pods in the preemptible class)."""

    def __init__(self, nodes: dict[str, NodeShape]):
        self.nodes = nodes
        self.free = {n: [s.gpus, s.cpu_milli, s.memory_mib] for n, s in nodes.items()}
        self.preemptible = {n: [0, 0, 0] for n in nodes}

    def _add(self, record: PodRecord, sign: int) -> None:
        if record.node is None:
            raise ValueError(f"{record.name} is on no node")
        for i, amount in enumerate(needs(record.task)):
            self.free[record.node][i] -= sign * amount
            if record.preemptible:
                self.preemptible[record.node][i] += sign * amount

    def place(self, record: PodRecord, node: str) -> None:
        record.node = node
        self._add(record, 1)

    def release(self, record: PodRecord) -> None:
        self._add(record, -1)

    def gpus_held(self) -> dict[str, int]:
        """The GPUs each node's pods hold."""
        return {n: s.gpus - self.free[n][0] for n, s in self.nodes.items()}

    def fits_somewhere(self, task: Task, preempting: bool = False,
                       excluding: Collection[str] = ()) -> bool:
        """Whether a pod of `task` fits on some node but those `excluding` now, or
        (`preempting`) once that node's preemptible pods were gone."""
        return any(all(free[i] + (self.preemptible[n][i] if preempting else 0) >= need
                       for i, need in enumerate(needs(task)))
                   for n, free in self.free.items() if n not in excluding)

    def sample(self, now: float, waiting: Iterable[PodRecord]) -> Sample:
        biggest = max(s.gpus for s in self.nodes.values())
        free_nodes = sum(1 for n, s in self.nodes.items()
                         if s.gpus == biggest and self.free[n][0] == s.gpus)
        stranded = sum(self.free[n][0] for n, s in self.nodes.items()
                       if 0 < self.free[n][0] < s.gpus)
        return Sample(now, free_nodes, stranded, sum(r.task.gpus for r in waiting))


# --- the offline reference ------------------------------------------------------------------

def best_fit_decreasing(sizes: list[int], capacity: dict[str, int]) -> list[str] | None:
    """Nodes for `sizes` (in the given order) by best-fit decreasing on GPUs, or None if they do
    not all fit. With every size and node size a power of two, as here, decreasing-order
    packing is optimal for the GPU dimension."""
    free = dict(capacity)
    placed: dict[int, str] = {}
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        fits = [n for n in free if free[n] >= sizes[i]]
        if not fits:
            return None
        best = min(fits, key=lambda n: (free[n], n))
        free[best] -= sizes[i]
        placed[i] = best
    return [placed[i] for i in range(len(sizes))]


class PowerOfTwoPacking:
    """Whether GPU requests of power-of-two sizes can all be packed onto the nodes, in constant
    time: for such sizes, packing largest first succeeds exactly when, for every size s, the
    requests of s GPUs or more fit into the nodes' whole blocks of s GPUs."""

    SIZES = (8, 4, 2, 1)

    def __init__(self, capacities: Iterable[int]):
        capacities = list(capacities)
        self.blocks = {s: sum(c // s * s for c in capacities) for s in self.SIZES}
        self.count = {s: 0 for s in self.SIZES}

    def _check(self, gpus: int) -> None:
        if gpus not in self.count:
            raise ValueError(f"the reference packs power-of-two requests up to 8 GPUs, not {gpus}")

    def fits_with(self, gpus: int) -> bool:
        self._check(gpus)
        demand = 0
        for s in self.SIZES:
            demand += s * (self.count[s] + (gpus == s))
            if demand > self.blocks[s]:
                return False
        return True

    def add(self, gpus: int, sign: int = 1) -> None:
        self._check(gpus)
        self.count[gpus] += sign


class RepackingReference(Backend):
    """Running pods move for free: a waiting pod starts, in arrival order, as soon as the
    running pods and it can be packed at all, by GPUs, and the cluster's CPU and memory in
    total suffice. No scheduler can place more (CPU and memory per node are left out, which
    only makes the bound looser)."""

    def __init__(self, nodes: dict[str, NodeShape]):
        self.nodes = nodes
        self.packing = PowerOfTwoPacking(s.gpus for s in nodes.values())
        self.spare = [sum(s.cpu_milli for s in nodes.values()),
                      sum(s.memory_mib for s in nodes.values())]
        self.records: list[PodRecord] = []
        self.waiting: list[PodRecord] = []
        self.running: dict[int, list[PodRecord]] = {}      # inference replicas by service

    def submit(self, job: BatchJob, now: float) -> None:
        record = PodRecord(f"job-{job.id}", job.task, now, job=job)
        self.records.append(record)
        self.waiting.append(record)

    def scale(self, service: int, replicas: int, now: float) -> None:
        mine_waiting = [r for r in self.waiting if r.service == service]
        mine_running = self.running.setdefault(service, [])
        task = self._service_tasks[service]
        change = replicas - len(mine_waiting) - len(mine_running)
        for _ in range(change):
            record = PodRecord(f"svc-{service}", task, now, service=service)
            self.records.append(record)
            self.waiting.append(record)
        # Scaling down removes waiting replicas first, as the ReplicaSet controller does.
        for record in (mine_waiting[::-1] + mine_running[::-1])[:max(0, -change)]:
            if record.running:
                self._stop(record)
                mine_running.remove(record)
            else:
                self.waiting.remove(record)
            record.ended = now

    def finish(self, record: PodRecord, now: float) -> None:
        self._stop(record)
        record.ended = now

    def _stop(self, record: PodRecord) -> None:
        self.packing.add(record.task.gpus, -1)
        self.spare[0] += record.task.cpu_milli
        self.spare[1] += record.task.memory_mib

    def settle(self, now: float) -> list[PodRecord]:
        started = []
        for record in list(self.waiting):
            task = record.task
            if (self.packing.fits_with(task.gpus) and task.cpu_milli <= self.spare[0]
                    and task.memory_mib <= self.spare[1]):
                self.packing.add(task.gpus)
                self.spare[0] -= task.cpu_milli
                self.spare[1] -= task.memory_mib
                self.waiting.remove(record)
                if record.service is not None:
                    self.running[record.service].append(record)
                record.started = now
                started.append(record)
        return started

    def sample(self, now: float) -> Sample:
        running = [r for r in self.records if r.running]
        capacity = {n: s.gpus for n, s in self.nodes.items()}
        layout = best_fit_decreasing([r.task.gpus for r in running], capacity)
        ledger = Ledger(self.nodes)
        for record, node in zip(running, layout or [], strict=False):
            ledger.place(PodRecord(record.name, record.task, record.created), node)
        return ledger.sample(now, self.waiting)

    def with_services(self, trace: Trace) -> RepackingReference:
        self._service_tasks = {s.id: s.task for s in trace.services}
        return self


# Contended traces (--contended): seeds after the benchmark's own (1-5) on which even the
# repacking reference starts less than this share of the batch GPU-time on arrival.
CONTENDED_FROM = 6
CONTENDED_BELOW = 0.8


def contended_seeds(count: int, trace_of: Callable[[int], Trace],
                    nodes: dict[str, NodeShape]) -> list[int]:
    """The first `count` seeds from CONTENDED_FROM whose trace (`trace_of(seed)`) is contended
    on `nodes`: the repacking reference starts less than CONTENDED_BELOW of its batch GPU-time
    on arrival."""
    found: list[int] = []
    seed = CONTENDED_FROM
    while len(found) < count:
        if reference(trace_of(seed), nodes).started_on_arrival() < CONTENDED_BELOW:
            found.append(seed)
        seed += 1
    return found


REFERENCE = "reference (repacking)"


def reference(trace: Trace, nodes: dict[str, NodeShape]) -> Outcome:
    return play(REFERENCE, trace, RepackingReference(nodes).with_services(trace),
                sum(s.gpus for s in nodes.values()))
