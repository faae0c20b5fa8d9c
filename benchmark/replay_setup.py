"""What a replay on the real cluster (real_cluster.py) is given: the kube-scheduler profiles
compared, how the fake GPU nodes hand out their GPUs (the device plugin or DRA), and which pods
may move: the platform's compaction, and the batch jobs in its preemptible class.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path

from benchmark.binpack import (  # first: binpack puts the project on the path
    HOUR,
    BatchJob,
    NodeShape,
    Outcome,
    PodRecord,
    Trace,
)
from components import gpu_compaction, gpu_operator, gpu_reservation
from components.base import kube_api
from components.binpack_scheduler import scheduler_configuration
from components.gpu_compaction.planner import compaction_plan
from components.gpu_reservation.actor import gpu_reservation as gpu_reservation_run
from components.gpu_reservation.actor.gpu_reservation import Config as ReservationConfig
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit import tools
from tests.kit.cluster import kube_components, nodes_and_pods
from tests.kit.cluster.controlplane import ControlPlane
from tests.kit.harness import compaction_of, operator_of, scheduler_of, scheduler_scoring

GPU = "nvidia.com/gpu"


# --- the scheduler profiles -----------------------------------------------------------------

DEFAULT_PROFILE = "default (LeastAllocated)"


def profiles(settings: StackSettings, variants: bool = False,
             shares: tuple[int, ...] = ()) -> dict[str, dict]:
    """The KubeSchedulerConfigurations compared: the project's rendered one (leader election
    off: one replica here), the default profile and MostAllocated; with `variants`, the rendered
    one with other resource weights and with kube-scheduler's adaptive share of nodes scored;
    with `shares`, the rendered one scoring each of those percentages of the nodes."""
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
        chosen[f"{settings.scheduler.name}, adaptive nodes scored"] = with_share(shipped, 0)
    for share in shares:
        chosen[share_label(settings.scheduler.name, share)] = with_share(shipped, share)
    # Each profile's scheduler name is its own, so the pods name the scheduler under test.
    return {label: replay_configuration(config) for label, config in chosen.items()}


def with_share(config: dict, share: int) -> dict:
    """`config` scoring `share` percent of the feasible nodes (0: kube-scheduler's adaptive
    share), as `scheduler.percentageOfNodesToScore` sets it."""
    config = json.loads(json.dumps(config))
    config["percentageOfNodesToScore"] = share
    return config


def share_label(name: str, share: int) -> str:
    return f"{name}, {share}% of nodes scored"


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


# --- how the GPU nodes hand out GPUs --------------------------------------------------------

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
        return kube_components.ControllerManager(
            cp, ("resourceclaim-controller",) if self.dra else ())

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


# --- which pods may move --------------------------------------------------------------------

@dataclass(frozen=True)
class Compaction:
    """The platform's compaction in a replay: the descheduler with the rendered policy every
    `interval` simulated hours. The pods of the inference services in `opted_in` and of the
    batch jobs in `jobs_opted_in` may move; those jobs checkpoint (see `real_cluster.replay`),
    and their Jobs replace an evicted pod (pod failure policy), which resumes from the last
    checkpoint. The replay applies minPodAge in simulated time, through the opt-in label (see
    `real_cluster.RealCluster.compact`), since its pods have no wall-clock age that means
    anything."""
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


@dataclass(frozen=True)
class Reservation:
    """The platform's reservation in a replay: a run every `interval` simulated hours, as the
    CronJob's pod runs it (with the declared ServiceAccount's rights), on the simulated
    clock: a pod waits from its simulated creation. With `declared_limits`, each batch job
    declares a run time limit (activeDeadlineSeconds) of that many times its run time, which
    the run reads to pick nodes and let pods backfill."""
    interval: float
    config: ReservationConfig
    objects: list[dict]         # its namespace, ServiceAccount, ClusterRole and binding
    name: str
    namespace: str
    declared_limits: float | None = None

    def limit_seconds(self, job: BatchJob) -> int | None:
        """`job`'s activeDeadlineSeconds, in simulated seconds, if jobs declare one."""
        return math.ceil(self.declared_limits * job.duration * HOUR) \
            if self.declared_limits else None

    def run(self, api: kube_api.Api, now: float, pods: dict[str, PodRecord]) -> list[str]:
        """One run at simulated hour `now`, reading when each pod was created and started
        from its record in `pods` (by name)."""
        def simulated(pod: dict, when: str) -> float | None:
            record = pods.get(pod["metadata"]["name"])
            hours = getattr(record, when) if record else None
            return hours * HOUR if hours is not None else None

        return gpu_reservation_run.run(api, self.config, now * HOUR,
                                       created=lambda pod: simulated(pod, "created"),
                                       started=lambda pod: simulated(pod, "started"))


# What a replay's reservation did, counted by the lines its runs printed that say so.
RESERVATION_COUNTS = {"reservations": "reserved for", "backfills": "backfilled with",
                      "reservations_expired": "expired after"}


def reservation_figures(outcome: Outcome) -> dict:
    """What a replay's reservation did, and the GPU-hours it held idle, also as a share of
    the cluster's."""
    idle = outcome.scheduler_metrics["reserved_idle_gpu_hours"]
    return {f: outcome.scheduler_metrics[f] for f in RESERVATION_COUNTS} | {
        "reserved_idle_gpu_hours": idle, "idle_share": idle / (outcome.total_gpus
                                                               * outcome.horizon)}


@dataclass(frozen=True)
class ReservationPlay:
    """Reservation as the benchmark is asked to play it: a run every `interval` simulated
    minutes, with the stack's `reservation` settings; with `declared_limits`, the batch jobs
    declaring run time limits of that many times their run time."""
    interval: float
    declared_limits: float | None = None

    def label(self, settings: StackSettings) -> str:
        reservation = settings.reservation
        label = (f"reservation (after {reservation.wait_before}, at most "
                 f"{reservation.max_nodes} nodes and {reservation.max_share:.0%}, expiring "
                 f"after {reservation.expire_after}, a run every {self.interval:g} min)")
        if self.declared_limits:
            label += (f", batch jobs declaring {self.declared_limits:g} times their run time"
                      f"{' (backfill)' if reservation.backfill else ''}")
        return label

    def on(self, settings: StackSettings, path: GpuPath) -> Reservation:
        """`settings.reservation`, on, as the stack renders it for `path`."""
        if path.dra:
            settings = settings.model_copy(update={
                "gpu_operator": settings.gpu_operator.model_copy(update={"gpu_path": "dra"}),
                "kubernetes_version": tools.DRA_KUBERNETES_VERSION})
        settings = settings.model_copy(update={"reservation": settings.reservation.model_copy(
            update={"enabled": True})})
        inputs = component_inputs(settings).reservation
        objects = [o for o in gpu_reservation.reservation_objects(inputs)
                   if o["kind"] not in ("ConfigMap", "CronJob")]
        return Reservation(self.interval / 60, gpu_reservation.actor_config(inputs), objects,
                           settings.reservation.name, settings.reservation.namespace,
                           self.declared_limits)


def opts_in(job: BatchJob, share: float) -> bool:
    """Whether `job` is among `share` of the jobs: the same draw for every replay of a trace,
    so the jobs that opt in to compaction and those that opt in to preemption coincide."""
    return random.Random(job.id).random() < share


def preemptible_jobs(trace: Trace, share: float, whole_node_gpus: int) -> frozenset:
    """`share` of the batch jobs smaller than a whole node, which run in the preemptible class
    (checkpointing Jobs whose evicted pod resumes); the whole-node jobs preempt them."""
    return frozenset(j.id for j in trace.jobs
                     if j.task.gpus < whole_node_gpus and opts_in(j, share))
