"""The binpack benchmark with idle GPUs (`bash tests/run benchmark --reclaim`): the replay's trace
with a share of batch jobs whose pods hold their GPUs idle for hours, played with the platform's
idle reclaim off, reporting only, and evicting after its grace period. Each replay's figures are
kept in results/reclaim.jsonl, and report.reclaim_page renders the table from it.

What is real: the reclaim run is the CronJob's own script (`run` in
components/gpu_reclaim/actor/gpu_reclaim.py: its decisions, events, annotations and evictions
through the eviction API) with the declared ServiceAccount's token and Roles, against the real
API server; the Job controller decides what an evicted pod's Job does. What stands in: the idle
set Prometheus would answer is computed from the trace's activity, by the query's definition (a
pod that held its GPUs for the whole window and was active at no time within it); the query
itself is tested on exporter-shaped series in promtool and in the real Prometheus. The run's clock
is the replay's simulated time: a pod's start time is written at its simulated start, and each
run is given the simulated time as its `now`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import random
import ssl
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmark import binpack, report, workload
from benchmark.binpack import NAMESPACE, NodeShape, Outcome, PodRecord, Trace
from benchmark.real_cluster import RealCluster, on_control_plane
from benchmark.replay_setup import profiles
from components import gpu_reclaim
from components.gpu_reclaim.actor import gpu_reclaim as actor
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster.controlplane import ControlPlane

# Which batch jobs hold GPUs idle and for how long, drawn per job, whatever its size. Hung: done
# with its work (or waiting on a dead peer), it holds its GPUs until its owner notices, as a
# notebook left open overnight does. Stalled: it stops working mid-run (data loading, a peer
# restarting) and then works again, so that evicting it in the stall loses the job. Idle hours
# are log-normal. The shares put about a fifth of the GPU-time held idle (each replay keeps the
# share it had), as a 2026 study of production clusters measured of in-execution GPU time,
# though here in idle spells of hours only: gaps shorter than any reclaim window are left out.
# The trace's load is its work: idle holders push what is held to about the cluster's capacity
# at load 0.8.
HUNG_SHARE = 0.15
HUNG_MEDIAN_HOURS = 8.0
STALLED_SHARE = 0.10
STALLED_MEDIAN_HOURS = 2.0
IDLE_SIGMA = 0.5
# The simulated clock's origin, as the reclaim run reads times (pods' start times, its reports).
EPOCH = 1_767_225_600.0    # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class Idleness:
    """When a job's pod holds its GPUs idle, in hours after the pod started; after `end` it
    works again if it `resumes` (a stall), else it ends there (hung until its owner deletes
    it)."""
    start: float
    end: float
    resumes: bool

    def idle_through(self, since: float, until: float) -> bool:
        """Active at no time from `since` to `until` (hours after the pod started)."""
        return self.start <= since and until <= self.end

    def idle_hours(self, until: float) -> float:
        """Hours idle from the pod's start to `until`."""
        return max(0.0, min(until, self.end) - self.start)


@dataclass(frozen=True)
class IdleTrace:
    """A trace whose jobs' durations include their idle hours, and each idle job's idleness."""
    trace: Trace
    idleness: dict[int, Idleness]


def with_idleness(trace: Trace, seed: int) -> IdleTrace:
    """`trace` with HUNG_SHARE of its batch jobs hung after their work and STALLED_SHARE
    stalled within it; drawn from a stream of its own, so that the jobs, arrivals and work are
    the seed's trace as every other replay plays it."""
    rng = random.Random(f"idle-{seed}")
    jobs, idleness = [], {}
    for job in trace.jobs:
        draw = rng.random()
        if draw < HUNG_SHARE:
            idle = HUNG_MEDIAN_HOURS * math.exp(rng.gauss(0, IDLE_SIGMA))
            idleness[job.id] = Idleness(job.duration, job.duration + idle, resumes=False)
        elif draw < HUNG_SHARE + STALLED_SHARE:
            idle = STALLED_MEDIAN_HOURS * math.exp(rng.gauss(0, IDLE_SIGMA))
            start = job.duration * rng.uniform(0.2, 0.8)
            idleness[job.id] = Idleness(start, start + idle, resumes=True)
        else:
            jobs.append(job)
            continue
        jobs.append(dataclasses.replace(job, duration=job.duration + idle))
    return IdleTrace(dataclasses.replace(trace, jobs=jobs), idleness)


@dataclass(frozen=True)
class Mode:
    """A replay's reclaim: off (None), or the `reclaim` settings changed as in the stack file
    (with reclaim on for the replay's namespace)."""
    label: str
    changes: dict | None


MODES = (Mode("off", None),
         Mode("report", {"action": "report"}),
         Mode("evict (defaults)", {"action": "evict"}),
         Mode("evict, idleFor 1h, gracePeriod 1h",
              {"action": "evict", "idleFor": "1h", "gracePeriod": "1h"}))


def reclaim_settings(settings: StackSettings, mode: Mode) -> StackSettings:
    """The stack with reclaim on for the replay's namespace only, as `mode` sets it, validated
    as a stack file's section would be."""
    section = settings.reclaim.model_dump(by_alias=True) | {
        "enabled": True, "namespaces": [NAMESPACE], "teams": [], "policies": [],
        **(mode.changes or {})}
    return settings.model_copy(update={
        "reclaim": type(settings.reclaim).model_validate(section)})


def run_every_hours(schedule: str) -> float:
    """The hours between runs of a `*/N * * * *` schedule (the shipped one's form)."""
    minute, *rest = schedule.split()
    if not minute.startswith("*/") or any(field != "*" for field in rest):
        raise ValueError(f"the replay plays schedules of the form '*/N * * * *', not {schedule!r}")
    return int(minute.removeprefix("*/")) / 60


def idle_set(records: list[PodRecord], idleness: dict[int, Idleness], window: float,
             now: float) -> dict[tuple[str, str], int]:
    """What Prometheus would answer at simulated hour `now`: the running pods that held their
    GPUs for the whole `window` (hours) and were active at no time within it, with their GPUs."""
    idle = {}
    for record in records:
        if record.running and record.job is not None and record.started is not None:
            idle_job = idleness.get(record.job.id)
            ran = now - record.started
            if idle_job and ran >= window and idle_job.idle_through(ran - window, ran):
                idle[(record.namespace, record.name)] = record.task.gpus
    return idle


@dataclass
class Reclaimed:
    """A pod the reclaim run evicted, at simulated hour `at`."""
    record: PodRecord
    at: float
    busy: bool          # active within the window before its eviction (must never happen)


class ReclaimCluster(RealCluster):
    """The real cluster with the reclaim run every schedule tick (none when off). An evicted
    pod's Job is not retried (backoffLimit 0, no pod failure policy that ignores evictions):
    the job ends there, as a Job whose pod failure policy says nothing of evictions does."""

    def __init__(self, cp: ControlPlane, config: dict, nodes: dict[str, NodeShape],
                 idle: IdleTrace, settings: StackSettings, mode: Mode):
        super().__init__(cp, config, nodes, idle.trace, settings)
        self.idle = idle
        self.reclaimed: list[Reclaimed] = []
        self.outcomes: Counter = Counter()
        self.runs, self.run_seconds = 0, 0.0
        self.actor_config: actor.Config | None = None
        self.window = settings.reclaim.idle_for_seconds / 3600
        if mode.changes is not None:
            inputs = component_inputs(settings).reclaim
            self.actor_config = gpu_reclaim.actor_config(inputs)
            self.periodic_interval = run_every_hours(settings.reclaim.schedule)
            for obj in gpu_reclaim.reclaim_objects(inputs):
                # Its rights, not its CronJob: the replay runs the script on its own clock.
                if obj["kind"] in ("Namespace", "ServiceAccount", "Role", "RoleBinding"):
                    self.kube.create(obj)
            reclaim = settings.reclaim
            token = cp.service_account_token(reclaim.namespace, reclaim.name)
            self.api = actor.Api(cp.server, token,
                                 ssl.create_default_context(cafile=str(cp.ca_file)))

    def running_status(self) -> dict:
        status = super().running_status()
        status["startTime"] = actor.format_time(EPOCH + self.now * 3600)
        return status

    def periodic(self, now: float) -> None:
        """One reclaim run at simulated hour `now`; its log is kept to the counts."""
        if self.actor_config is None:
            raise RuntimeError("a reclaim run in a replay without reclaim")
        self.now = now
        started = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):
            counts = actor.run(self.api, self.actor_config,
                               idle_set(self.records, self.idle.idleness, self.window, now),
                               EPOCH + now * 3600)
        self.run_seconds += time.monotonic() - started
        self.runs += 1
        self.outcomes.update(counts)

    def _evicted(self, record: PodRecord) -> None:
        """Only the reclaim run evicts here: the pod's Job fails, no replacement comes."""
        if record.job is None or record.started is None:
            raise ValueError(f"{record.name} is not a started job's pod")
        idleness = self.idle.idleness.get(record.job.id)
        ran = self.now - record.started
        busy = idleness is None or not idleness.idle_through(max(0.0, ran - self.window), ran)
        self.reclaimed.append(Reclaimed(record, self.now, busy))
        self.evictions += 1


def figures(outcome: Outcome, cluster: ReclaimCluster) -> dict:
    """One replay's figures, as kept in reclaim.jsonl; GPU-hours within the observed window."""
    horizon = outcome.horizon
    held = idle_held = 0.0
    for record in outcome.records:
        if record.started is None or record.started >= horizon:
            continue
        until = min(record.ended if record.ended is not None else horizon, horizon)
        held += record.task.gpus * (until - record.started)
        idleness = cluster.idle.idleness.get(record.job.id) if record.job else None
        if idleness:
            idle_held += record.task.gpus * idleness.idle_hours(until - record.started)
    handed_back = stalled_work = 0.0
    stalled = 0
    for evicted in cluster.reclaimed:
        record, job = evicted.record, evicted.record.job
        if job is None or record.started is None:
            raise ValueError(f"{record.name} is not a started job's pod")
        handed_back += record.task.gpus * (min(record.started + job.duration, horizon)
                                           - evicted.at)
        idleness = cluster.idle.idleness[job.id]
        if idleness.resumes:
            stalled += 1
            stalled_work += record.task.gpus * (job.duration - (idleness.end - idleness.start))
    waits = outcome.waits()
    row = {"held_gpu_hours": held, "idle_gpu_hours": idle_held,
           "used_gpu_hours": held - idle_held, "idle_share": idle_held / held if held else 0.0,
           "handed_back_gpu_hours": handed_back,
           "wait_mean": sum(waits) / len(waits) if waits else None,
           "wait_p50": binpack.percentile(waits, 0.5),
           "wait_p95": binpack.percentile(waits, 0.95),
           "reported": cluster.outcomes.get("report", 0),
           "evicted": len(cluster.reclaimed),
           "evicted_busy": sum(1 for e in cluster.reclaimed if e.busy),
           "evicted_stalled": stalled,
           "stalled_work_lost_gpu_hours": stalled_work,
           "runs": cluster.runs,
           "run_seconds_mean": cluster.run_seconds / cluster.runs if cluster.runs else None,
           "idle_jobs": len(cluster.idle.idleness),
           **outcome.scheduler_metrics}
    for gpus in (1, 8):
        row[f"wait_p95_{gpus}"] = outcome.wait(gpus, 0.95)
    return row


def replay(config: dict, idle: IdleTrace, nodes: dict[str, NodeShape],
           settings: StackSettings, mode: Mode,
           progress=lambda done, total: None) -> tuple[Outcome, ReclaimCluster]:
    """The idle trace against the shipped profile with `mode`'s reclaim, on a fresh control
    plane."""
    outcome, cluster = on_control_plane(
        mode.label, idle.trace, nodes,
        lambda cp: ReclaimCluster(cp, config, nodes, idle, settings, mode), progress)
    if not isinstance(cluster, ReclaimCluster):
        raise TypeError("the replay's cluster is not the reclaim cluster")
    return outcome, cluster


def measure(out: Path, settings: StackSettings, mixes: list[str], sizes: list[int],
            seeds: list[int], jobs_per_gpu: float, load: float, inference_share: float,
            progress=lambda label: lambda done, total: None) -> None:
    """For each mix, cluster size and seed: the idle trace replayed with each of MODES, the
    figures appended to reclaim.jsonl as each replay ends (one kept there already is
    skipped)."""
    config = profiles(settings)[settings.scheduler.name]
    for case in workload.cases(mixes, sizes, seeds):
        trace = workload.generate(case.mix, case.seed, int(jobs_per_gpu * case.gpus), case.gpus,
                                  load, inference_share, fits=workload.fits_on(case.biggest))
        idle = with_idleness(trace, case.seed)
        key = case.key | {"jobs": len(trace.jobs), "load": load,
                          "inference_share": inference_share,
                          "hung": [HUNG_SHARE, HUNG_MEDIAN_HOURS],
                          "stalled": [STALLED_SHARE, STALLED_MEDIAN_HOURS], "sigma": IDLE_SIGMA}
        done = {r["mode"] for r in report.kept(out, report.RECLAIM_RESULTS)
                if all(r.get(k) == v for k, v in key.items())}
        print(f"reclaim: {case.describe()}: {len(trace.jobs)} jobs, {len(idle.idleness)} of "
              f"them idle for a while, {trace.horizon:.0f} simulated hours", file=sys.stderr,
              flush=True)
        for mode in MODES:
            if mode.label in done:
                continue
            stack = reclaim_settings(settings, mode) if mode.changes is not None else settings
            started = time.monotonic()
            outcome, cluster = replay(config, idle, case.nodes, stack, mode, progress(mode.label))
            row = key | {"mode": mode.label} | figures(outcome, cluster)
            print(f"  {mode.label}: {time.monotonic() - started:.0f}s, "
                  f"{row['evicted']} evicted ({row['evicted_busy']} busy), "
                  f"{row['handed_back_gpu_hours']:.0f} GPU-hours handed back",
                  file=sys.stderr, flush=True)
            with open(out / report.RECLAIM_RESULTS, "a") as kept:
                kept.write(json.dumps(row) + "\n")
