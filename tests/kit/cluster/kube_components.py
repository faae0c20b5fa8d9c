"""The real Kubernetes components that act on the local control plane: kube-schedulers, from a
KubeSchedulerConfiguration (the binpack scheduler as the program deploys it, and the default
profile), a kube-controller-manager with the workload controllers, and a watch of pods that follows
what they do."""

from __future__ import annotations

import copy
import json
import queue
import socket
import threading

import requests
import yaml

from components import binpack_scheduler
from components.binpack_scheduler.settings import SchedulerSettings
from tests.kit.cluster.controlplane import ControlPlane, free_port, wait_until
from tests.kit.cluster.declared_objects import find

# The profile name of a kube-scheduler run with the defaults, as on every cluster.
DEFAULT_SCHEDULER = "default-scheduler"


class Scheduler:
    """A real kube-scheduler running `config` (a KubeSchedulerConfiguration) against the
    control plane with the given credentials."""

    def __init__(self, cp: ControlPlane, name: str, config: dict, *, kubeconfig,
                 extra_args: tuple[str, ...] = ()):
        self.port = free_port()
        config = copy.deepcopy(config)
        config.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
        path = cp.write(f"schedulers/{name}.yaml", yaml.safe_dump(config))
        serving = cp.ca.issue(name, server=True, ip_addresses=("127.0.0.1",))
        self.process = cp.start_process(name, [
            str(cp.binary("kube-scheduler")), f"--config={path}", f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            f"--tls-cert-file={cp.write(f'schedulers/{name}.crt', serving.cert_pem)}",
            f"--tls-private-key-file={cp.write(f'schedulers/{name}.key', serving.key_pem)}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", *extra_args])
        wait_healthy(self.process, self.port, cp.ca_file, f"kube-scheduler {name}")


def wait_healthy(process, port: int, ca_file, what: str) -> None:
    """Wait until a control-plane component serves /healthz on its loopback port."""
    def healthy() -> bool:
        if not process.running():
            raise RuntimeError(f"{what} exited\n{process.tail()}")
        try:
            return requests.get(f"https://127.0.0.1:{port}/healthz", verify=str(ca_file),
                                timeout=2).ok
        except requests.ConnectionError:
            return False
    wait_until(healthy, f"{what} to serve /healthz", timeout=60, explain=process.tail)


def binpack_scheduler_args(deployment: dict) -> tuple[str, ...]:
    """The flags of the declared scheduler Deployment, less those the fixture sets itself
    (config file, port)."""
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    own = ("--config=", "--secure-port=")
    return tuple(arg for arg in command[1:] if not arg.startswith(own))


def start_binpack_scheduler(cp: ControlPlane, sched: SchedulerSettings,
                            objects: list[dict]) -> Scheduler:
    """The binpack scheduler as the program deploys it: the KubeSchedulerConfiguration from the
    declared ConfigMap, the Deployment's flags, and the credentials of its ServiceAccount (so
    the declared RBAC, leader election included, is what lets it work)."""
    config_map = find(objects, "ConfigMap", f"{sched.name}-config")
    config = yaml.safe_load(config_map["data"][binpack_scheduler.CONFIG_FILE])
    token = cp.service_account_token(sched.namespace, sched.name)
    return Scheduler(cp, sched.name, config,
                     kubeconfig=cp.kubeconfig(sched.name, token=token),
                     extra_args=binpack_scheduler_args(find(objects, "Deployment", sched.name)))


def scheduler_with_strategy(name: str, strategy: dict | None = None) -> dict:
    """A KubeSchedulerConfiguration with one profile named `name`: the default plugins, with
    NodeResourcesFit scoring by `strategy` (the default, LeastAllocated, when None)."""
    profile: dict = {"schedulerName": name}
    if strategy:
        profile["pluginConfig"] = [{"name": "NodeResourcesFit",
                                    "args": {"scoringStrategy": strategy}}]
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False}, "profiles": [profile]}


class ControllerManager:
    """A real kube-controller-manager with the workload controllers only, so that
    Deployments, StatefulSets and Jobs create and remove their pods as on a cluster. The node
    lifecycle controller stays off: fake nodes send no heartbeats, and it would taint them
    unreachable and evict their pods."""

    CONTROLLERS = ("deployment-controller", "replicaset-controller", "statefulset-controller",
                   "job-controller", "daemonset-controller", "garbage-collector-controller",
                   # PodDisruptionBudget status, which the eviction API decides by.
                   "disruption-controller",
                   # A Service's ready endpoints, which webhooks are called at.
                   "endpointslice-controller",
                   # ResourceQuota status, which quota admission counts against.
                   "resourcequota-controller")

    def __init__(self, cp: ControlPlane, extra_controllers: tuple[str, ...] = ()):
        """`extra_controllers`: more of its controllers (the resource-claim controller, for
        Dynamic Resource Allocation)."""
        self.port = free_port()
        # Its own name, as on a cluster, so that admission sees the pods its controllers create
        # as theirs (the DaemonSet controller's among them).
        kubeconfig = cp.kubeconfig("kube-controller-manager", cert=cp.superuser_cert(
            "system:kube-controller-manager"))
        serving = cp.ca.issue("kube-controller-manager", server=True, ip_addresses=("127.0.0.1",))
        self.process = cp.start_process("kube-controller-manager", [
            str(cp.binary("kube-controller-manager")), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--controllers={','.join((*self.CONTROLLERS, *extra_controllers))}",
            "--leader-elect=false",
            f"--secure-port={self.port}", "--bind-address=127.0.0.1",
            f"--tls-cert-file={cp.write('pki/kcm.crt', serving.cert_pem)}",
            f"--tls-private-key-file={cp.write('pki/kcm.key', serving.key_pem)}",
            # Hundreds of nodes and pods: the default client rate (20/s) would be the bottleneck.
            "--kube-api-qps=500", "--kube-api-burst=1000"])
        wait_healthy(self.process, self.port, cp.ca_file, "kube-controller-manager")

    def stop(self) -> None:
        self.process.stop()


class PodWatch:
    """Every change to the pods of one namespace (None: of every namespace), from a watch
    stream read by a thread."""

    def __init__(self, kube, namespace: str | None):
        self.kube = kube
        self.pods = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        self.events: queue.Queue[tuple[str, dict]] = queue.Queue()
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.verify = kube.session.verify
        self.session.cert = kube.session.cert
        self.session.headers.update(kube.session.headers)
        listing = kube.request("GET", self.pods, what="list benchmark pods")
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.stopped = threading.Event()
        self.failure: RuntimeError | None = None
        self.reply: requests.Response | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stopped.is_set():
            try:
                with self.session.get(
                        f"{self.kube.server}{self.pods}",
                        # Bookmarks keep the version to resume from recent, so that a stream
                        # reopened after quiet minutes is not refused as too old.
                        params={"watch": "true", "resourceVersion": self.resource_version,
                                "allowWatchBookmarks": "true", "timeoutSeconds": "300"},
                        stream=True, timeout=(5, 330)) as reply:
                    self.reply = reply
                    for line in reply.iter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            # Said by next(), not lost with this thread.
                            self.failure = RuntimeError(f"pod watch failed: {event['object']}")
                            return
                        self.resource_version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self.events.put((event["type"], event["object"]))
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError, OSError,
                    ValueError):
                # The control plane, or its files, went away; or the stream broke off mid-event
                # (as it does when stop() shuts the socket): read on from the last event seen.
                if self.stopped.is_set():
                    return

    def next(self, timeout: float) -> tuple[str, dict] | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            if self.failure is not None:
                raise self.failure from None
            return None

    def stop(self) -> None:
        """End the stream (an open watch would hold the API server's shutdown up)."""
        self.stopped.set()
        if self.reply is not None and self.reply.raw.connection is not None:
            try:
                self.reply.raw.connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass    # that stream had already ended (the watch timed out) and closed it
        self.thread.join(timeout=10)
        self.session.close()

