"""The trace on a real cluster: a local control plane with fake GPU nodes, the real
kube-scheduler and kube-controller-manager, and RealCluster playing the kubelets (see binpack.py
for how a replay settles); the scheduler's own figures read from its metrics; and the entry
points that replay a trace or probe the scheduling latency on a fresh control plane.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import requests

from benchmark import workload
from benchmark.binpack import (
    JOB_BACKOFF_MAX_SECONDS,
    NAMESPACE,
    Backend,
    BatchJob,
    Ledger,
    NodeShape,
    Outcome,
    PodRecord,
    Sample,
    Task,
    Trace,
    play,
)
from benchmark.replay_setup import (
    DEVICE_PLUGIN,
    RESERVATION_COUNTS,
    Compaction,
    GpuPath,
    Reservation,
    scheduler_name,
)
from components.base import kube_api
from components.binpack_scheduler import preemptible_priority_class
from components.platform.settings import StackSettings
from tests.kit import tools
from tests.kit.cluster import (
    declared_objects,
    descheduler,
    fake_kubelet,
    kube_components,
    nodes_and_pods,
)
from tests.kit.cluster.controlplane import ApiError, ControlPlane, wait_until
from tests.kit.harness import scheduler_of

# --- the real cluster -----------------------------------------------------------------------

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
                 gpu_path: GpuPath = DEVICE_PLUGIN, reservation: Reservation | None = None):
        self.kube, self.settings = cp.admin, settings
        if compaction and reservation:
            raise ValueError("a replay plays compaction or reservation, not both")
        self.compaction, self.reservation = compaction, reservation
        self.reservations: list[str] = []    # what each reservation run did
        self.reserved_idle_gpu_hours = 0.0     # free GPUs on reserved nodes, over time
        self.reserved_for: dict[str, str] = {}  # reserved node: the pod it is kept for
        self.out_of_service: set[str] = set()   # nodes no pod may land on (a GPU failed)
        if reservation:
            self.periodic_interval = reservation.interval
            declared_objects.apply_declared(self.kube, reservation.objects)
            self.reservation_api = kube_api.Api(
                cp.server, cp.service_account_token(reservation.namespace, reservation.name),
                ssl.create_default_context(cafile=str(cp.ca_file)))
        self.preemptible_jobs = preemptible_jobs
        self.checkpoint_every = checkpoint_every
        if compaction:
            self.periodic_interval = compaction.interval
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
        limit = self.reservation.limit_seconds(job) if self.reservation else None
        if limit:
            template["spec"]["activeDeadlineSeconds"] = limit
        self.kube.create(nodes_and_pods.job(
            name, self.job_namespace(job), template,
            resumes_after_eviction=self.resumes_after_eviction(job)))
        self.jobs_by_name[name] = job

    def resumes_after_eviction(self, job: BatchJob) -> bool:
        """Whether the job's pod failure policy makes a replacement for an evicted pod, which
        resumes from its checkpoint: the jobs that may be preempted or compacted."""
        return job.id in self.preemptible_jobs or (
            bool(self.compaction) and self.compaction.moves(job=job))

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
        fake_kubelet.patch_pod_status(self.kube, pod, {"phase": "Succeeded", "conditions": [
            {"type": "Ready", "status": "False", "reason": "PodCompleted"}]})

    def periodic(self, now: float) -> None:
        if self.reservation:
            self.reserve(now)
        else:
            self.compact(now)

    def reserve(self, now: float) -> None:
        """One reservation run at simulated `now`, its pods waiting from their simulated
        creation."""
        self.now = now
        assert self.reservation is not None
        self.reservations += self.reservation.run(self.reservation_api, now, self.by_name)
        config = self.reservation.config
        self.reserved_for = {
            n["metadata"]["name"]: n["metadata"]["annotations"][config["podAnnotation"]]
            .partition("/")[2] for n in self.kube.list("v1", "Node")
            if any(t["key"] == config["taintKey"] for t in n["spec"].get("taints") or [])}
        self.reserved_idle_gpu_hours += sum(self.ledger.free[node][0]
                                            for node in self.reserved_for) \
            * self.reservation.interval

    def compact(self, now: float) -> None:
        """One run of the real descheduler with the platform's compaction policy; the pods it
        evicts go, and their replacements wait for the scheduler, as any new pod does.

        minPodAge in simulated time: an opted-in pod gets the opt-in label only once it has run
        that long, so the descheduler sees it only then."""
        self.now = now
        compaction = self.compaction
        if compaction is None:      # play() calls this only at a periodic_interval: with one
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
                # Merged by condition type, as a kubelet's report is: a DisruptionTarget the
                # scheduler has just added (preempted the moment it was bound) stays, so the
                # Job's pod failure policy still sees a preemption, not a failure.
                fake_kubelet.patch_pod_status(self.kube, pod, self.running_status())
            except ApiError as error:
                if error.status != 404:     # evicted or scaled away meanwhile: its event follows
                    raise

    def running_status(self) -> dict:
        """The status a bound pod gets, as its kubelet would report it once running."""
        return fake_kubelet.pod_status("Running", ready=True, reason="Replay")

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
        fitting = [r.name for r in self.placeable() if self.ledger.fits_somewhere(
            r.task, excluding=[*self.out_of_service,
                               *(n for n, pod in self.reserved_for.items() if pod != r.name)])]
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
        """The run's own figures, read before the control plane goes: the scheduler's, and
        with reservation, how many it made, how many pods it let backfill, how many expired and
        the GPU-hours they held idle (free GPUs on reserved nodes at each run, until the
        next)."""
        figures = scrape(self.scheduler, cp)
        if self.reservation:
            figures |= {figure: sum(said in r for r in self.reservations)
                        for figure, said in RESERVATION_COUNTS.items()} \
                | {"reserved_idle_gpu_hours": self.reserved_idle_gpu_hours}
        return figures

    def stop(self) -> None:
        self.watch.stop()


# --- the scheduler's own figures ------------------------------------------------------------

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


# --- on a fresh control plane ---------------------------------------------------------------

def replay(label: str, config: dict, trace: Trace, nodes: dict[str, NodeShape],
           settings: StackSettings,
           progress: Callable[[int, int], None] = lambda done, total: None,
           compaction: Compaction | None = None, preemptible: frozenset = frozenset(),
           checkpoint_every: float = 0.5, gpu_path: GpuPath = DEVICE_PLUGIN,
           reservation: Reservation | None = None) -> Outcome:
    """The trace against one kube-scheduler running `config`, on a fresh control plane (with
    `compaction`: the descheduler's runs as well; the jobs in `preemptible` run in the
    platform's preemptible class), whose GPU nodes hand out GPUs by `gpu_path`. A job that is
    evicted or preempted resumes from its last checkpoint, taken every `checkpoint_every`
    simulated hours."""
    return on_control_plane(label, trace, nodes, lambda cp: RealCluster(
        cp, config, nodes, trace, settings, compaction, preemptible, checkpoint_every,
        gpu_path, reservation), progress, gpu_path=gpu_path)[0]


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


class CpuProfile:
    """A CPU profile of a running kube-scheduler over `seconds`, from its profiling endpoint
    (on by default), taken in the background from when it is made."""

    def __init__(self, scheduler: kube_components.Scheduler, cp: ControlPlane, seconds: int):
        self.path = cp.dir / f"scheduler-{scheduler.port}.pprof"
        cert, key = cp.admin_cert
        url = f"https://127.0.0.1:{scheduler.port}/debug/pprof/profile?seconds={seconds}"

        def fetch() -> None:
            self.path.write_bytes(requests.get(url, cert=(str(cert), str(key)),
                                               verify=str(cp.ca_file),
                                               timeout=seconds + 60).content)
        self.thread = threading.Thread(target=fetch, daemon=True)
        self.thread.start()

    def top(self, binary: Path, functions: int = 15) -> list[str]:
        """The functions with the most CPU, themselves and below them (cumulative)."""
        self.thread.join()
        result = subprocess.run([tools.go(), "tool", "pprof", "-top", "-cum",
                                 f"-nodecount={functions}", str(binary), str(self.path)],
                                capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"pprof could not read the profile: {result.stderr.strip()}; "
                               f"the scheduler answered {self.path.read_bytes()[:200]!r}")
        return result.stdout.splitlines()


def latency_probe(config: dict, node_count: int, pods: int, settings: StackSettings,
                  gpu_path: GpuPath = DEVICE_PLUGIN, pprof_seconds: int = 0,
                  feature_gates: str = "") -> dict:
    """What one profile's scheduling attempts cost on `node_count` 8-GPU nodes (handing out
    GPUs by `gpu_path`): a Deployment's `pods` 1-GPU replicas, all pending, are placed by a
    scheduler started then (`wall_seconds`: from its start until the last is bound), then the
    scheduler's own figures are read, and how many nodes the burst took (`nodes_used`: a
    packing figure, pods/8 at best); with `pprof_seconds`, its CPU profile over the start of
    the burst, as `go tool pprof -top` summarises it (`pprof_top`); with `feature_gates`, the
    scheduler runs with them (`--feature-gates`)."""
    nodes = workload.CLUSTERS["homogeneous"](node_count)
    cp = gpu_path.control_plane().start()
    try:
        kube = cp.admin
        gpu_path.create_nodes(cp, settings, nodes)
        nodes_and_pods.ensure_namespace(kube, NAMESPACE)
        controllers = gpu_path.controllers(cp)
        labels = {"app": "probe"}
        # The pods first, pending, so that the scheduler meets them as one burst and their
        # creation's pace is not measured.
        kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "probe", "namespace": NAMESPACE},
                     "spec": {"replicas": pods, "selector": {"matchLabels": labels},
                              "template": pod_template(labels, Task(1, 4000, 32768),
                                                       scheduler_name(config), settings)}})

        def placed() -> int:
            return len([p for p in kube.list("v1", "Pod", NAMESPACE) if p["spec"].get("nodeName")])
        wait_until(lambda: len(kube.list("v1", "Pod", NAMESPACE)) == pods,
                   f"{pods} probe pods to be created", timeout=600, interval=1.0)
        # Its client CA from the start, not once it has read it from the cluster: the profile
        # is asked for at once.
        scheduler = kube_components.Scheduler(cp, "scheduler", config,
                                              kubeconfig=cp.kubeconfig("scheduler"),
                                              extra_args=(f"--client-ca-file={cp.ca_file}",
                                                          *([f"--feature-gates={feature_gates}"]
                                                            if feature_gates else [])))
        profiling = (CpuProfile(scheduler, cp, pprof_seconds) if pprof_seconds else None)
        started = time.monotonic()
        wait_until(lambda: placed() == pods, f"{pods} probe pods to be bound", timeout=900,
                   interval=0.5)
        figures = scrape(scheduler, cp) | {
            "wall_seconds": time.monotonic() - started,
            "nodes_used": len({p["spec"]["nodeName"] for p in kube.list("v1", "Pod", NAMESPACE)})}
        if profiling:
            figures["pprof_top"] = profiling.top(cp.binary("kube-scheduler"))
        controllers.stop()
        return figures
    finally:
        cp.stop()
