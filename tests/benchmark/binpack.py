"""How well a kube-scheduler profile packs GPU pods, with queueing: a seeded trace (workload.py)
of batch Jobs and scaling inference Deployments, replayed in simulated time against a real
kube-scheduler and kube-controller-manager on a local control plane, and against an offline
reference that moves running pods freely.

A pod that cannot be placed waits, as on a real cluster, and the scheduler retries it whenever
the cluster changes. After every trace event the replay waits until the cluster has settled: the
controllers have created or removed the pods the event asks for, and no waiting pod fits on any
node any more (by the same arithmetic the scheduler's resource filter does). Simulated time stands
still meanwhile, so a pod bound during that wait started at the event's time.
"""

from __future__ import annotations

import copy
import heapq
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "integration")]

import workload  # noqa: E402
from workload import BatchJob, NodeShape, Scale, Task, Trace  # noqa: E402

import descheduler  # noqa: E402
import fake_kubelet  # noqa: E402
import kube_components  # noqa: E402
import nodes_and_pods  # noqa: E402
import tools  # noqa: E402
from components import gpu_compaction, gpu_operator  # noqa: E402
from components.binpack_scheduler import (  # noqa: E402
    preemptible_priority_class,
    scheduler_configuration,
)
from components.gpu_compaction.planner import compaction_plan  # noqa: E402
from components.platform.settings import StackSettings  # noqa: E402
from controlplane import (  # noqa: E402
    ApiError,  # noqa: E402
    ControlPlane,
    wait_until,
)
from harness import compaction_of, operator_of, scheduler_of, scheduler_scoring  # noqa: E402

NAMESPACE = "bench"
GPU = "nvidia.com/gpu"
SAMPLES = 200          # points of the over-time figures
COMPACT = "compaction run"


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
# k8s.io/kubernetes, at the version tests/tools.py builds).
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
    compaction_interval: float | None = None   # simulated hours between compaction runs
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
    def compact(self, now: float) -> None: ...


def play(label: str, trace: Trace, backend: Backend, total_gpus: int,
         progress: Callable[[int, int], None] = lambda done, total: None) -> Outcome:
    """Walk the trace in simulated time: arrivals and scalings from the trace, and the end of
    each batch job `duration` after it started. At equal times jobs end before others arrive."""
    events: list = []
    order = 0
    for when, _kind, item in trace.arrivals():
        heapq.heappush(events, (when, 1, order, item))
        order += 1
    interval = backend.compaction_interval
    if interval:
        for tick in range(1, int(trace.horizon / interval) + 1):
            heapq.heappush(events, (tick * interval, 2, order, COMPACT))
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
        elif item is COMPACT:
            backend.compact(now)
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

    def fits_somewhere(self, task: Task, preempting: bool = False) -> bool:
        """Whether a pod of `task` fits on some node now, or (`preempting`) once that node's
        preemptible pods were gone."""
        return any(all(free[i] + (self.preemptible[n][i] if preempting else 0) >= need
                       for i, need in enumerate(needs(task)))
                   for n, free in self.free.items())

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


def reference(trace: Trace, nodes: dict[str, NodeShape]) -> Outcome:
    return play("reference (repacking)", trace, RepackingReference(nodes).with_services(trace),
                sum(s.gpus for s in nodes.values()))


# --- the real cluster -----------------------------------------------------------------------

DEFAULT_PROFILE = "default (LeastAllocated)"


def profiles(settings: StackSettings, variants: bool = False) -> dict[str, dict]:
    """The KubeSchedulerConfigurations compared: the project's rendered one (leader election
    off: one replica here), the default profile and MostAllocated; with `variants`, the rendered
    one with other resource weights and with kube-scheduler's adaptive share of nodes scored."""
    shipped = replay_configuration(scheduler_configuration(scheduler_of(settings)))
    chosen = {settings.scheduler.name: shipped,
              DEFAULT_PROFILE: kube_components.scheduler_with_strategy("default-scheduler"),
              "MostAllocated": kube_components.scheduler_with_strategy("most-allocated", {
                  "type": "MostAllocated",
                  "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]})}
    if variants:
        for label, weights in (("equal weights", {"cpu": 1, "memory": 1}), ("GPU only", {})):
            config = json.loads(json.dumps(shipped))
            fit = next(c for c in config["profiles"][0]["pluginConfig"]
                       if c["name"] == "NodeResourcesFit")
            strategy = fit["args"]["scoringStrategy"]
            strategy["resources"] = [{"name": r["name"], "weight": weights.get(r["name"], 1)}
                                     for r in strategy["resources"]
                                     if r["name"] not in ("cpu", "memory") or weights]
            chosen[f"{settings.scheduler.name}, {label}"] = config
        adaptive = json.loads(json.dumps(shipped))
        adaptive["percentageOfNodesToScore"] = 0
        chosen[f"{settings.scheduler.name}, adaptive nodes scored"] = adaptive
    # Each profile's scheduler name is its own, so the pods name the scheduler under test.
    return {label: replay_configuration(config) for label, config in chosen.items()}


def replay_configuration(config: dict) -> dict:
    """`config` as the replay runs it: one replica (no leader election), and a retry backoff of
    one second, kube-scheduler's least. Neither changes where a pod lands; the backoff only
    keeps the wall-clock wait for a retry short (simulated time stands still meanwhile)."""
    config = json.loads(json.dumps(config))
    config["leaderElection"] = {"leaderElect": False}
    config["podInitialBackoffSeconds"] = 1
    config["podMaxBackoffSeconds"] = 1
    return config


def scheduler_name(config: dict) -> str:
    return config["profiles"][0]["schedulerName"]


def node_status_capacity(shape: NodeShape) -> dict[str, str]:
    return {GPU: str(shape.gpus), "cpu": f"{shape.cpu_milli}m",
            "memory": f"{shape.memory_mib}Mi", "pods": "110"}


@dataclass(frozen=True)
class GpuPath:
    """How the fake GPU nodes hand out their GPUs, and on which Kubernetes release: the device
    plugin's extended resource in the node's status (the example stack's release by default),
    or NVIDIA's DRA driver's ResourceSlices served as nvidia.com/gpu through the platform's
    DeviceClass (the DRA path, on tools.DRA_KUBERNETES_VERSION). Pods ask for nvidia.com/gpu
    either way."""
    dra: bool = False
    kubernetes: str | None = None

    @property
    def label(self) -> str:
        """What a replay's label adds (nothing for the device plugin on the example's release)."""
        if not self.dra and self.kubernetes is None:
            return ""
        return f", Kubernetes {self.kubernetes}, {'DRA' if self.dra else 'device plugin'}"

    def control_plane(self, apiserver_args: tuple[str, ...] = ()) -> ControlPlane:
        return ControlPlane(apiserver_args, kubernetes=self.kubernetes)

    def controllers(self, cp: ControlPlane) -> kube_components.ControllerManager:
        return kube_components.ControllerManager(cp, ("resourceclaim-controller",) if self.dra
                                                 else ())

    def create_nodes(self, cp: ControlPlane, settings: StackSettings,
                     nodes: dict[str, NodeShape]) -> None:
        kube = cp.admin
        if self.dra:
            for device_class in gpu_operator.device_classes(dra_operator(settings)):
                kube.create(device_class)
        for name, shape in nodes.items():
            capacity = node_status_capacity(shape)
            if self.dra:
                del capacity[GPU]
            nodes_and_pods.create_gpu_node(kube, settings, name, shape.gpus, capacity=capacity)
            if self.dra:
                kube.create(nodes_and_pods.nvidia_resource_slice(name, shape.gpus))


DEVICE_PLUGIN = GpuPath()


def dra_operator(settings: StackSettings):
    """The GPU Operator's inputs of `settings` on the DRA path."""
    op = settings.gpu_operator.model_copy(update={"gpu_path": "dra"})
    return operator_of(settings.model_copy(update={
        "gpu_operator": op, "kubernetes_version": tools.DRA_KUBERNETES_VERSION}))


def pod_template(labels: dict[str, str], task: Task, scheduler: str,
                 settings: StackSettings) -> dict:
    """The integration suite's GPU pod template with `task`'s requests; deleted pods go at once
    (no grace period), as the replay has no kubelet to wait for."""
    template = nodes_and_pods.pod_template(labels, gpus=task.gpus, scheduler=scheduler,
                                           settings=settings, cpu=f"{task.cpu_milli}m",
                                           memory=f"{task.memory_mib}Mi")
    template["spec"]["terminationGracePeriodSeconds"] = 0
    return template


class RealCluster(Backend):
    """The trace on a local control plane: fake GPU nodes, one kube-scheduler running the
    profile under test, kube-controller-manager for Jobs and Deployments, and this class doing
    what kubelets would: pods bound to a node run; a job's pod succeeds when its time is up; a
    pod a controller deletes goes at once."""

    # Longer than the Job controller's longest wait before it replaces a failed pod, which a
    # Job evicted again and again reaches (JOB_BACKOFF_MAX_SECONDS).
    SETTLE_TIMEOUT = JOB_BACKOFF_MAX_SECONDS + 60.0
    WATCHED_NAMESPACE: str | None = NAMESPACE     # None: every namespace
    SETTLE_POLL = 1.0       # seconds to wait for a pod event before looking again

    def __init__(self, cp: ControlPlane, config: dict, nodes: dict[str, NodeShape],
                 trace: Trace, settings: StackSettings,
                 compaction: Compaction | None = None,
                 preemptible_jobs: frozenset = frozenset(), checkpoint_every: float = 0.5,
                 gpu_path: GpuPath = DEVICE_PLUGIN):
        self.kube, self.settings = cp.admin, settings
        self.compaction = compaction
        self.preemptible_jobs = preemptible_jobs
        self.checkpoint_every = checkpoint_every
        if compaction:
            self.compaction_interval = compaction.interval
        self.descheduler_kubeconfig = cp.kubeconfig("descheduler") if compaction else None
        self.scheduler_name = scheduler_name(config)
        self.ledger = Ledger(nodes)
        self.records: list[PodRecord] = []
        self.by_name: dict[str, PodRecord] = {}
        self.owner_of: dict[str, tuple[str, object]] = {}
        self.expected_jobs: set[int] = set()
        self.jobs_by_name: dict[str, BatchJob] = {}
        self.waiting: dict[str, PodRecord] = {}         # created, not yet bound
        self.live: Counter = Counter()                   # replicas not yet gone, by service
        self.replicas: dict[int, int] = {}
        self.services = {s.id: s for s in trace.services}
        self.pending_finish: set[str] = set()
        self.checkpointed: dict[int, float] = {}         # hours of work saved, by evicted job
        self.evicted_at: dict[int, float] = {}           # when it last lost its pod, by job
        self.labelled: set[str] = set()                  # pods given the opt-in label
        self.now = 0.0
        self.gpu_path = gpu_path
        gpu_path.create_nodes(cp, settings, nodes)
        nodes_and_pods.ensure_namespace(self.kube, NAMESPACE)
        if preemptible_jobs:
            self.kube.create(preemptible_priority_class(scheduler_of(settings)))
        self.watch = kube_components.PodWatch(self.kube, self.WATCHED_NAMESPACE)
        for service in trace.services:
            self._create_service(service)
        self.controllers = gpu_path.controllers(cp)
        self.scheduler = kube_components.Scheduler(cp, "scheduler", config,
                                                   kubeconfig=cp.kubeconfig("scheduler"))

    # where the trace's workloads go

    def job_namespace(self, job: BatchJob) -> str:
        return NAMESPACE

    def service_namespace(self, service: int) -> str:
        return NAMESPACE

    # trace events

    def _create_service(self, service) -> None:
        labels = {"app": f"svc-{service.id}"}
        namespace = self.service_namespace(service.id)
        self.kube.create({"apiVersion": "v1", "kind": "Service",
                          "metadata": {"name": f"svc-{service.id}", "namespace": namespace},
                          "spec": {"selector": labels, "ports": [{"port": 80}]}})
        self.kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                          "metadata": {"name": f"svc-{service.id}", "namespace": namespace},
                          "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                                   "template": pod_template(labels, service.task,
                                                            self.scheduler_name,
                                                            self.settings)}})
        self.replicas[service.id] = 0

    def submit(self, job: BatchJob, now: float) -> None:
        self.now = now
        name = f"job-{job.id}"
        self.expected_jobs.add(job.id)
        template = pod_template({"job": name}, job.task, self.scheduler_name, self.settings)
        preemptible = job.id in self.preemptible_jobs
        if preemptible:
            template["spec"]["priorityClassName"] = self.settings.scheduler.preemptible_class.name
        self.kube.create(nodes_and_pods.job(
            name, self.job_namespace(job), template, resumes_after_eviction=preemptible or (
                bool(self.compaction) and self.compaction.moves(job=job))))
        self.jobs_by_name[name] = job

    def scale(self, service: int, replicas: int, now: float) -> None:
        self.now = now
        self.replicas[service] = replicas
        self.kube.merge_patch("apps/v1", "Deployment", f"svc-{service}",
                              {"spec": {"replicas": replicas}},
                              self.service_namespace(service), "scale",
                              what=f"scale svc-{service} to {replicas}")

    def finish(self, record: PodRecord, now: float) -> None:
        self.now = now
        self.pending_finish.add(record.name)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": record.name, "namespace": record.namespace}}
        self.kube.patch_status(pod, {"phase": "Succeeded", "conditions": [
            {"type": "Ready", "status": "False", "reason": "PodCompleted"}]})

    def compact(self, now: float) -> None:
        """One run of the real descheduler with the platform's compaction policy; the pods it
        evicts go, and their replacements wait for the scheduler, as any new pod does.

        minPodAge in simulated time: an opted-in pod gets the opt-in label only once it has run
        that long, so the descheduler sees it only then."""
        self.now = now
        compaction = self.compaction
        if compaction is None:      # play() calls this only at a compaction_interval: with one
            raise RuntimeError("a compaction run in a replay without compaction")
        of_age = now - self.settings.compaction.min_pod_age_hours
        for record in self.records:
            if (record.running and record.started is not None and record.started <= of_age
                    and record.name not in self.labelled
                    and compaction.moves(record.job, record.service)):
                self.kube.merge_patch("v1", "Pod", record.name,
                                      {"metadata": {"labels": self.settings.compaction.opt_in}},
                                      NAMESPACE, what=f"opt {record.name} in to compaction")
                self.labelled.add(record.name)
        policy = compaction.run_policy(
            self.kube.list("v1", "Node"), self.kube.list("v1", "Pod", NAMESPACE),
            self.settings.compaction.plan_threshold)
        compaction.policy_file.write_text(json.dumps(policy))
        run = subprocess.run(descheduler.descheduler_command(
            [f"--policy-config-file={compaction.policy_file}", "--disable-metrics",
             "--v=1"], self.descheduler_kubeconfig), capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise RuntimeError(f"the compaction run failed:\n{run.stderr[-3000:]}")
        evicted = re.search(r"totalEvicted=(\d+)", run.stderr)
        self.evictions += int(evicted[1]) if evicted else 0

    # what the watch says

    def _on_event(self, kind: str, pod: dict, started: list[PodRecord]) -> None:
        name = pod["metadata"]["name"]
        record = self.by_name.get(name)
        if record is None:
            if kind == "DELETED":
                return
            record = self._record_for(pod)
        if record.ended is not None:
            return
        node = pod["spec"].get("nodeName")
        phase = pod.get("status", {}).get("phase")
        if kind == "DELETED" or phase in ("Succeeded", "Failed") or \
                pod["metadata"].get("deletionTimestamp"):
            if pod["metadata"].get("deletionTimestamp") and kind != "DELETED":
                fake_kubelet.remove_deleted_pod(self.kube, pod)
            if record.node is not None:
                self.ledger.release(record)
            if record.job is not None and record.running and name not in self.pending_finish:
                self._evicted(record)
                if any(c.get("reason") == "PreemptionByScheduler"
                       for c in pod.get("status", {}).get("conditions", [])):
                    self.evictions += 1
            record.ended = self.now
            self.pending_finish.discard(name)
            self.waiting.pop(name, None)
            if record.service is not None:
                self.live[record.service] -= 1
            return
        record.nominated = pod.get("status", {}).get("nominatedNodeName")
        if node and record.node is None:
            self.ledger.place(record, node)
            record.started = self.now
            del self.waiting[name]
            started.append(record)
            try:
                self.kube.patch_status(pod, fake_kubelet.pod_status("Running", ready=True,
                                                                    reason="Replay"))
            except ApiError as error:
                if error.status != 404:     # evicted or scaled away meanwhile: its event follows
                    raise

    def _evicted(self, record: PodRecord) -> None:
        """A job's pod ended before its time: its Job starts a replacement, which resumes
        from the last checkpoint; the work done since is lost."""
        job, started = record.job, record.started
        if job is None or started is None:
            raise ValueError(f"{record.name} is not a started job's pod")
        ran = self.now - started
        saved = ran // self.checkpoint_every * self.checkpoint_every
        self.checkpointed[job.id] = (record.resumed_at or 0.0) + saved
        self.evicted_at[job.id] = self.now
        self.lost_gpu_hours += record.task.gpus * (ran - saved)
        self.expected_jobs.add(job.id)

    def _record_for(self, pod: dict) -> PodRecord:
        labels = pod["metadata"].get("labels", {})
        name = pod["metadata"]["name"]
        if "job" in labels:
            job = self.jobs_by_name[labels["job"]]
            self.expected_jobs.discard(job.id)
            preemptible = job.id in self.preemptible_jobs
            if job.id in self.checkpointed:
                # Waiting since the eviction (a suspended Job's replacement comes only when
                # its queue admits it again).
                record = PodRecord(name, job.task, self.evicted_at[job.id], job=job,
                                   resumed_at=self.checkpointed[job.id], preemptible=preemptible)
            else:
                record = PodRecord(name, job.task, job.arrival, job=job, preemptible=preemptible)
        else:
            service = int(labels["app"].removeprefix("svc-"))
            record = PodRecord(name, self.services[service].task, self.now, service=service)
        record.namespace = pod["metadata"]["namespace"]
        self.records.append(record)
        self.by_name[name] = record
        self.waiting[name] = record
        if record.service is not None:
            self.live[record.service] += 1
        return record

    def _unsettled(self) -> str:
        if self.expected_jobs:
            return f"{len(self.expected_jobs)} Jobs without a pod yet"
        off = [s for s, n in self.replicas.items() if self.live[s] != n]
        if off:
            return f"Deployments {off} not at their replica count"
        if self.pending_finish:
            return f"{len(self.pending_finish)} finished pods not seen as finished"
        if self.gpu_path.dra and (allocated := self._allocated()) != self.ledger.gpus_held():
            # A finished pod's claim is released by the resource-claim controller a moment
            # later: until then the scheduler sees its GPUs taken.
            return f"claims allocate {allocated}, the pods hold {self.ledger.gpus_held()}"
        fitting = [r.name for r in self.placeable() if self.ledger.fits_somewhere(r.task)]
        if fitting:
            return f"waiting pods that fit on a node: {fitting[:5]}"
        if self.preemptible_jobs:
            preempting = self._could_preempt()
            if preempting:
                return f"waiting pods that preemption would make room for: {preempting[:5]}"
        return ""

    def _allocated(self) -> dict[str, int]:
        """On the DRA path, the GPUs the claims of every namespace allocate on each node."""
        counts = dict.fromkeys(self.ledger.nodes, 0)
        for claim in self.kube.request("GET", "/apis/resource.k8s.io/v1/resourceclaims")["items"]:
            for result in ((claim.get("status") or {}).get("allocation") or {}).get(
                    "devices", {}).get("results", []):
                counts[result["pool"]] += 1
        return counts

    def placeable(self) -> Iterable[PodRecord]:
        """The waiting pods the scheduler may place."""
        return self.waiting.values()

    def _could_preempt(self) -> list[str]:
        """Waiting pods, not yet nominated, that would fit on a node once its preemptible pods
        were gone: kube-scheduler preempts for them when it next tries them."""
        return [r.name for r in self.waiting.values()
                if not r.preemptible and not r.nominated
                and self.ledger.fits_somewhere(r.task, preempting=True)]

    def settle(self, now: float) -> list[PodRecord]:
        self.now = now
        started: list[PodRecord] = []
        deadline = time.monotonic() + self.SETTLE_TIMEOUT
        while True:
            event = self.watch.next(timeout=0)
            while event is not None:
                self._on_event(*event, started)
                event = self.watch.next(timeout=0)
            reason = self._unsettled()
            if not reason:
                return started
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not settle at simulated hour {now:.2f}: "
                                   f"{reason}\n{self.scheduler.process.tail()}")
            event = self.watch.next(timeout=self.SETTLE_POLL)
            if event is not None:
                self._on_event(*event, started)

    def sample(self, now: float) -> Sample:
        return self.ledger.sample(now, self.waiting.values())

    def figures(self, cp: ControlPlane) -> dict:
        """The run's own figures, read before the control plane goes: the scheduler's."""
        return scrape(self.scheduler, cp)

    def stop(self) -> None:
        self.watch.stop()


def histogram_quantile(buckets: Sequence[tuple[float, float]], quantile: float) -> float | None:
    """The quantile of a Prometheus histogram from its cumulative (upper bound, count) buckets,
    interpolated within the bucket as Prometheus' histogram_quantile does."""
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = quantile * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below) if count > below \
                else bound
        lower, below = bound, count
    return lower


def histogram(text: str, metric: str, match: str = "") -> list[tuple[float, float]]:
    """A histogram's cumulative buckets from Prometheus text, summed over the series whose
    labels contain `match`."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(metric + "_bucket{") and match in line:
            le = re.search(r'[{,]le="([^"]+)"', line)
            if le is None:
                raise ValueError(f"a {metric} bucket without an le label: {line}")
            bound = float(le[1])
            buckets[bound] = buckets.get(bound, 0) + float(line.rsplit(" ", 1)[1])
    return sorted(buckets.items())


def counter(text: str, metric: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(metric + " ") or line.startswith(metric + "{"))


def scrape(scheduler: kube_components.Scheduler, cp: ControlPlane) -> dict:
    """The scheduler's own figures: the duration of successful scheduling attempts and of their
    scheduling algorithm (filter and score, without binding), attempts, CPU seconds, and the
    peak resident memory of its process."""
    cert, key = cp.admin_cert
    text = requests.get(f"https://127.0.0.1:{scheduler.port}/metrics", cert=(str(cert), str(key)),
                        verify=str(cp.ca_file), timeout=10).text
    attempt = histogram(text, "scheduler_scheduling_attempt_duration_seconds",
                        'result="scheduled"')
    algorithm = histogram(text, "scheduler_scheduling_algorithm_duration_seconds")
    status = Path(f"/proc/{scheduler.process.pid}/status").read_text()
    peak_kib = next(int(line.split()[1]) for line in status.splitlines()
                    if line.startswith("VmHWM:"))
    return {"attempt_p50": histogram_quantile(attempt, 0.5),
            "attempt_p95": histogram_quantile(attempt, 0.95),
            "algorithm_p50": histogram_quantile(algorithm, 0.5),
            "algorithm_p95": histogram_quantile(algorithm, 0.95),
            "attempts": counter(text, "scheduler_schedule_attempts_total"),
            "cpu_seconds": counter(text, "process_cpu_seconds_total"),
            "peak_rss_mib": peak_kib / 1024}


@dataclass(frozen=True)
class Compaction:
    """The platform's compaction in a replay: the descheduler with the rendered policy every
    `interval` simulated hours. The pods of the inference services in `opted_in` and of the
    batch jobs in `jobs_opted_in` may move; those jobs checkpoint (see `replay`), and their
    Jobs replace an evicted pod (pod failure policy), which resumes from the last checkpoint.
    The replay applies minPodAge in simulated time, through the opt-in label (see
    `RealCluster.compact`), since its pods have no wall-clock age that means anything."""
    interval: float
    opted_in: frozenset
    jobs_opted_in: frozenset
    policy: dict                # as the platform renders it, minPodAge included
    scoring: dict               # the binpack scheduler's, which the plan predicts with
    policy_file: Path           # where each run's policy is written

    def moves(self, job: BatchJob | None = None, service: int | None = None) -> bool:
        return (job.id in self.jobs_opted_in) if job is not None else service in self.opted_in

    def run_policy(self, nodes: list[dict], pods: list[dict], planned: bool) -> dict:
        """The policy one run gets: planned (if `planned`) as the CronJob's init container
        plans it, from the platform's policy, so the plan's rules that turn on minPodAge apply
        as they would there; a labelled pod is old enough, whatever its wall-clock age. The
        descheduler then runs with minPodAge 0s, the label having applied it already."""
        run = compaction_plan.planned_policy(self.policy, nodes, pods, self.scoring,
                                             now=math.inf)[0] if planned \
            else copy.deepcopy(self.policy)
        compaction_plan.plugin_args(run, "DefaultEvictor")["minPodAge"] = "0s"
        return run


def compaction_for(settings: StackSettings, trace: Trace, services_share: float,
                   jobs_share: float, interval: float, work: Path) -> Compaction:
    """`settings.compaction` is the policy replayed; the shares say which services and which
    jobs opt in (the same ones for every replay of a seed)."""
    services = sorted(s.id for s in trace.services)
    opted = frozenset(services[:round(services_share * len(services))])
    jobs = frozenset(j.id for j in trace.jobs if opts_in(j, jobs_share))
    work.mkdir(parents=True, exist_ok=True)
    policy = gpu_compaction.descheduler_policy(compaction_of(settings))
    return Compaction(interval, opted, jobs, policy, scheduler_scoring(settings),
                      work / f"compaction-policy-{os.getpid()}.json")


def opts_in(job: BatchJob, share: float) -> bool:
    """Whether `job` is among `share` of the jobs: the same draw for every replay of a trace,
    so the jobs that opt in to compaction and those that opt in to preemption coincide."""
    return random.Random(job.id).random() < share


def preemptible_jobs(trace: Trace, share: float, whole_node_gpus: int) -> frozenset:
    """`share` of the batch jobs smaller than a whole node, which run in the preemptible class
    (checkpointing Jobs whose evicted pod resumes); the whole-node jobs preempt them."""
    return frozenset(j.id for j in trace.jobs
                     if j.task.gpus < whole_node_gpus and opts_in(j, share))


def replay(label: str, config: dict, trace: Trace, nodes: dict[str, NodeShape],
           settings: StackSettings,
           progress: Callable[[int, int], None] = lambda done, total: None,
           compaction: Compaction | None = None, preemptible: frozenset = frozenset(),
           checkpoint_every: float = 0.5, gpu_path: GpuPath = DEVICE_PLUGIN) -> Outcome:
    """The trace against one kube-scheduler running `config`, on a fresh control plane (with
    `compaction`: the descheduler's runs as well; the jobs in `preemptible` run in the
    platform's preemptible class), whose GPU nodes hand out GPUs by `gpu_path`. A job that is
    evicted or preempted resumes from its last checkpoint, taken every `checkpoint_every`
    simulated hours."""
    return on_control_plane(label, trace, nodes, lambda cp: RealCluster(
        cp, config, nodes, trace, settings, compaction, preemptible, checkpoint_every,
        gpu_path), progress, gpu_path=gpu_path)[0]


def on_control_plane(label: str, trace: Trace, nodes: dict[str, NodeShape],
                     cluster_on: Callable[[ControlPlane], RealCluster],
                     progress: Callable[[int, int], None] = lambda done, total: None,
                     apiserver_args: tuple[str, ...] = (),
                     gpu_path: GpuPath = DEVICE_PLUGIN) -> tuple[Outcome, RealCluster]:
    """The trace played on the cluster `cluster_on` sets up on a fresh control plane (of
    `gpu_path`'s release); the outcome, and the cluster (stopped) for what else it recorded."""
    cp = gpu_path.control_plane(apiserver_args).start()
    backend = None
    try:
        backend = cluster_on(cp)
        outcome = play(label, trace, backend, sum(s.gpus for s in nodes.values()), progress)
        outcome.scheduler_metrics = backend.figures(cp)
        return outcome, backend
    finally:
        if backend is not None:
            backend.stop()
        cp.stop()


def latency_probe(config: dict, node_count: int, pods: int, settings: StackSettings,
                  gpu_path: GpuPath = DEVICE_PLUGIN) -> dict:
    """What one profile's scheduling attempts cost on `node_count` 8-GPU nodes (handing out
    GPUs by `gpu_path`): a Deployment of `pods` 1-GPU replicas is placed, then the scheduler's
    own figures are read."""
    nodes = workload.CLUSTERS["homogeneous"](node_count)
    cp = gpu_path.control_plane().start()
    try:
        kube = cp.admin
        gpu_path.create_nodes(cp, settings, nodes)
        nodes_and_pods.ensure_namespace(kube, NAMESPACE)
        controllers = gpu_path.controllers(cp)
        scheduler = kube_components.Scheduler(cp, "scheduler", config,
                                              kubeconfig=cp.kubeconfig("scheduler"))
        labels = {"app": "probe"}
        started = time.monotonic()
        kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "probe", "namespace": NAMESPACE},
                     "spec": {"replicas": pods, "selector": {"matchLabels": labels},
                              "template": pod_template(labels, Task(1, 4000, 32768),
                                                       scheduler_name(config), settings)}})

        def bound() -> bool:
            listed = kube.list("v1", "Pod", NAMESPACE)
            return len([p for p in listed if p["spec"].get("nodeName")]) == pods
        wait_until(bound, f"{pods} probe pods to be bound", timeout=600, interval=1.0)
        figures = scrape(scheduler, cp) | {"wall_seconds": time.monotonic() - started}
        controllers.stop()
        return figures
    finally:
        cp.stop()
