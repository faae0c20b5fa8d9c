"""Bursts and failovers of the binpack scheduler, measured against the real control plane: how
fast it binds a burst of pending GPU pods with a given client rate, and how long GPU placement
stops when its leader crashes. The integration suite asserts what the shipped settings promise;
the benchmark (`bash tests/run benchmark --scheduling`) measures settings side by side."""

from __future__ import annotations

import copy
import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from components.platform.settings import StackSettings
from tests.kit.cluster.controlplane import ControlPlane, Kube, wait_until
from tests.kit.cluster.kube_components import PodWatch, Scheduler
from tests.kit.cluster.nodes_and_pods import create_gpu_node, ensure_namespace, pod


def create_concurrently(cp: ControlPlane, objects: list[dict], clients: int = 16) -> None:
    """Create `objects` from `clients` threads, each with a client of its own."""
    pending = list(reversed(objects))
    lock = threading.Lock()
    errors: list[Exception] = []

    def work() -> None:
        kube = Kube(cp.server, cp.ca_file, cert=cp.admin_cert)
        while True:
            with lock:
                if not pending or errors:
                    return
                obj = pending.pop()
            try:
                kube.create(obj)
            except Exception as error:     # raised below, in the caller's thread
                with lock:
                    errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def gpu_pods(settings: StackSettings, namespace: str, count: int, prefix: str) -> list[dict]:
    return [pod(f"{prefix}-{index}", namespace, gpus=1, settings=settings,
                scheduler=settings.scheduler.name) for index in range(count)]


def scheduler_metrics(cp: ControlPlane, scheduler: Scheduler) -> str:
    certificate, key = cp.admin_cert
    return requests.get(f"https://127.0.0.1:{scheduler.port}/metrics",
                        cert=(str(certificate), str(key)), verify=str(cp.ca_file),
                        timeout=10).text


def metric_sum(text: str, metric: str, match: str = "") -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if (line.startswith(metric + "{") or line.startswith(metric + " "))
               and match in line)


@dataclass(frozen=True)
class Burst:
    nodes: int
    pods: int
    qps: int
    burst: int
    seconds: float              # from the first binding to the last
    requests: float             # the scheduler's requests to the API server meanwhile

    @property
    def pods_per_second(self) -> float:
        return self.pods / self.seconds

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds


def bind_burst(cp: ControlPlane, settings: StackSettings, config: dict, kubeconfig: Path,
               nodes: int, pods: int, namespace: str = "burst") -> Burst:
    """`pods` 1-GPU pods pending at once on `nodes` empty 8-GPU nodes (as when a queue opens
    or a large job is submitted), then the scheduler `config` started: how long it takes from
    its first binding to its last, as a watch on the pods sees them."""
    assert pods <= 8 * nodes, f"{pods} 1-GPU pods do not fit on {nodes} 8-GPU nodes"
    kube = cp.admin
    ensure_namespace(kube, namespace)
    for index in range(nodes):
        create_gpu_node(kube, settings, f"{namespace}-node-{index}", gpus=8)
    create_concurrently(cp, gpu_pods(settings, namespace, pods, namespace))
    watch = PodWatch(kube, namespace)
    bound: dict[str, float] = {}
    scheduler = Scheduler(cp, f"{namespace}-scheduler", config, kubeconfig=kubeconfig)
    try:
        before = metric_sum(scheduler_metrics(cp, scheduler), "rest_client_requests_total")
        deadline = time.monotonic() + 600
        while len(bound) < pods:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(bound)} of {pods} pods bound after 600 s")
            event = watch.next(timeout=1.0)
            if event is not None and event[1]["spec"].get("nodeName"):
                bound.setdefault(event[1]["metadata"]["name"], time.monotonic())
        requests_made = metric_sum(scheduler_metrics(cp, scheduler),
                                   "rest_client_requests_total") - before
    finally:
        watch.stop()
        scheduler.process.stop()
    connection = config.get("clientConnection", {})
    return Burst(nodes, pods, connection.get("qps", 50), connection.get("burst", 100),
                 max(bound.values()) - min(bound.values()), requests_made)


def is_leader(cp: ControlPlane, scheduler: Scheduler) -> bool:
    return metric_sum(scheduler_metrics(cp, scheduler), "leader_election_master_status") == 1


@dataclass(frozen=True)
class Failover:
    lease_duration: str
    renew_deadline: str
    retry_period: str
    seconds: list[float]        # from each leader's crash until a pod created then is bound

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def failover(cp: ControlPlane, settings: StackSettings, config: dict, kubeconfig: Path,
             crashes: int, namespace: str = "failover") -> Failover:
    """Two replicas of the scheduler `config` electing a leader; the leader killed (SIGKILL,
    as a crashed node or an OOM kill leaves it: the lease is not released), a GPU pod created at
    once: how long until it is bound. A new replica then stands by again, `crashes` times."""
    kube = cp.admin
    ensure_namespace(kube, namespace)
    create_gpu_node(kube, settings, f"{namespace}-node", gpus=8)
    election = config["leaderElection"]
    assert election["leaderElect"], "failover needs a configuration that elects a leader"
    ensure_namespace(kube, election["resourceNamespace"])     # where the lease is kept
    replicas = [Scheduler(cp, f"{namespace}-scheduler-{index}", copy.deepcopy(config),
                          kubeconfig=kubeconfig) for index in range(2)]
    seconds = []
    try:
        for crash in range(crashes):
            leader = wait_until(lambda standing=replicas: next(
                (s for s in standing if is_leader(cp, s)), None), "a leader to be elected",
                timeout=60)
            os.killpg(leader.process.pid, signal.SIGKILL)
            crashed = time.monotonic()
            kube.create(pod(f"after-crash-{crash}", namespace, gpus=1, settings=settings,
                            scheduler=settings.scheduler.name))
            wait_until(lambda crash=crash: kube.get("v1", "Pod", f"after-crash-{crash}",
                                                    namespace)["spec"].get("nodeName"),
                       "the pod created after the crash to be bound", timeout=120,
                       interval=0.05)
            seconds.append(time.monotonic() - crashed)
            kube.delete("v1", "Pod", f"after-crash-{crash}", namespace)
            replicas = [s for s in replicas if s is not leader]
            replicas.append(Scheduler(cp, f"{namespace}-scheduler-{crash + 2}",
                                      copy.deepcopy(config), kubeconfig=kubeconfig))
    finally:
        for replica in replicas:
            replica.process.stop()
    return Failover(election["leaseDuration"], election["renewDeadline"],
                    election["retryPeriod"], seconds)

