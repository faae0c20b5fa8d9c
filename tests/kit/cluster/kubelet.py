"""A kubelet for the pods whose containers can run here as real processes (OPA): it starts them
from the pod as the API server stores it, as a kubelet would, and reports them back.

What it does as a kubelet does: each pod gets an address of its own; its ConfigMap and Secret
volumes are written from the objects as they are when the pod starts, in the kubelet's layout (a
timestamped directory, a `..data` link to it and a link per file); its containers run with their
arguments, the mount paths pointing at those volumes; a container that exits is restarted (at
once the first time, then after 10 s, doubling, as the kubelet's crash-loop back-off); the
readiness and liveness probes run as declared, a failed liveness probe restarting the container;
the pod's status (IP, Ready condition, restart counts) is reported after each change; a pod
being deleted has its containers stopped, each pod on its own while the others go on (SIGTERM,
then SIGKILL after its grace period), and is removed once they have exited. A real
kube-controller-manager then builds the Service's EndpointSlices from those statuses, and the API
server (with --enable-aggregator-routing) calls webhooks at the ready endpoints, as it calls
them on a cluster.

What differs from a node: no container runtime, so a container is the process of the image's
program (a known binary per image repository) in this machine's network namespace, its listening
address 0.0.0.0 narrowed to the pod's address. Pod addresses are taken from a /24 of 10.0.0.0/8
chosen at random and added to the loopback interface, which needs CAP_NET_ADMIN (loopback
addresses themselves cannot stand in: the API server refuses them in endpoints)."""

from __future__ import annotations

import atexit
import base64
import datetime
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.kit.cluster.controlplane import ApiError, ControlPlane, Kube, Process

# The kubelet's crash-loop back-off: the first restart at once, then 10 s doubling to 5 min.
FIRST_BACKOFF = 10.0
MAX_BACKOFF = 300.0
POLL = 0.1


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodNetwork:
    """Pod addresses on the loopback interface, each added when a pod starts and removed when
    it is gone (and at exit)."""

    def __init__(self) -> None:
        # Clear of the control plane's service range (10.0.0.0/24).
        self.prefix = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
        self._free = list(range(2, 255))
        self._used: set[str] = set()
        self._lock = threading.Lock()
        atexit.register(self.release_all)

    @staticmethod
    def _ip(*args: str) -> None:
        result = subprocess.run(["ip", *args], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"`ip {' '.join(args)}` failed: {result.stderr.strip()} (pod addresses are added "
                "to the loopback interface, which needs root or CAP_NET_ADMIN)")

    def allocate(self) -> str:
        with self._lock:
            address = f"{self.prefix}.{self._free.pop(0)}"
            self._ip("addr", "add", f"{address}/32", "dev", "lo")
            self._used.add(address)
            return address

    def release(self, address: str) -> None:
        with self._lock:
            if address in self._used:
                self._used.discard(address)
                self._ip("addr", "del", f"{address}/32", "dev", "lo")

    def release_all(self) -> None:
        for address in list(self._used):
            self.release(address)


def write_volume(directory: Path, files: dict[str, bytes]) -> None:
    """A volume as the kubelet lays a ConfigMap or Secret out: the files in a timestamped
    directory, `..data` linking to it, and a link per file through `..data`."""
    stamp = directory / datetime.datetime.now().strftime("..%Y_%m_%d_%H_%M_%S.%f")
    for relative, content in files.items():
        path = stamp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    stamp.mkdir(parents=True, exist_ok=True)
    (directory / "..data").symlink_to(stamp.name)
    for top in {relative.split("/", 1)[0] for relative in files}:
        (directory / top).symlink_to(f"..data/{top}")


@dataclass
class Container:
    spec: dict
    process: Process | None = None
    restarts: int = 0
    ready: bool = False
    started: float = 0.0
    restart_at: float = 0.0
    backoff: float = 0.0
    probes_due: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)


@dataclass
class RunningPod:
    uid: str
    namespace: str
    name: str
    address: str
    started: str
    containers: dict[str, Container]
    reported: dict = field(default_factory=dict)


class ProcessKubelet:
    """Runs every bound pod whose container images it knows (`programs`: image repository ->
    binary); `runs(pod)` tells the fake kubelet which pods to leave to it."""

    def __init__(self, cp: ControlPlane, programs: dict[str, Path]):
        self.cp, self.programs = cp, programs
        self.network = PodNetwork()
        self.kube = Kube(cp.server, cp.ca_file, cert=cp.admin_cert)
        self.pods: dict[str, RunningPod] = {}
        # Pods being stopped, each by a thread of its own: a pod's grace period holds up no other.
        self.terminating: dict[str, tuple[str, threading.Thread]] = {}     # uid: (namespace, -)
        self.error: Exception | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-kubelet", daemon=True)
        self._thread.start()

    def runs(self, pod: dict) -> bool:
        return all(self._program(c) is not None for c in pod["spec"]["containers"])

    def _program(self, container: dict) -> Path | None:
        return self.programs.get(container["image"].rsplit(":", 1)[0])

    # the loop

    def _run(self) -> None:
        try:
            while not self._stopping.wait(POLL):
                listed = self.kube.request("GET", "/api/v1/pods",
                                           params={"fieldSelector": "spec.nodeName!="},
                                           what="list bound pods")["items"]
                seen = set()
                for pod in listed:
                    if self.runs(pod):
                        seen.add(pod["metadata"]["uid"])
                        with self._lock:
                            self._sync(pod)
                with self._lock:
                    for uid in [uid for uid in self.pods if uid not in seen]:
                        self._stop_pod(self.pods.pop(uid))
        except Exception as error:     # reported by check() and stop()
            self.error = error

    def _sync(self, pod: dict) -> None:
        meta = pod["metadata"]
        running = self.pods.get(meta["uid"])
        if meta.get("deletionTimestamp"):
            if meta["uid"] not in self.terminating:
                stopping = self.pods.pop(meta["uid"], None)
                thread = threading.Thread(target=self._terminate, args=(pod, stopping),
                                          name=f"terminate-{meta['name']}", daemon=True)
                self.terminating[meta["uid"]] = (meta["namespace"], thread)
                thread.start()
            return
        if running is None:
            if pod["status"].get("phase") not in (None, "Pending"):
                return          # ran under an earlier kubelet of this control plane
            running = self.pods[meta["uid"]] = self._start_pod(pod)
        now = time.monotonic()
        for container in running.containers.values():
            self._keep_running(running, container, now)
            self._probe(running, container, now)
        self._report(pod, running)

    # containers

    def _start_pod(self, pod: dict) -> RunningPod:
        meta = pod["metadata"]
        address = self.network.allocate()
        volumes = self._write_volumes(pod)
        running = RunningPod(meta["uid"], meta["namespace"], meta["name"], address, _now(), {})
        for spec in pod["spec"]["containers"]:
            container = running.containers[spec["name"]] = Container(spec)
            self._start(running, container, volumes)
        return running

    def _write_volumes(self, pod: dict) -> dict[str, Path]:
        meta = pod["metadata"]
        root = self.cp.dir / "pods" / meta["uid"] / "volumes"
        written = {}
        for volume in pod["spec"].get("volumes", []):
            directory = written[volume["name"]] = root / volume["name"]
            if "emptyDir" in volume:
                directory.mkdir(parents=True, exist_ok=True)
            else:
                write_volume(directory, self._volume_files(volume, meta["namespace"]))
        return written

    def _volume_files(self, volume: dict, namespace: str) -> dict[str, bytes]:
        if "configMap" in volume:
            source = volume["configMap"]
            obj = self.kube.get("v1", "ConfigMap", source["name"], namespace)
            data = {k: v.encode() for k, v in obj.get("data", {}).items()}
        elif "secret" in volume:
            source = volume["secret"]
            obj = self.kube.get("v1", "Secret", source["secretName"], namespace)
            data = {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
        else:
            raise AssertionError(f"volume {volume['name']}: only ConfigMap, Secret and emptyDir "
                                 "volumes can be run here")
        items = source.get("items")
        return {i["path"]: data[i["key"]] for i in items} if items else data

    def _command(self, running: RunningPod, container: Container,
                 volumes: dict[str, Path]) -> list[str]:
        mounts = {m["mountPath"]: str(volumes[m["name"]])
                  for m in container.spec.get("volumeMounts", [])}

        def localize(arg: str) -> str:
            for mount_path, local in mounts.items():
                arg = arg.replace(mount_path + "/", local + "/").replace(":" + mount_path,
                                                                         ":" + local)
                if arg == mount_path:
                    arg = local
            return arg.replace("0.0.0.0:", f"{running.address}:")

        program = self._program(container.spec)
        assert program is not None
        return [str(program), *(localize(a) for a in container.spec.get("command", [])[1:]
                                + container.spec.get("args", []))]

    def _start(self, running: RunningPod, container: Container,
               volumes: dict[str, Path] | None = None) -> None:
        if volumes is None:      # a restart: the volumes the pod started with
            root = self.cp.dir / "pods" / running.uid / "volumes"
            volumes = {path.name: path for path in root.iterdir()} if root.exists() else {}
        name = f"{running.namespace}.{running.name}.{container.spec['name']}.{container.restarts}"
        container.process = self.cp.start_process(name, self._command(running, container,
                                                                       volumes))
        container.started = time.monotonic()
        container.ready = False
        container.failures.clear()
        container.probes_due = {probe: container.started + container.spec[probe].get(
            "initialDelaySeconds", 0) for probe in ("readinessProbe", "livenessProbe")
            if probe in container.spec}

    def _keep_running(self, running: RunningPod, container: Container, now: float) -> None:
        process = container.process
        if process is not None and process.running():
            if now - container.started > 600:       # ran 10 minutes: the back-off resets
                container.backoff = 0.0
            return
        if process is not None:         # it exited: not ready, and restarted after a back-off
            container.process, container.ready = None, False
            container.restart_at = now + container.backoff
            container.backoff = min(max(container.backoff * 2, FIRST_BACKOFF), MAX_BACKOFF)
        if now >= container.restart_at:
            container.restarts += 1
            self._start(running, container)

    def _probe(self, running: RunningPod, container: Container, now: float) -> None:
        if container.process is None:
            return
        for kind, due in list(container.probes_due.items()):
            if now < due:
                continue
            probe = container.spec[kind]
            container.probes_due[kind] = now + probe.get("periodSeconds", 10)
            if self._probe_passes(running, container, probe):
                container.failures[kind] = 0
                if kind == "readinessProbe":
                    container.ready = True
                continue
            container.failures[kind] = container.failures.get(kind, 0) + 1
            if container.failures[kind] < probe.get("failureThreshold", 3):
                continue
            if kind == "readinessProbe":
                container.ready = False
            else:                       # a failed liveness probe restarts the container
                container.process.stop()

    def _probe_passes(self, running: RunningPod, container: Container, probe: dict) -> bool:
        check = probe["httpGet"]
        port = check["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in container.spec.get("ports", [])
                        if p.get("name") == port)
        url = f"{check.get('scheme', 'HTTP').lower()}://{running.address}:{port}{check['path']}"
        try:
            # Like the kubelet, it does not verify a serving certificate.
            response = requests.get(url, timeout=probe.get("timeoutSeconds", 1), verify=False)
        except requests.RequestException:
            return False
        return 200 <= response.status_code < 400

    # status

    @staticmethod
    def _condition(running: RunningPod, condition: str, status: bool) -> dict:
        """A condition as the kubelet reports it: its transition time moves only when its status
        does (a Deployment counts a pod available minReadySeconds after it turned ready)."""
        before = next((c for c in running.reported.get("conditions", [])
                       if c["type"] == condition and c["status"] == str(status)), None)
        since = before["lastTransitionTime"] if before else datetime.datetime.now(
            datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"type": condition, "status": str(status), "reason": "ProcessKubelet",
                "lastTransitionTime": since}

    def _report(self, pod: dict, running: RunningPod) -> None:
        containers = running.containers.values()
        ready = all(c.ready for c in containers)
        status = {
            "phase": "Running", "podIP": running.address, "podIPs": [{"ip": running.address}],
            "hostIP": running.address, "startTime": running.started,
            "conditions": [self._condition(running, condition, ready)
                           for condition in ("Initialized", "Ready", "ContainersReady")],
            "containerStatuses": [{
                "name": c.spec["name"], "image": c.spec["image"], "imageID": "",
                "ready": c.ready, "started": c.process is not None,
                "restartCount": c.restarts,
                "state": {"running": {"startedAt": running.started}} if c.process else
                         {"waiting": {"reason": "CrashLoopBackOff"}}} for c in containers],
        }
        if status == running.reported:
            return
        meta = pod["metadata"]
        try:
            self.kube.request("PATCH", self.kube.path("v1", "Pod", meta["namespace"],
                                                      meta["name"], "status"),
                              body={"status": status},
                              content_type="application/strategic-merge-patch+json",
                              what=f"report pod {meta['namespace']}/{meta['name']}")
            running.reported = status
        except ApiError as error:
            if error.status != 404:
                raise

    def _stop_pod(self, running: RunningPod, grace: float = 30) -> None:
        for container in running.containers.values():
            process = container.process
            if process is not None and process.running():
                os.killpg(process.pid, signal.SIGTERM)
                deadline = time.monotonic() + grace
                while process.running() and time.monotonic() < deadline:
                    time.sleep(0.05)
                process.stop()
        self.network.release(running.address)

    def _terminate(self, pod: dict, running: RunningPod | None) -> None:
        """Stop a deleted pod's containers within its grace period, then remove the pod."""
        try:
            if running is not None:
                self._stop_pod(running, grace=pod["spec"].get("terminationGracePeriodSeconds",
                                                              30))
            self._remove(pod)
        except Exception as error:     # reported by check() and stop()
            self.error = error
        finally:
            with self._lock:
                self.terminating.pop(pod["metadata"]["uid"], None)

    def _remove(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.kube.request("DELETE", self.kube.path("v1", "Pod", meta["namespace"],
                                                       meta["name"]),
                              body={"gracePeriodSeconds": 0,
                                    "preconditions": {"uid": meta["uid"]}},
                              what=f"remove pod {meta['namespace']}/{meta['name']}")
        except ApiError as error:
            if error.status not in (404, 409):
                raise

    # for the tests

    def pods_of(self, namespace: str, match: Callable[[str], bool] = lambda name: True
                ) -> list[RunningPod]:
        with self._lock:
            return [p for p in self.pods.values() if p.namespace == namespace and match(p.name)]

    def terminating_in(self, namespace: str) -> int:
        """How many pods of the namespace are still stopping (in their grace period)."""
        with self._lock:
            return sum(ns == namespace for ns, _ in self.terminating.values())

    def kill(self, running: RunningPod, container: str) -> None:
        """Kill a container's process at once, as the kernel's OOM killer does."""
        with self._lock:
            process = running.containers[container].process
            if process is not None and process.running():
                os.killpg(process.pid, signal.SIGKILL)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the process kubelet stopped: {self.error}") from self.error

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)
        for _, thread in list(self.terminating.values()):
            thread.join(timeout=60)
        with self._lock:
            for running in self.pods.values():
                self._stop_pod(running, grace=0)
            self.pods.clear()
        self.network.release_all()
        self.kube.session.close()
        self.check()
