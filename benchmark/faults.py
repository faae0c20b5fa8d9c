"""The binpack benchmark with GPU failures (`bash tests/run benchmark --faults`): the replay's
trace with GPU nodes failing at drawn times, played with fault remediation off (a person takes
the node out after a delay) and on (`drain`). Each replay's figures are kept in
results/faults.jsonl, and report.faults_page renders the table from it.

What is real: the remediation pass is the Deployment's own code (`run` in
components/gpu_remediation/actor/gpu_remediation.py: its limit, taint, events and evictions
through the eviction API) with the declared ServiceAccount's token and ClusterRole, against the
real API server and the binpack scheduler; the Job controller makes an evicted pod's
replacement, which resumes from its last checkpoint. A person is played by the same pass, late
and without the limit. What stands in: the faults Prometheus would answer are the drawn
failures themselves (the query is tested on exporter-shaped series in the real Prometheus), and
the pass runs every PASS_EVERY simulated hours rather than every 10 s.

A failure hangs every pod on its node: they hold their GPUs and make no progress until taken
off, and their work since their last checkpoint is lost; a pod that lands on the node before it
is out of service hangs too. The node is repaired REPAIR_HOURS after it was taken out, then
labelled repaired and returned by the pass.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmark import binpack, report, workload
from benchmark.binpack import BatchJob, NodeShape, Outcome, PodRecord, Trace
from benchmark.real_cluster import RealCluster, on_control_plane
from benchmark.reclaim import EPOCH
from benchmark.replay_setup import profiles
from components import gpu_remediation
from components.base import kube_api
from components.base.gpu_faults import by_name
from components.gpu_remediation.actor import gpu_remediation as actor
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster.controlplane import ControlPlane

# GPU failures drawn per replay, at uniform times in the middle of the trace, on uniform nodes:
# enough that each mode's cost per failure is measured, far more than the published rate gives
# a cluster this size (the page scales the cost per failure to that rate).
FAILURES_PER_REPLAY = 6
FAILURE_WINDOW = (0.1, 0.8)         # share of the horizon failures fall in
# Llama 3's 54-day pre-training on 16,384 H100 GPUs (Meta, "The Llama 3 Herd of Models", 2024):
# 419 unexpected interruptions, 58.7% of them GPU issues.
PUBLISHED_GPU_FAILURES_PER_1000_GPU_DAYS = 419 * 0.587 / (16384 * 54) * 1000
REPAIR_HOURS = 4.0                  # from out of service to repaired (reset, reboot or swap)
PASS_EVERY = 0.05                   # simulated hours between passes (3 minutes)
FATAL = actor.Fault("fatal-xid", 79, by_name("fatal-xid").meaning)


@dataclass(frozen=True)
class Failure:
    """A GPU of `node` fails at simulated hour `at`."""
    at: float
    node: str


def draw_failures(trace: Trace, nodes: list[str], seed: int) -> list[Failure]:
    """FAILURES_PER_REPLAY failures from a stream of their own, so that the jobs, arrivals and
    work are the seed's trace as every other replay plays it; a node fails again only after it
    could have been repaired."""
    rng = random.Random(f"faults-{seed}")
    low, high = (share * trace.horizon for share in FAILURE_WINDOW)
    failures: list[Failure] = []
    while len(failures) < FAILURES_PER_REPLAY:
        failure = Failure(rng.uniform(low, high), rng.choice(sorted(nodes)))
        if all(f.node != failure.node or abs(f.at - failure.at) > 2 * REPAIR_HOURS
               for f in failures):
            failures.append(failure)
    return sorted(failures, key=lambda f: f.at)


@dataclass(frozen=True)
class Mode:
    """Who takes a failed node out: a person `person_hours` after the failure (remediation
    off), or the pass (None: remediation's `drain`)."""
    label: str
    person_hours: float | None


MODES = (Mode("off, a person acts after 4h", 4.0),
         Mode("off, a person acts after 1h", 1.0),
         Mode("drain", None))


def remediation_settings(settings: StackSettings, mode: Mode) -> StackSettings:
    """The stack with remediation on `drain` at its defaults; a person has no limit."""
    limits = {} if mode.person_hours is None else {"maxNodes": 1000, "maxShare": 1.0}
    section = settings.remediation.model_dump(by_alias=True) | {"mode": "drain", **limits}
    return settings.model_copy(update={
        "remediation": type(settings.remediation).model_validate(section)})


@dataclass
class Broken:
    """A failed node: when it failed, was taken out of service and was repaired."""
    failure: Failure
    out_at: float | None = None
    repaired: bool = False


def stopped_work(record: PodRecord, hung_at: float, checkpoint_every: float
                 ) -> tuple[float, float]:
    """For a pod that stopped making progress at `hung_at`: the hours of work it keeps (its
    last checkpoint) and the hours it loses."""
    if record.started is None:
        raise ValueError(f"{record.name} never started")
    ran = max(0.0, hung_at - record.started)
    saved = ran // checkpoint_every * checkpoint_every
    return saved, ran - saved


class FaultCluster(RealCluster):
    """The real cluster with failures as drawn, and a pass every PASS_EVERY hours that takes
    failed nodes out, once found (at once with remediation, after `person_hours` without), and
    returns repaired ones."""

    def __init__(self, cp: ControlPlane, config: dict, nodes: dict[str, NodeShape],
                 trace: Trace, settings: StackSettings, failures: list[Failure], mode: Mode):
        super().__init__(cp, config, nodes, trace, settings)
        self.mode, self.failures = mode, list(failures)
        self.broken: dict[str, Broken] = {}     # each node's last failure
        self.history: list[Broken] = []
        self.hung: dict[str, float] = {}        # pod name: when it stopped making progress
        self.hung_gpu_hours = 0.0
        self.jobs_hit: set[int] = set()
        self.held_back = 0                      # passes that left a found failure in service
        self.periodic_interval = PASS_EVERY
        inputs = component_inputs(settings).remediation
        self.actor_config = gpu_remediation.actor_config(inputs)
        for obj in gpu_remediation.remediation_objects(inputs):
            if obj["kind"] != "Deployment":     # the replay runs its pass on its own clock
                self.kube.create(obj)
        remediation = settings.remediation
        self.api = kube_api.Api(cp.server,
                                cp.service_account_token(remediation.namespace, remediation.name),
                                ssl.create_default_context(cafile=str(cp.ca_file)))

    def periodic(self, now: float) -> None:
        self.now = now
        while self.failures and self.failures[0].at <= now:
            failure = self.failures.pop(0)
            if failure.node in self.broken and not self.broken[failure.node].repaired:
                continue        # failed already and not yet repaired: nothing more to break
            self.broken[failure.node] = Broken(failure)
            self.history.append(self.broken[failure.node])
            for record in self.records:
                if record.running and record.node == failure.node \
                        and record.started is not None:
                    self._hang(record, max(failure.at, record.started))
        found = {node: [FATAL] for node, broken in self.broken.items()
                 if not broken.repaired and (self.mode.person_hours is None or
                                             now - broken.failure.at >= self.mode.person_hours)}
        for node, broken in self.broken.items():
            if broken.out_at is not None and not broken.repaired \
                    and now - broken.out_at >= REPAIR_HOURS:
                broken.repaired = True
                found.pop(node, None)
                self.kube.merge_patch("v1", "Node", node, {"metadata": {"labels": {
                    gpu_remediation.REPAIRED_LABEL: "true"}}})
        with contextlib.redirect_stdout(io.StringIO()):
            lines = actor.run(self.api, self.actor_config, found, EPOCH + now * 3600)
        for line in lines:
            node = line.partition(":")[0]
            if ": quarantined" in line:
                self.broken[node].out_at = now
                self.out_of_service.add(node)
            elif ": back in service" in line:
                self.out_of_service.discard(node)
            elif ": not quarantined" in line:
                self.held_back += 1

    def resumes_after_eviction(self, job: BatchJob) -> bool:
        """Every job checkpoints and resumes: a failure costs its work since the last one."""
        return True

    def _hang(self, record: PodRecord, now: float) -> None:
        if record.job is not None and record.name not in self.hung:
            self.hung[record.name] = now
            self.jobs_hit.add(record.job.id)

    def finish(self, record: PodRecord, now: float) -> None:
        """A hung pod never ends by itself."""
        if record.name not in self.hung:
            super().finish(record, now)

    def _on_event(self, kind: str, pod: dict, started: list[PodRecord]) -> None:
        super()._on_event(kind, pod, started)
        record = self.by_name.get(pod["metadata"]["name"])
        node = pod["spec"].get("nodeName")
        broken = self.broken.get(node or "")
        if record is not None and record.running and broken is not None \
                and broken.out_at is None and not broken.repaired:
            self._hang(record, self.now)     # landed on the failed node before it was out

    def _evicted(self, record: PodRecord) -> None:
        """A hung pod taken off: its work up to its last checkpoint before it hung is kept, the
        rest lost, and the time it held its GPUs hung is counted apart."""
        hung_at = self.hung.get(record.name)
        if hung_at is None:
            super()._evicted(record)
            return
        job = record.job
        if job is None:
            raise ValueError(f"{record.name} is not a job's pod")
        saved, lost = stopped_work(record, hung_at, self.checkpoint_every)
        self.checkpointed[job.id] = (record.resumed_at or 0.0) + saved
        self.evicted_at[job.id] = self.now
        self.lost_gpu_hours += record.task.gpus * lost
        self.hung_gpu_hours += record.task.gpus * (self.now - hung_at)
        self.expected_jobs.add(job.id)


def figures(outcome: Outcome, cluster: FaultCluster) -> dict:
    """One replay's figures, as kept in faults.jsonl."""
    out = [b.out_at - b.failure.at for b in cluster.history if b.out_at is not None]
    waits = outcome.waits()
    ends: dict[int, float] = {}
    for record in outcome.records:
        if record.job is not None and record.job.id in cluster.jobs_hit:
            ends[record.job.id] = max(ends.get(record.job.id, 0.0),
                                      record.ended if record.ended is not None
                                      else outcome.horizon)
    completion = [ends[job.id] - job.arrival for job in cluster.jobs_by_name.values()
                  if job.id in ends]
    row = {"failures": len(cluster.history), "taken_out": len(out),
           "out_after_mean": sum(out) / len(out) if out else None,
           "held_back_passes": cluster.held_back,
           "hung_gpu_hours": cluster.hung_gpu_hours,
           "lost_work_gpu_hours": outcome.lost_gpu_hours,
           "jobs_hit": len(cluster.jobs_hit),
           "hit_completion_mean": sum(completion) / len(completion) if completion else None,
           "wait_mean": sum(waits) / len(waits) if waits else None,
           "wait_p95": binpack.percentile(waits, 0.95),
           "evictions": outcome.evictions,
           **outcome.scheduler_metrics}
    for gpus in (1, 8):
        row[f"wait_p95_{gpus}"] = outcome.wait(gpus, 0.95)
    return row


def measure(out: Path, settings: StackSettings, mixes: list[str], sizes: list[int],
            seeds: list[int], jobs_per_gpu: float, load: float, inference_share: float,
            progress=lambda label: lambda done, total: None) -> None:
    """For each mix, cluster size and seed: the trace with its failures replayed in each of
    MODES, the figures appended to faults.jsonl as each replay ends (one kept there already is
    skipped)."""
    config = profiles(settings)[settings.scheduler.name]
    for case in workload.cases(mixes, sizes, seeds):
        trace = workload.generate(case.mix, case.seed, int(jobs_per_gpu * case.gpus), case.gpus,
                                  load, inference_share, fits=workload.fits_on(case.biggest))
        failures = draw_failures(trace, list(case.nodes), case.seed)
        key = case.key | {"jobs": len(trace.jobs), "load": load,
                          "inference_share": inference_share,
                          "failures_drawn": FAILURES_PER_REPLAY, "repair_hours": REPAIR_HOURS}
        done = {r["mode"] for r in report.kept(out, report.FAULTS_RESULTS)
                if all(r.get(k) == v for k, v in key.items())}
        print(f"faults: {case.describe()}: {len(trace.jobs)} jobs, failures at "
              f"{', '.join(f'{f.at:.1f}h on {f.node}' for f in failures)}", file=sys.stderr,
              flush=True)
        for mode in MODES:
            if mode.label in done:
                continue
            stack = remediation_settings(settings, mode)
            started = time.monotonic()
            outcome, cluster = on_control_plane(
                mode.label, trace, case.nodes,
                lambda cp, stack=stack, mode=mode, nodes=case.nodes, trace=trace,
                failures=failures: FaultCluster(cp, config, nodes, trace, stack, failures, mode),
                progress(mode.label))
            if not isinstance(cluster, FaultCluster):
                raise TypeError("the replay's cluster is not the fault cluster")
            row = key | {"mode": mode.label} | figures(outcome, cluster)
            print(f"  {mode.label}: {time.monotonic() - started:.0f}s, "
                  f"{row['hung_gpu_hours'] + row['lost_work_gpu_hours']:.0f} GPU-hours lost",
                  file=sys.stderr, flush=True)
            with open(out / report.FAULTS_RESULTS, "a") as kept:
                kept.write(json.dumps(row) + "\n")
