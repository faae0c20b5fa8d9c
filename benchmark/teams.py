"""The binpack benchmark with teams (`bash tests/run benchmark --teams`): the replay's load split
over three teams whose demand comes in bursts, played with the real Kueue in the loop, running the
Configuration, flavor and queues the platform declares for those teams; the same trace without
teams and the repacking reference give the comparison. Each replay's figures are kept in
results/teams.jsonl, and report.teams_page renders the table from it.

How the replay knows that Kueue has done what it will do at a simulated time: besides what the
replay without teams waits for, every Job and every gated pod has its Workload, the Workload of
what ended is finished, every admitted Workload has its pod let through, and no pending Workload
fits its team's unused nominal quota (which Kueue gets back by reclaiming) or the cohort's
unused GPUs (which it may borrow). That is the quota arithmetic of Kueue's admission with the
queues the platform declares (no borrowing or lending limits), as the scheduler's resource filter
is the arithmetic the replay without teams waits on."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from benchmark import binpack, real_cluster, replay_setup, report, workload
from benchmark.binpack import BatchJob, NodeShape, PodRecord, Trace
from benchmark.real_cluster import RealCluster
from benchmark.replay_setup import DEVICE_PLUGIN, Reservation, ReservationPlay
from components import teams
from components.base.facts import GPU_RESOURCE
from components.platform.settings import StackSettings
from components.teams.settings import DEFAULT_QUEUEING_STRATEGY
from tests.kit import harness
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, TestCertificates, declared
from tests.kit.cluster.kueue import API_VERSION, Kueue

# The teams, and the share of the load (and of the GPUs, as nominal quota) each has.
SHARES = {"research": 0.5, "vision": 0.3, "speech": 0.2}
# Bursts: each team's arrivals come at BUSY times its mean rate in a busy phase and at
# 2 - BUSY times in a quiet one; each phase of PHASE_HOURS is busy with even odds, per team.
BUSY = 1.6
PHASE_HOURS = 3.0
# Inference services: enough for each team's part of the inference load to be its share.
SERVICES = 10
# Kueue's waitForPodsReady timeout is wall-clock time, which does not map onto simulated time
# (it stands still while the replay settles); every job here is one pod, ready once bound, so
# no job can hold GPUs partly, and the timeout is set beyond any replay.
REPLAY_PODS_READY_TIMEOUT = "24h"
# Webhooks are called at their Services' ready endpoints, as in the integration suite.
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
FLAVOR = "gpu"


@dataclass(frozen=True)
class TeamTrace:
    """A trace whose jobs and inference services each belong to a team, with each team's
    nominal quota of GPUs and the phases in which its demand is busy."""
    trace: Trace
    job_team: dict[int, str]
    service_team: dict[int, str]
    quotas: dict[str, int]
    busy: dict[str, list[bool]]

    def busy_at(self, team: str, hour: float) -> bool:
        phases = self.busy[team]
        return phases[min(int(hour // PHASE_HOURS), len(phases) - 1)]


def nominal_quotas(total_gpus: int, shares: dict[str, float] = SHARES) -> dict[str, int]:
    """Each team's share of `total_gpus`, rounded so that the quotas add up to all of them
    (largest remainders first)."""
    exact = {team: share * total_gpus for team, share in shares.items()}
    quotas = {team: math.floor(value) for team, value in exact.items()}
    for team in sorted(exact, key=lambda t: quotas[t] - exact[t])[:total_gpus - sum(
            quotas.values())]:
        quotas[team] += 1
    return quotas


def apportion(items: Iterable, size, shares: dict[str, float]) -> dict:
    """Each item, in order, to the team furthest below its share of what has been given out so
    far (counting the item), so that each team's part is its share however few and uneven the
    items are."""
    given = dict.fromkeys(shares, 0.0)
    teams_of = {}
    for item in items:
        amount = size(item)
        total = sum(given.values()) + amount
        team = max(shares, key=lambda t: (shares[t] * total - given[t], shares[t]))
        given[team] += amount
        teams_of[item] = team
    return teams_of


def phase_schedule(names: list[str], phases: int, rng: random.Random) -> dict[str, list[bool]]:
    """Which phases each team is busy in: every busy/quiet combination of the teams once in
    each run of 2^teams phases, in a seeded order, so that each team is busy half the time, and
    alone, with some of the others and with all of them."""
    combinations = list(itertools.product((True, False), repeat=len(names)))
    order: list[tuple[bool, ...]] = []
    while len(order) < phases:
        block = combinations[:]
        rng.shuffle(block)
        order += block
    return {team: [c[i] for c in order[:phases]] for i, team in enumerate(names)}


def generate(mix: str, seed: int, jobs: int, total_gpus: int, load: float,
             inference_share: float, fits=lambda task: True,
             shares: dict[str, float] = SHARES) -> TeamTrace:
    """workload.generate's trace (with SERVICES inference services), its batch GPU-time and its
    services split over the teams by their shares, and each team's jobs given arrival times of
    its own bursty process over the same horizon (the times of a Poisson process whose rate is
    BUSY or 2 - BUSY times the mean by phase, given how many arrive): the load is the same on
    average, but now one team, now several and now all of them ask for more than their
    share."""
    base = workload.generate(mix, seed, jobs, total_gpus, load, inference_share,
                             services=SERVICES, fits=fits)
    rng = random.Random(f"teams {seed}")
    names = list(shares)
    phases = max(1, math.ceil(base.horizon / PHASE_HOURS))
    busy = phase_schedule(names, phases, rng)
    job_team = {job.id: team for job, team in apportion(
        base.jobs, lambda job: job.gpu_hours, shares).items()}
    service_team = {service.id: team for service, team in apportion(
        base.services, lambda service: 1, shares).items()}
    retimed: list[BatchJob] = []
    for team in names:
        mine = [job for job in base.jobs if job_team[job.id] == team]
        times = []
        while len(times) < len(mine):
            when = rng.uniform(0, base.horizon)
            rate = BUSY if busy[team][min(int(when // PHASE_HOURS), phases - 1)] else 2 - BUSY
            if rng.random() < rate / BUSY:
                times.append(when)
        retimed += [BatchJob(job.id, job.task, when, job.duration)
                    for job, when in zip(mine, sorted(times), strict=True)]
    retimed.sort(key=lambda job: (job.arrival, job.id))
    trace = Trace(retimed, base.services, base.scales, base.horizon)
    return TeamTrace(trace, job_team, service_team, nominal_quotas(total_gpus, shares), busy)


def stack_config(trace: TeamTrace, nodes: dict[str, NodeShape],
                 queueing: str = DEFAULT_QUEUEING_STRATEGY) -> dict[str, str]:
    """The config of the example stack with the replay's GPU nodes and the trace's teams: a
    namespace and a quota of whole GPUs each, equal fair-sharing weights (the quotas carry the
    shares), in one cohort with no borrowing or lending limits, every queue with the
    `queueing` strategy."""
    config = harness.example_config()
    gpu_nodes = json.loads(config["gpu-platform:gpuNodes"])
    gpu_nodes.update(names=sorted(nodes), gpusPerNode=max(s.gpus for s in nodes.values()))
    section = json.loads(config["gpu-platform:teams"])
    section.update(enabled=True, waitForPodsReady=REPLAY_PODS_READY_TIMEOUT,
                   flavors=[{"name": FLAVOR, "nodeLabels": {}}],
                   teams=[{"name": team, "namespaces": [team],
                           "quota": {FLAVOR: {GPU_RESOURCE: quota}},
                           "queueingStrategy": queueing}
                          for team, quota in trace.quotas.items()])
    return config | harness.stack_file_config({"gpuNodes": gpu_nodes, "teams": section})


# What the replay applies of what the program declares, in an order that applies: the team
# namespaces (those with the team label), then Kueue's objects.
QUEUE_KINDS = ("Namespace", "ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue",
               "LocalQueue")


def declared_queues(stack: dict[str, str], settings: StackSettings) -> list[dict]:
    """The team namespaces and Kueue's objects the program declares for `stack`, run under the
    mocks as the integration suite runs it."""
    objects = declared(harness.run_program(stack), TestCertificates(
        harness.inputs_of(settings).admission)).objects
    wanted = [o for o in objects if o["kind"] in QUEUE_KINDS[1:]
              or (o["kind"] == "Namespace" and teams.TEAM_LABEL in o["metadata"].get("labels", {}))]
    return sorted(wanted, key=lambda o: QUEUE_KINDS.index(o["kind"]))


def true_condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in obj.get("status", {}).get("conditions", [])
                 if c["type"] == kind and c["status"] == "True"), None)


def condition(obj: dict, kind: str) -> bool:
    return true_condition(obj, kind) is not None


def requeued(workload: dict) -> bool:
    """Whether Kueue has the pending Workload in its queue: not when it evicted it and has not
    queued it again (Requeued False). Kueue v0.19.2 left a serving pod's Workload so after it
    preempted it before letting its pod through, and the pod stayed gated (seen for over ten
    minutes, with a team's quota free for it)."""
    return not any(c["type"] == "Requeued" and c["status"] == "False"
                   for c in workload.get("status", {}).get("conditions", []))


@dataclass
class TeamSample:
    time: float
    running: dict[str, int]      # GPUs of each team's bound pods
    demand: dict[str, int]       # GPUs each team asks for: running, admitted and queued


class TeamsCluster(RealCluster):
    """The replay's cluster with Kueue admitting each team's Jobs and serving pods against the
    queues the platform declares (see the module's docstring for what settling waits for)."""

    WATCHED_NAMESPACE = None
    # What Kueue does next shows in Workloads, which the pod watch does not see: look often.
    SETTLE_POLL = 0.1
    # Longer than Kueue takes to decide on the workloads a change made admissible again.
    QUIET_SECONDS = 0.3

    def __init__(self, cp: ControlPlane, config: dict, nodes: dict[str, NodeShape],
                 trace: TeamTrace, settings: StackSettings, queues: list[dict],
                 reservation: Reservation | None = None):
        self.team_trace = trace
        # StrictFIFO: a queue admits only its head (see queue_order).
        self.strict = all(t.queueing_strategy == "StrictFIFO" for t in settings.teams.teams)
        self.kueue = Kueue(cp, teams.kueue_configuration(harness.inputs_of(settings).teams)
                           ).start()
        try:
            self._apply_queues(cp, queues)
            self.open_jobs: dict[str, BatchJob] = {}    # submitted, not finished, by Job name
            self.pod_of_job: dict[str, PodRecord] = {}   # each Job's latest pod
            self.gated: set[str] = set()                 # pods Kueue holds back
            self.asked_within: dict[str, bool] = {}      # by Job name (see within_quota)
            self.lost_by_team: Counter = Counter()
            self.team_samples: list[TeamSample] = []
            self.preemptions: dict[tuple[str, str], tuple[str, str]] = {}
            self.never_requeued: set[tuple[str, str]] = set()   # (team, Workload uid)
            self.workloads_seen: frozenset = frozenset()
            self.workloads_seen_at = 0.0
            super().__init__(cp, config, nodes, trace.trace, settings,
                             reservation=reservation)
        except BaseException:
            self.kueue.stop()
            raise

    def _apply_queues(self, cp: ControlPlane, queues: list[dict]) -> None:
        kube = cp.admin
        for obj in queues:
            kube.apply(obj, TEST_MANAGER)
        for queue in (o for o in queues if o["kind"] == "ClusterQueue"):
            name = queue["metadata"]["name"]
            wait_until(lambda name=name: condition(
                kube.get(API_VERSION, "ClusterQueue", name), "Active"),
                f"ClusterQueue {name} to be active")

    # where the trace's workloads go: each team's namespace is named after it

    def job_namespace(self, job: BatchJob) -> str:
        return self.team_trace.job_team[job.id]

    def service_namespace(self, service: int) -> str:
        return self.team_trace.service_team[service]

    def demand(self, team: str) -> int:
        """GPUs the team asks for now: its unfinished Jobs' and its serving pods'."""
        return (sum(j.task.gpus for name, j in self.open_jobs.items()
                    if self.team_trace.job_team[j.id] == team)
                + sum(self.services[s].task.gpus * live for s, live in self.live.items()
                      if self.team_trace.service_team[s] == team))

    # trace events

    def submit(self, job: BatchJob, now: float) -> None:
        team, name = self.team_trace.job_team[job.id], f"job-{job.id}"
        self.asked_within[name] = self.demand(team) + job.task.gpus <= self.team_trace.quotas[team]
        super().submit(job, now)
        self.open_jobs[name] = job
        self.expected_jobs.discard(job.id)   # a queued Job has no pod until Kueue admits it

    def finish(self, record: PodRecord, now: float) -> None:
        if record.job is not None:
            self.open_jobs.pop(f"job-{record.job.id}", None)
        super().finish(record, now)

    # what the watch says

    def _on_event(self, kind: str, pod: dict, started: list[PodRecord]) -> None:
        name = pod["metadata"]["name"]
        record = self.by_name.get(name)
        if record is not None and name in self.gated and not pod["spec"].get("schedulingGates"):
            self.gated.discard(name)
            record.admitted = self.now
        super()._on_event(kind, pod, started)
        if record is not None and record.ended is not None:
            self.gated.discard(name)

    def _record_for(self, pod: dict) -> PodRecord:
        record = super()._record_for(pod)
        team = record.namespace
        if record.job is not None:
            job_name = f"job-{record.job.id}"
            self.pod_of_job[job_name] = record
            record.admitted = self.now           # a Job's pod exists once it is admitted
            record.within_quota = self.asked_within[job_name]
        else:
            record.within_quota = self.demand(team) <= self.team_trace.quotas[team]
            if pod["spec"].get("schedulingGates"):
                self.gated.add(record.name)
            else:
                record.admitted = self.now
        return record

    def _evicted(self, record: PodRecord) -> None:
        """Kueue preempted the job's Workload: the Job is suspended, and its replacement pod
        comes when Kueue admits it again."""
        lost = self.lost_gpu_hours
        super()._evicted(record)
        self.lost_by_team[record.namespace] += self.lost_gpu_hours - lost
        if record.job is not None:
            self.expected_jobs.discard(record.job.id)

    def placeable(self) -> Iterable[PodRecord]:
        return (r for r in self.waiting.values() if r.name not in self.gated)

    def _unsettled(self) -> str:
        return super()._unsettled() or self._queues_unsettled()

    def _queues_unsettled(self) -> str:
        quotas = self.team_trace.quotas
        usage: Counter = Counter()
        pending: list[Pending] = []
        with_workload: set[tuple[str, str]] = set()
        workloads = [w for team in quotas for w in self.kube.list(API_VERSION, "Workload", team)]
        for w in workloads:
            if condition(w, "Finished"):
                continue
            self._note_preemption(w)
            owner = w["metadata"]["ownerReferences"][0]
            kind, name, team = owner["kind"], owner["name"], w["metadata"]["namespace"]
            with_workload.add((kind, name))
            if kind == "Job":
                job = self.jobs_by_name[name]
                gpus, ended = job.task.gpus, name not in self.open_jobs
                pod = self.pod_of_job.get(name)
                let_through = pod is not None and pod.ended is None
            else:
                record = self.by_name.get(name)
                if record is None:
                    return f"pod {name} of a Workload not seen yet"
                gpus, ended = record.task.gpus, record.ended is not None
                let_through = name not in self.gated
            if ended:
                return f"the Workload of {kind} {name} not finished, though it ended"
            if condition(w, "QuotaReserved"):
                usage[team] += gpus
                if condition(w, "Evicted"):
                    return f"{kind} {name} being evicted"
                if not let_through:
                    return f"{kind} {name} admitted, its pod not let through yet"
            elif let_through:
                return f"{kind} {name} runs without its Workload admitted"
            elif requeued(w):
                pending.append((team, gpus, name, queue_order(w)))
            else:
                self.never_requeued.add((team, w["metadata"]["uid"]))
        missing = [n for n in self.open_jobs if ("Job", n) not in with_workload] + \
            [n for n in self.gated if ("Pod", n) not in with_workload]
        if missing:
            return f"{len(missing)} Jobs or gated pods without a Workload yet: {missing[:5]}"
        spare = sum(quotas.values()) - sum(usage.values())

        def fits(team: str, gpus: int) -> bool:
            return usage[team] + gpus <= quotas[team] or gpus <= spare
        admissible = [name for team, gpus, name, _ in
                      (strict_heads(pending, fits) if self.strict else pending)
                      if fits(team, gpus)]
        if admissible:
            return f"pending Workloads Kueue can admit: {admissible[:5]}"
        # Kueue may still preempt for fair sharing, which the quota arithmetic above does not
        # foresee: settled once its Workloads have not changed for QUIET_SECONDS.
        seen = frozenset((w["metadata"]["namespace"], w["metadata"]["name"],
                          w["metadata"]["resourceVersion"]) for w in workloads)
        if seen != self.workloads_seen:
            self.workloads_seen, self.workloads_seen_at = seen, time.monotonic()
        if time.monotonic() - self.workloads_seen_at < self.QUIET_SECONDS:
            return "Kueue changed Workloads a moment ago"
        return ""

    def _note_preemption(self, workload: dict) -> None:
        """Kueue preempted the Workload: once per eviction, by team and cause
        (InCohortReclamation: its lender took the GPUs back; InCohortFairSharing: a team with a
        smaller share beyond its quota took them)."""
        evicted, preempted = true_condition(workload, "Evicted"), \
            true_condition(workload, "Preempted")
        if evicted and preempted and evicted["reason"] == "Preempted":
            self.preemptions[(workload["metadata"]["uid"], evicted["lastTransitionTime"])] = \
                (workload["metadata"]["namespace"], preempted["reason"])

    def sample(self, now: float) -> binpack.Sample:
        running: Counter = Counter()
        for record in self.records:
            if record.running:
                running[record.namespace] += record.task.gpus
        demand = {team: self.demand(team) for team in self.team_trace.quotas}
        self.team_samples.append(TeamSample(now, {t: running[t] for t in demand}, demand))
        sample = super().sample(now)
        sample.waiting_gpus = sum(demand.values()) - sum(running.values())
        return sample

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.kueue.stop()


# A pending Workload: its team, GPUs, name and place in a StrictFIFO queue (queue_order).
Pending = tuple[str, int, str, "tuple[int, str] | None"]


def queue_order(workload: dict) -> tuple[int, str] | None:
    """Where a pending Workload stands in a StrictFIFO queue: highest priority first, then
    oldest (to the second). None for one evicted before, which Kueue may order by its eviction
    instead."""
    if any(c["type"] == "Evicted" for c in workload.get("status", {}).get("conditions", [])):
        return None
    return (-workload["spec"].get("priority", 0), workload["metadata"]["creationTimestamp"])


def strict_heads(pending: list[Pending], fits: Callable[[str, int], bool]) -> list[Pending]:
    """Of the pending Workloads (team, GPUs, name, queue_order), those a StrictFIFO queue will
    admit next, where the arithmetic can tell: each team's head, when the Workloads that stand
    first together all fit. Where it cannot tell (a team with one evicted before, or a head
    part of which fits), the replay settles on Kueue's quiet moment alone."""
    heads = []
    for team in {p[0] for p in pending}:
        mine = [p for p in pending if p[0] == team]
        orders = [p[3] for p in mine]
        if None in orders:
            continue
        first = [p for p in mine if p[3] == min(o for o in orders if o is not None)]
        if all(fits(p[0], p[1]) for p in first):
            heads += first
    return heads


def replay(config: dict, trace: TeamTrace, nodes: dict[str, NodeShape],
           progress=lambda done, total: None, queueing: str = DEFAULT_QUEUEING_STRATEGY,
           reservation: ReservationPlay | None = None
           ) -> tuple[binpack.Outcome, TeamsCluster]:
    stack = stack_config(trace, nodes, queueing)
    settings = harness.settings_of(stack)
    queues = declared_queues(stack, settings)
    played = reservation.on(settings, DEVICE_PLUGIN) if reservation else None
    outcome, backend = real_cluster.on_control_plane(
        "with teams (Kueue)", trace.trace, nodes,
        lambda cp: TeamsCluster(cp, config, nodes, trace, settings, queues, played), progress,
        APISERVER_ARGS)
    assert isinstance(backend, TeamsCluster)
    return outcome, backend


# --- the figures ----------------------------------------------------------------------------

def gpu_hours_between(records: Iterable[PodRecord], start: float, end: float,
                      admitted: bool = False) -> float:
    """GPU-hours the pods ran between `start` and `end` (`admitted`: held their team's quota,
    from their admission on, whether placed on a node yet or not)."""
    total = 0.0
    for r in records:
        since = r.admitted if admitted else r.started
        if since is not None:
            until = r.ended if r.ended is not None else end
            total += r.task.gpus * max(0.0, min(until, end) - max(since, start))
    return total


def share_gaps(records: list[PodRecord], hours: list[int], quota: int, total: int,
               admitted: bool = False) -> list[float]:
    """For each hour, how far the team's share of the GPUs was from its quota's share."""
    return [abs(gpu_hours_between(records, h, h + 1, admitted) - quota) / total for h in hours]


def contended_hours(trace: TeamTrace, samples: list[TeamSample]) -> list[int]:
    """The whole simulated hours in which, at every sample, every team asked for more GPUs than
    its nominal quota."""
    by_hour: dict[int, list[TeamSample]] = {}
    for s in samples:
        by_hour.setdefault(int(s.time), []).append(s)
    return [hour for hour, taken in sorted(by_hour.items())
            if hour + 1 <= trace.trace.horizon
            and all(s.demand[t] > q for s in taken for t, q in trace.quotas.items())]


def figures(trace: TeamTrace, outcome: binpack.Outcome, backend: TeamsCluster,
            without_teams: binpack.Outcome, reference: binpack.Outcome,
            whole_node_gpus: int) -> dict:
    """One replay's figures, as kept in teams.jsonl (waits in simulated minutes, but the
    whole-node jobs' p95 wait, in simulated hours as in runs.jsonl)."""
    horizon, total = outcome.horizon, outcome.total_gpus
    preempted = Counter(backend.preemptions.values())
    hours = contended_hours(trace, backend.team_samples)
    replays = {"with_teams": outcome, "without_teams": without_teams, "reference": reference}
    row: dict = {
        "delivered_vs_without_teams": outcome.delivered_gpu_hours()
        / without_teams.delivered_gpu_hours(),
        "delivered_vs_reference": outcome.delivered_gpu_hours() / reference.delivered_gpu_hours(),
        "without_teams_vs_reference": without_teams.delivered_gpu_hours()
        / reference.delivered_gpu_hours(),
        "started_on_arrival": {k: o.started_on_arrival() for k, o in replays.items()},
        "whole_node_gpus": whole_node_gpus,
        "whole_node_wait_p95": {k: o.wait(whole_node_gpus, 0.95) for k, o in replays.items()},
        "stranded": {k: o.mean_after_warmup("stranded") for k, o in replays.items()},
        "one_gpu_wait_p95": {k: o.wait(1, 0.95) for k, o in replays.items()},
        "contended_hours": len(hours), "teams": {}}
    if backend.reservation:     # what reservation did, with teams and without
        row["reserved"] = {k: replay_setup.reservation_figures(o) for k, o in
                           (("with_teams", outcome), ("without_teams", without_teams))}
    first_pods = [r for r in outcome.records if r.resumed_at is None]
    for team, quota in trace.quotas.items():
        mine = [r for r in first_pods if r.namespace == team]
        records = [r for r in outcome.records if r.namespace == team]
        waits = {within: [((r.admitted if r.admitted is not None else horizon) - r.created) * 60
                          for r in mine if r.within_quota is within]
                 for within in (True, False)}
        running_gaps = share_gaps(records, hours, quota, total)
        row["teams"][team] = {
            "quota": quota,
            "share": quota / total,
            "gpu_time_vs_entitlement": gpu_hours_between(records, 0, horizon)
            / (quota * horizon),
            "wait_within_p50": binpack.percentile(waits[True], 0.5),
            "wait_within_p95": binpack.percentile(waits[True], 0.95),
            "wait_beyond_p50": binpack.percentile(waits[False], 0.5),
            "wait_beyond_p95": binpack.percentile(waits[False], 0.95),
            "asked_within": len(waits[True]), "asked_beyond": len(waits[False]),
            "preempted_per_hour": {cause: n / horizon for (victim, cause), n in preempted.items()
                                   if victim == team},
            "lost_gpu_hours": backend.lost_by_team[team],
            "never_requeued": sum(1 for t, _ in backend.never_requeued if t == team),
            "worst_hourly_share_gap": max(running_gaps, default=None),
            "hours_within_5pp": sum(g <= 0.05 for g in running_gaps) / len(hours)
            if hours else None,
            "worst_hourly_quota_gap": max(share_gaps(records, hours, quota, total, True),
                                          default=None),
        }
    return row



# --- the measurement ------------------------------------------------------------------------

def measure(out: Path, settings: StackSettings, mixes: list[str], sizes: list[int],
            seeds: list[int], jobs_per_gpu: float, load: float, inference_share: float,
            progress=lambda label: lambda done, total: None, contended: int | None = None,
            only: list[int] | None = None, queueing: str = DEFAULT_QUEUEING_STRATEGY,
            reservation: ReservationPlay | None = None) -> None:
    """For each mix, cluster size and seed: the teams' trace replayed without teams (the
    shipped profile alone), with teams, and by the repacking reference; the figures appended to
    teams.jsonl as soon as a seed is done (a seed already kept there is skipped). With
    `contended`, instead of `seeds`: that many contended seeds (binpack.contended_seeds) of the
    teams' traces, kept as such (`only`: just those of them). `queueing`: every team's
    queueing strategy, kept with the row unless it is the default. `reservation`: played in
    the replays with and without teams, and kept with the row."""
    config = replay_setup.profiles(settings)[settings.scheduler.name]
    for sized in workload.cases(mixes, sizes, [0]):
        def trace_of(seed: int, sized=sized) -> TeamTrace:
            return generate(sized.mix, seed, int(jobs_per_gpu * sized.gpus), sized.gpus, load,
                            inference_share, fits=workload.fits_on(sized.biggest))
        chosen = seeds if contended is None else [
            seed for seed in binpack.contended_seeds(
                contended, lambda seed: trace_of(seed).trace, sized.nodes)
            if only is None or seed in only]
        for case in (dataclasses.replace(sized, seed=seed) for seed in chosen):
            replay_case(out, config, settings, case, trace_of(case.seed), load,
                        inference_share, contended is not None, queueing, progress,
                        reservation)


def replay_case(out: Path, config: dict, settings: StackSettings, case: workload.Case,
                trace: TeamTrace, load: float, inference_share: float, contended: bool,
                queueing: str, progress, reservation: ReservationPlay | None = None) -> None:
    """One case's three replays and its row in teams.jsonl, unless the row is kept already."""
    key = case.key | {"jobs": len(trace.trace.jobs), "load": load,
                      "inference_share": inference_share, "shares": SHARES, "busy": BUSY,
                      "phase_hours": PHASE_HOURS} | ({"contended": True} if contended else {}) \
        | ({} if queueing == DEFAULT_QUEUEING_STRATEGY else {"queueing": queueing}) \
        | ({"reservation": reservation.label(settings)} if reservation else {})
    if any(all(r.get(k) == v for k, v in key.items())
           for r in report.kept(out, report.TEAMS_RESULTS)):
        return
    print(f"teams: {case.describe()}: {len(trace.trace.jobs)} jobs, quotas {trace.quotas}, "
          f"{trace.trace.horizon:.0f} simulated hours", file=sys.stderr, flush=True)
    reference = binpack.reference(trace.trace, case.nodes)
    without = real_cluster.replay(
        "without teams", config, trace.trace, case.nodes, settings, progress("without teams"),
        reservation=reservation.on(settings, DEVICE_PLUGIN) if reservation else None)
    outcome, backend = replay(config, trace, case.nodes, progress("with teams"), queueing,
                              reservation)
    row = key | figures(trace, outcome, backend, without, reference, case.biggest.gpus)
    with open(out / report.TEAMS_RESULTS, "a") as kept:
        kept.write(json.dumps(row) + "\n")
