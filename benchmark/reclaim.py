"""The binpack benchmark with idle GPUs (`bash tests/run benchmark --reclaim`): the replay's trace
with a share of batch jobs whose pods hold their GPUs idle for hours (hung after their work,
stalled within it) and a share of notebooks (short bursts of work between long idle stretches,
then left open), spread over two teams' namespaces, each with its own reclaim policy. Each mode
replays the same trace: reclaim off, one team evicting while the other only reports, both
evicting. Each replay's figures are kept in results/reclaim.jsonl, and `page` renders
docs/benchmarks/reclaim.md from them.

What is real: the reclaim run is the CronJob's own script (`run` in
components/gpu_reclaim/actor/gpu_reclaim.py: its per-namespace policies, reports with their
deadline, keep-alives, events and evictions through the eviction API) with the declared
ServiceAccount's token and Roles, against the real API server; the Job controller decides what
an evicted pod's Job does. What stands in: the idle set Prometheus would answer is computed from
the trace's activity, by the query's definition (a pod that held its GPUs for the whole window
and was active at no time within it); the query itself is tested on exporter-shaped series in
promtool and in the real Prometheus. Notebook owners who answer a warning annotate their pod
with the keep-alive annotation, as the warning tells them to. The run's clock is the replay's
simulated time: a pod's start time is written at its simulated start, and each run is given the
simulated time as its `now`.
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
from benchmark.binpack import NodeShape, Outcome, PodRecord, Trace
from benchmark.real_cluster import RealCluster, on_control_plane
from benchmark.replay_setup import profiles
from benchmark.workload import BatchJob
from components import gpu_reclaim
from components.base.kube_api import parse_time
from components.gpu_reclaim.actor import gpu_reclaim as actor
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster import nodes_and_pods
from tests.kit.cluster.controlplane import ControlPlane

# Which batch jobs hold GPUs idle and for how long, drawn per job, whatever its size. Hung: done
# with its work (or waiting on a dead peer), it holds its GPUs until its owner notices. Stalled:
# it stops working mid-run (data loading, a peer restarting) and then works again, so that
# evicting it in the stall loses the job. A notebook: its work comes in NOTEBOOK_BURSTS bursts,
# the gaps between them idle (lunch, meetings: some shorter than any reclaim window), then it is
# left open (overnight, a weekend) until its owner closes it. Idle hours are log-normal. The
# shares put about a fifth of the GPU-time held idle, as a 2026 study of production clusters
# measured of in-execution GPU time, though here in idle spells of an hour or more mostly.
HUNG_SHARE = 0.15
HUNG_MEDIAN_HOURS = 8.0
STALLED_SHARE = 0.10
STALLED_MEDIAN_HOURS = 2.0
IDLE_SIGMA = 0.5
NOTEBOOK_SHARE = 0.10
NOTEBOOK_BURSTS = 3
NOTEBOOK_GAP_MEDIAN_HOURS = 2.0
NOTEBOOK_GAP_SIGMA = 0.75
NOTEBOOK_LEFT_OPEN_MEDIAN_HOURS = 10.0
# A notebook's owner who will be back answers a warning with the keep-alive annotation with these
# odds, within the first half of the grace period; batch jobs' owners do not answer.
KEEP_ALIVE_ODDS = 0.5
# The two teams' namespaces the batch jobs are spread over (inference stays in NAMESPACE).
TEAMS = ("research", "vision")
# The simulated clock's origin, as the reclaim run reads times (pods' start times, its reports).
EPOCH = 1_767_225_600.0    # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class Idleness:
    """When a job's pod holds its GPUs idle: its idle `spells`, each (start, end) in hours after
    the pod started, in order, within its `duration`. `kind`: hung, stalled or notebook;
    `answers`: for a notebook whose owner answers warnings, when (a share of the grace period
    after the warning)."""
    kind: str
    spells: tuple[tuple[float, float], ...]
    duration: float
    answers: float | None = None

    def idle_through(self, since: float, until: float) -> bool:
        """Active at no time from `since` to `until` (hours after the pod started)."""
        return any(start <= since and until <= end for start, end in self.spells)

    def idle_hours(self, since: float, until: float) -> float:
        """Hours idle from `since` to `until` (hours after the pod started)."""
        return sum(max(0.0, min(until, end) - max(since, start)) for start, end in self.spells)

    def work_after(self, at: float) -> float:
        """Hours of work the pod would still do after `at`."""
        return max(0.0, self.duration - at) - self.idle_hours(at, self.duration)


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0, sigma))


def idleness_of(job: BatchJob, rng: random.Random) -> Idleness | None:
    """The job's idleness, drawn (None: it works throughout); its `duration` includes it."""
    draw = rng.random()
    work = job.duration
    if draw < HUNG_SHARE:
        idle = lognormal(rng, HUNG_MEDIAN_HOURS, IDLE_SIGMA)
        return Idleness("hung", ((work, work + idle),), work + idle)
    if draw < HUNG_SHARE + STALLED_SHARE:
        idle = lognormal(rng, STALLED_MEDIAN_HOURS, IDLE_SIGMA)
        start = work * rng.uniform(0.2, 0.8)
        return Idleness("stalled", ((start, start + idle),), work + idle)
    if draw < HUNG_SHARE + STALLED_SHARE + NOTEBOOK_SHARE:
        spells, at = [], 0.0
        for burst in range(NOTEBOOK_BURSTS):
            at += work / NOTEBOOK_BURSTS
            idle = (lognormal(rng, NOTEBOOK_GAP_MEDIAN_HOURS, NOTEBOOK_GAP_SIGMA)
                    if burst < NOTEBOOK_BURSTS - 1 else
                    lognormal(rng, NOTEBOOK_LEFT_OPEN_MEDIAN_HOURS, IDLE_SIGMA))
            spells.append((at, at + idle))
            at += idle
        answers = rng.uniform(0, 0.5) if rng.random() < KEEP_ALIVE_ODDS else None
        return Idleness("notebook", tuple(spells), at, answers)
    return None


@dataclass(frozen=True)
class IdleTrace:
    """A trace whose jobs' durations include their idle hours, each idle job's idleness, and
    each job's team."""
    trace: Trace
    idleness: dict[int, Idleness]
    team: dict[int, str]


def with_idleness(trace: Trace, seed: int) -> IdleTrace:
    """`trace` with its batch jobs hung, stalled or notebooks with the shares above, each in one
    of TEAMS; drawn from streams of their own, so that the jobs, arrivals and work are the
    seed's trace as every other replay plays it."""
    rng, teams = random.Random(f"idle-{seed}"), random.Random(f"teams-{seed}")
    jobs, idleness, team = [], {}, {}
    for job in trace.jobs:
        team[job.id] = teams.choice(TEAMS)
        idle = idleness_of(job, rng)
        if idle is not None:
            idleness[job.id] = idle
            job = dataclasses.replace(job, duration=idle.duration)
        jobs.append(job)
    return IdleTrace(dataclasses.replace(trace, jobs=jobs), idleness, team)


@dataclass(frozen=True)
class Mode:
    """A replay's reclaim: off (None), or on for both teams' namespaces with `settings` (the
    stack-wide action is `report`) and a policy `action: evict` for the teams in `evicting`."""
    label: str
    settings: dict | None
    evicting: tuple[str, ...] = ()


MODES = (Mode("off", None),
         Mode("research evicts, idleFor 2h, gracePeriod 4h",
              {"idleFor": "2h", "gracePeriod": "4h"}, ("research",)),
         Mode("research evicts, idleFor 2h, gracePeriod 2h",
              {"idleFor": "2h", "gracePeriod": "2h"}, ("research",)),
         Mode("research evicts, idleFor 1h, gracePeriod 2h",
              {"idleFor": "1h", "gracePeriod": "2h"}, ("research",)),
         Mode("both evict, idleFor 1h, gracePeriod 2h",
              {"idleFor": "1h", "gracePeriod": "2h"}, TEAMS))


def reclaim_settings(settings: StackSettings, mode: Mode) -> StackSettings:
    """The stack with reclaim on for the teams' namespaces, as `mode` sets it, validated as a
    stack file's section would be."""
    section = settings.reclaim.model_dump(by_alias=True) | {
        "enabled": True, "action": "report", "namespaces": list(TEAMS), "teams": [],
        "policies": [{"namespaces": [team], "action": "evict"} for team in mode.evicting],
        **(mode.settings or {})}
    return settings.model_copy(update={
        "reclaim": type(settings.reclaim).model_validate(section)})


def shipped(settings: StackSettings, mode: Mode) -> bool:
    """Whether the mode's settings are the stack's defaults."""
    defaults = type(settings.reclaim)().model_dump(by_alias=True)
    return mode.settings is not None and all(
        defaults[key] == value for key, value in mode.settings.items())


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
    warned: bool        # its deadline was written by an earlier run, and had passed


class ReclaimCluster(RealCluster):
    """The real cluster with the reclaim run every schedule tick (none when off). An evicted
    pod's Job is not retried (backoffLimit 0, no pod failure policy that ignores evictions):
    the job ends there, as a Job whose pod failure policy says nothing of evictions does, and a
    notebook's server is gone."""

    WATCHED_NAMESPACE = None

    def __init__(self, cp: ControlPlane, config: dict, nodes: dict[str, NodeShape],
                 idle: IdleTrace, settings: StackSettings, mode: Mode):
        super().__init__(cp, config, nodes, idle.trace, settings)
        self.idle = idle
        self.reclaimed: list[Reclaimed] = []
        self.outcomes: Counter = Counter()
        self.runs, self.run_seconds = 0, 0.0
        self.actor_config: actor.Config | None = None
        self.window = settings.reclaim.idle_for_seconds / 3600
        self.deadlines: dict[tuple[str, str], float] = {}   # as each run found them
        self.answered: set[tuple[str, str, str]] = set()     # (namespace, pod, report answered)
        for team in TEAMS:
            nodes_and_pods.ensure_namespace(self.kube, team)
        if mode.settings is not None:
            inputs = component_inputs(settings).reclaim
            self.actor_config = gpu_reclaim.actor_config(inputs)
            self.periodic_interval = run_every_hours(settings.reclaim.schedule)
            self.grace = {team: settings.reclaim.policy_of(team, None).grace_period_seconds
                          for team in TEAMS}
            for obj in gpu_reclaim.reclaim_objects(inputs):
                # Its rights, not its CronJob: the replay runs the script on its own clock.
                if obj["kind"] in ("Namespace", "ServiceAccount", "Role", "RoleBinding"):
                    self.kube.create(obj)
            reclaim = settings.reclaim
            token = cp.service_account_token(reclaim.namespace, reclaim.name)
            self.api = actor.Api(cp.server, token,
                                 ssl.create_default_context(cafile=str(cp.ca_file)))

    def job_namespace(self, job: BatchJob) -> str:
        return self.idle.team[job.id]

    def running_status(self) -> dict:
        status = super().running_status()
        status["startTime"] = actor.format_time(EPOCH + self.now * 3600)
        return status

    def periodic(self, now: float) -> None:
        """One reclaim run at simulated hour `now`, after the owners who answer warnings have;
        its log is kept to the counts."""
        if self.actor_config is None:
            raise RuntimeError("a reclaim run in a replay without reclaim")
        self.now = now
        self._answer_warnings(now)
        started = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):
            counts = actor.run(self.api, self.actor_config,
                               idle_set(self.records, self.idle.idleness, self.window, now),
                               EPOCH + now * 3600)
        self.run_seconds += time.monotonic() - started
        self.runs += 1
        self.outcomes.update(counts)

    def _answer_warnings(self, now: float) -> None:
        """Notes each pod's deadline as the run finds it, and, for a notebook whose owner answers
        warnings and will be back, sets the keep-alive annotation once its answer is due."""
        config = self.actor_config
        if config is None:
            raise RuntimeError("warnings in a replay without reclaim")
        for team in TEAMS:
            for pod in self.kube.list("v1", "Pod", team):
                meta = pod["metadata"]
                annotations = meta.get("annotations") or {}
                deadline = parse_time(annotations.get(config["deadlineAnnotation"], ""))
                reported = annotations.get(config["reportedAnnotation"])
                if deadline is None or reported is None:
                    continue
                self.deadlines[(team, meta["name"])] = deadline
                record = self.by_name.get(meta["name"])
                if record is None or record.job is None or record.started is None:
                    continue
                idleness = self.idle.idleness.get(record.job.id)
                answer = (team, meta["name"], reported)
                if (idleness is None or idleness.answers is None or answer in self.answered
                        or idleness.work_after(now - record.started) <= 0):
                    continue
                reported_at = parse_time(reported)
                if reported_at is not None and \
                        EPOCH + now * 3600 >= reported_at + idleness.answers * self.grace[team]:
                    self.answered.add(answer)
                    self.kube.merge_patch("v1", "Pod", meta["name"], {"metadata": {
                        "annotations": {config["keepAliveAnnotation"]: "true"}}}, team,
                        what=f"keep {meta['name']} alive")

    def _evicted(self, record: PodRecord) -> None:
        """Only the reclaim run evicts here: the pod's Job fails, no replacement comes."""
        if record.job is None or record.started is None:
            raise ValueError(f"{record.name} is not a started job's pod")
        idleness = self.idle.idleness.get(record.job.id)
        ran = self.now - record.started
        busy = idleness is None or not idleness.idle_through(max(0.0, ran - self.window), ran)
        deadline = self.deadlines.get((record.namespace, record.name))
        warned = deadline is not None and deadline <= EPOCH + self.now * 3600
        self.reclaimed.append(Reclaimed(record, self.now, busy, warned))
        self.evictions += 1


def team_figures(outcome: Outcome, idle: IdleTrace, reclaimed: list[Reclaimed],
                 answered: set[tuple[str, str, str]], team: str) -> dict:
    """One team's figures in a replay, GPU-hours within the observed window: held, held idle,
    and what the evictions (`reclaimed`) handed back (the idle hours each evicted pod would
    still have held) and cost; `answered`: the warnings owners answered with a keep-alive."""
    horizon = outcome.horizon
    held = idle_held = 0.0
    for record in outcome.records:
        if record.namespace != team or record.started is None or record.started >= horizon:
            continue
        until = min(record.ended if record.ended is not None else horizon, horizon)
        held += record.task.gpus * (until - record.started)
        idleness = idle.idleness.get(record.job.id) if record.job else None
        if idleness:
            idle_held += record.task.gpus * idleness.idle_hours(0.0, until - record.started)
    handed_back = stalled_work = notebook_work = 0.0
    kinds: Counter = Counter()
    evicted = [e for e in reclaimed if e.record.namespace == team]
    for e in evicted:
        record, job = e.record, e.record.job
        if job is None or record.started is None:
            raise ValueError(f"{record.name} is not a started job's pod")
        idleness = idle.idleness[job.id]
        ran, gpus = e.at - record.started, record.task.gpus
        handed_back += gpus * idleness.idle_hours(ran, min(job.duration, horizon - record.started))
        if idleness.kind == "stalled":       # no retry: its work so far is lost with the rest
            kinds["stalled"] += 1
            stalled_work += gpus * idleness.work_after(0.0)
        elif idleness.kind == "notebook" and idleness.work_after(ran) > 0:
            kinds["notebook cut short"] += 1
            notebook_work += gpus * idleness.work_after(ran)
    return {"held_gpu_hours": held, "idle_gpu_hours": idle_held,
            "handed_back_gpu_hours": handed_back,
            "handed_back_share": (handed_back / (handed_back + idle_held)
                                  if handed_back + idle_held else 0.0),
            "evicted": len(evicted), "evicted_busy": sum(e.busy for e in evicted),
            "evicted_warned": sum(e.warned for e in evicted),
            "evicted_stalled": kinds["stalled"], "stalled_work_lost_gpu_hours": stalled_work,
            "notebooks_cut_short": kinds["notebook cut short"],
            "notebook_work_lost_gpu_hours": notebook_work,
            "keep_alives_sent": sum(1 for answer in answered if answer[0] == team)}


def figures(outcome: Outcome, cluster: ReclaimCluster) -> dict:
    """One replay's figures, as kept in reclaim.jsonl: the cluster's, and each team's."""
    teams = {team: team_figures(outcome, cluster.idle, cluster.reclaimed, cluster.answered, team)
             for team in TEAMS}
    held = sum(t["held_gpu_hours"] for t in teams.values())
    idle = sum(t["idle_gpu_hours"] for t in teams.values())
    waits = outcome.waits()
    row = {"held_gpu_hours": held, "idle_gpu_hours": idle, "used_gpu_hours": held - idle,
           "idle_share": idle / held if held else 0.0,
           "wait_mean": sum(waits) / len(waits) if waits else None,
           "wait_p95": binpack.percentile(waits, 0.95),
           "reported": cluster.outcomes.get("report", 0),
           "kept_alive": cluster.outcomes.get("keep-alive", 0),
           "runs": cluster.runs,
           "run_seconds_mean": cluster.run_seconds / cluster.runs if cluster.runs else None,
           "idle_jobs": Counter(i.kind for i in cluster.idle.idleness.values()),
           "teams": teams, **outcome.scheduler_metrics}
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
                          "stalled": [STALLED_SHARE, STALLED_MEDIAN_HOURS], "sigma": IDLE_SIGMA,
                          "notebooks": [NOTEBOOK_SHARE, NOTEBOOK_BURSTS,
                                        NOTEBOOK_GAP_MEDIAN_HOURS,
                                        NOTEBOOK_LEFT_OPEN_MEDIAN_HOURS, KEEP_ALIVE_ODDS]}
        done = {r["mode"] for r in report.kept(out, report.RECLAIM_RESULTS)
                if all(r.get(k) == v for k, v in key.items())}
        print(f"reclaim: {case.describe()}: {len(trace.jobs)} jobs, {len(idle.idleness)} of "
              f"them idle for a while, {trace.horizon:.0f} simulated hours", file=sys.stderr,
              flush=True)
        for mode in MODES:
            if mode.label in done:
                continue
            stack = reclaim_settings(settings, mode) if mode.settings is not None else settings
            started = time.monotonic()
            outcome, cluster = replay(config, idle, case.nodes, stack, mode, progress(mode.label))
            row = key | {"mode": mode.label, "evicting": list(mode.evicting),
                         "shipped": shipped(settings, mode)} | figures(outcome, cluster)
            evicting = [row["teams"][team] for team in mode.evicting]
            print(f"  {mode.label}: {time.monotonic() - started:.0f}s, "
                  + "; ".join(f"{team} {t['evicted']} evicted ({t['evicted_busy']} busy, "
                              f"{t['evicted_warned']} warned), {t['handed_back_gpu_hours']:.0f} "
                              f"of {t['handed_back_gpu_hours'] + t['idle_gpu_hours']:.0f} idle "
                              f"GPU-hours handed back"
                              for team, t in zip(mode.evicting, evicting, strict=True)),
                  file=sys.stderr, flush=True)
            with open(out / report.RECLAIM_RESULTS, "a") as kept:
                kept.write(json.dumps(row) + "\n")

