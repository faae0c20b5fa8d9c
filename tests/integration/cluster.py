"""What the integration suite puts on the local control plane: the program's declared objects
(with real certificates in place of the mocks' placeholders), fake GPU nodes, GPU pods, real
kube-schedulers started from a KubeSchedulerConfiguration, a real kube-controller-manager, and a
fake kubelet that runs the pods."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

import harness
import tools
from components import binpack_scheduler, gpu_compaction, gpu_operator, opa_admission
from components.base.facts import GPU_PRESENT_LABEL
from components.base.manifests import base64_text
from components.binpack_scheduler.settings import SchedulerSettings
from components.gpu_operator.dra import NVIDIA_DRA_DRIVER
from components.opa_admission.inputs import OpaAdmissionInputs
from components.platform.settings import StackSettings
from controlplane import ApiError, CertificateAuthority, ControlPlane, Kube, free_port, wait_until
from harness import operator_of

GPU = "nvidia.com/gpu"
TEST_MANAGER = "gpu-platform-integration"
# Registered only once what they call is ready, as the program orders them.
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
NODE_PATCH_TYPE = "kubernetes:core/v1:NodePatch"
# API groups whose CustomResourceDefinitions come with a chart (which cannot be fetched here).
CHART_CRD_GROUPS = {"monitoring.coreos.com": "kube-prometheus-stack (Prometheus Operator CRDs)",
                    "nvidia.com": "gpu-operator",
                    # Applied with Kueue running by test_teams.py.
                    "kueue.x-k8s.io": "kueue"}


@dataclass
class Declared:
    """The example stack's objects as `pulumi up` would send them."""
    objects: list[dict]          # created or applied as they are
    node_patches: list[dict]     # server-side-apply patches of existing Nodes
    charts: list[str]            # Helm releases: rendered by Helm at deploy time
    field_manager: str           # of the node patches
    force_node_patches: bool


class TestCertificates:
    """A CA and an OPA serving certificate made for the test, in place of pulumi-tls' outputs,
    valid for the OPA Service's names and for 127.0.0.1, where the test runs OPA."""

    def __init__(self, admission: OpaAdmissionInputs):
        self.ca = CertificateAuthority("gpu-platform admission test CA")
        self.server = self.ca.issue("opa", server=True,
                                    dns_names=tuple(opa_admission.service_dns_names(admission)),
                                    ip_addresses=("127.0.0.1",))

    def replacements(self) -> dict[str, str]:
        real = {harness.FAKE_CA_PEM: self.ca.cert_pem,
                harness.FAKE_SERVER_PEM: self.server.cert_pem,
                harness.FAKE_KEY_PEM: self.server.key_pem}
        return real | {base64_text(fake): base64_text(value) for fake, value in real.items()}


def declared(recording: harness.Recording, certs: TestCertificates) -> Declared:
    objects, patches, field_manager, force = [], [], "", False
    for registration in recording.registrations:
        if not registration.type.startswith("kubernetes:") or "helm.sh" in registration.type:
            continue
        replacements = certs.replacements()
        obj = harness.map_leaves(harness.integral_numbers(registration.inputs),
                                 lambda v, known=replacements:
                                 known.get(v, v) if isinstance(v, str) else v)
        if registration.type == NODE_PATCH_TYPE:
            annotations = obj["metadata"].pop("annotations")
            field_manager = annotations.pop("pulumi.com/patchFieldManager")
            force = annotations.pop("pulumi.com/patchForce", "false") == "true"
            if annotations:
                obj["metadata"]["annotations"] = annotations
            patches.append(obj)
        else:
            objects.append(obj)
    # Namespaces first, as the declared dependencies order them on a real `pulumi up`.
    objects.sort(key=lambda o: o["kind"] != "Namespace")
    charts = [r.name for r in recording.of_type("kubernetes:helm.sh/v3:Release")]
    return Declared(objects, patches, charts, field_manager, force)


def apply_declared(kube: Kube, objects: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """Server-side apply every object the API server serves; the rest are returned as skipped,
    with the chart whose CRDs they need (an unknown kind is an error), and so is the webhook
    reachability probe when the API server refuses it because it cannot reach OPA (with the
    refusal: where no OPA runs, that is the probe doing its job)."""
    applied, skipped = [], {}
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        name = f"{obj['kind']} {obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        if not kube.serves(obj["apiVersion"], obj["kind"]):
            if group not in CHART_CRD_GROUPS:
                raise AssertionError(f"{obj['apiVersion']} {obj['kind']} is served by no API "
                                     f"server or chart the platform installs")
            skipped[name] = (f"custom resource; its CRD comes with the "
                             f"{CHART_CRD_GROUPS[group]} chart")
            continue
        try:
            applied.append(kube.apply(obj, TEST_MANAGER))
        except ApiError as error:
            if not (obj["kind"] == "ConfigMap"
                    and obj["metadata"]["name"] == opa_admission.REACHABILITY_PROBE
                    and error.status == 500 and "failed calling webhook" in error.message):
                raise
            skipped[name] = f"refused: {error.message}"
    return applied, skipped


def stored_differences(declared: dict, stored: Any, path: str = "") -> list[str]:
    """Where what the API server stores differs from what the program declares: every value
    the program sets, compared as stored (the API server, its defaulting and a webhook may add
    fields, and leave out one at its zero value, and those are not differences; a number
    stored as a string is). A Secret's
    `stringData` is compared with its `data`, where the API server keeps it, encoded."""
    if isinstance(declared, dict):
        if not isinstance(stored, dict):
            return [f"{path or '.'}: declared {declared!r}, stored {stored!r}"]
        differences = []
        for key, value in declared.items():
            if key == "stringData" and path == "":
                encoded = {k: base64.b64encode(v.encode()).decode() for k, v in value.items()}
                differences += stored_differences(encoded, stored.get("data"), ".data")
                continue
            if key not in stored:
                # The API server leaves out a field at its zero value (`omitempty`).
                if value not in (False, 0, "", [], {}, None):
                    differences.append(f"{path}.{key}: declared {value!r}, not stored")
                continue
            differences += stored_differences(value, stored[key], f"{path}.{key}")
        return differences
    if isinstance(declared, list):
        if not isinstance(stored, list) or len(stored) != len(declared):
            return [f"{path}: declared {declared!r}, stored {stored!r}"]
        return [d for index, (a, b) in enumerate(zip(declared, stored, strict=True))
                for d in stored_differences(a, b, f"{path}[{index}]")]
    if declared != stored or type(declared) is not type(stored):
        return [f"{path}: declared {declared!r} ({type(declared).__name__}), stored {stored!r} "
                f"({type(stored).__name__})"]
    return []


def read_back_differences(kube: Kube, objects: list[dict]) -> dict[str, list[str]]:
    """For each object, as the API server now stores it, where it differs from `objects`."""
    found = {}
    for obj in objects:
        meta = obj["metadata"]
        stored = kube.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        if differences := stored_differences(obj, stored):
            found[f"{obj['kind']} {meta.get('namespace')}/{meta['name']}"] = differences
    return found


def find(objects: list[dict], kind: str, name: str) -> dict:
    """The one declared object of `kind` named `name`, or of OPA's generation named after it
    (`<name>-<generation>`)."""
    def named(actual: str) -> bool:
        return actual == name or re.fullmatch(rf"{re.escape(name)}-g[0-9a-f]{{9}}",
                                               actual) is not None
    found = [o for o in objects if o["kind"] == kind and named(o["metadata"]["name"])]
    assert len(found) == 1, f"expected one declared {kind} {name}, found {len(found)}"
    return copy.deepcopy(found[0])


# --- fake GPU nodes and GPU pods ------------------------------------------------------------

# Per GPU, what a typical GPU node offers besides: CPU cores and memory.
CPU_PER_GPU = 8
MEMORY_GIB_PER_GPU = 64
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def mark_ready(kube: Kube, node: dict, capacity: dict[str, str]) -> dict:
    """What a kubelet and the node lifecycle controller do for a new node: report its capacity
    and a Ready condition, then lift the not-ready taint the API server put on at creation."""
    reported = kube.patch_status(node, {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "fake node: no kubelet"}],
    })
    taints = [t for t in reported["spec"].get("taints", []) if t["key"] != NOT_READY_TAINT]
    return kube.request("PATCH", kube.path("v1", "Node", name=node["metadata"]["name"]),
                        body={"spec": {"taints": taints or None}},
                        content_type="application/merge-patch+json",
                        params={"fieldManager": "node-lifecycle-controller"},
                        what=f"lift the not-ready taint of {node['metadata']['name']}")


def create_node(kube: Kube, name: str) -> dict:
    return mark_ready(kube, kube.create({"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": name}}),
                      {"cpu": "16", "memory": "64Gi", "pods": "110"})


def create_gpu_node(kube: Kube, settings: StackSettings, name: str, gpus: int,
                    capacity: dict[str, str] | None = None,
                    labels: dict[str, str] | None = None) -> dict:
    """A Ready Node that advertises `gpus` GPUs in its status (the extended-resource patch the
    device plugin's kubelet would make) and carries the platform's GPU taints and labels, GPU
    Feature Discovery's nvidia.com/gpu.present=true and `labels` (as GPU Feature Discovery adds
    them); `capacity`, if given, is its whole status capacity instead."""
    node = kube.create({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1],
                                              **settings.gpu_nodes.labels, **(labels or {})}},
        "spec": {"taints": [t.as_manifest() for t in settings.gpu_nodes.taints]},
    })
    return mark_ready(kube, node, capacity or {
        GPU: str(gpus), "cpu": str(gpus * CPU_PER_GPU),
        "memory": f"{gpus * MEMORY_GIB_PER_GPU}Gi", "pods": "110"})


def nvidia_resource_slice(node: str, gpus: int, product: str = "NVIDIA H100 80GB HBM3") -> dict:
    """A ResourceSlice as NVIDIA's DRA driver (v0.5.0, as GPU Operator v26.7.0 runs it)
    publishes a node's whole GPUs: one pool named after the node, in one slice, each GPU
    `gpu-<minor>` with the driver's attributes and its memory. Values are made up; the shape,
    names and types are the driver's."""
    def device(minor: int) -> dict:
        return {"name": f"gpu-{minor}", "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{node}-{minor:04d}"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "595.91.7"},
            "cudaDriverVersion": {"version": "13.2.0"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + minor:02x}:00.0"}},
            "capacity": {"memory": {"value": "81559Mi"}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"00000-{NVIDIA_DRA_DRIVER}-{node}"},
            "spec": {"driver": NVIDIA_DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [device(minor) for minor in range(gpus)]}}


def create_dra_gpu_node(kube: Kube, settings: StackSettings, name: str, gpus: int,
                        driver: Kube) -> dict:
    """A Ready GPU node of the DRA path: the platform's GPU taints and labels, CPU and memory
    but no GPU in its status, and its GPUs in a ResourceSlice that `driver` (NVIDIA's driver's
    identity) publishes."""
    node = create_gpu_node(kube, settings, name, gpus, capacity={
        "cpu": str(gpus * CPU_PER_GPU), "memory": f"{gpus * MEMORY_GIB_PER_GPU}Gi",
        "pods": "110"})
    driver.create(nvidia_resource_slice(name, gpus))
    return node


def pod(name: str, namespace: str, **spec: Any) -> dict:
    """A pod whose requests scale with its GPUs (CPU and memory as a GPU job asks for them);
    with GPUs it tolerates the GPU taints. `spec`: the arguments of `pod_spec`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": pod_spec(**spec)}


def pod_template(labels: dict[str, str], **spec: Any) -> dict:
    """The pod of `pod` as a workload's template: labelled for its selector, named by its
    controller."""
    return {"metadata": {"labels": labels}, "spec": pod_spec(**spec)}


# A Job whose pods checkpoint and resume: a pod that an eviction ends (the API server marks it
# with the DisruptionTarget condition) is replaced without counting against backoffLimit, which
# is what makes a batch Job safe to opt in to compaction (docs/concepts/compaction.md).
RESUME_AFTER_EVICTION = {"rules": [{"action": "Ignore",
                                    "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def job(name: str, namespace: str, template: dict, *, resumes_after_eviction: bool = False,
        **spec: Any) -> dict:
    """A Job of `template`'s pods that is not retried on failure (`spec`: further Job spec
    fields, such as completions and parallelism)."""
    template["spec"]["restartPolicy"] = "Never"
    spec = {"backoffLimit": 0, **spec, "template": template}
    if resumes_after_eviction:
        spec["podFailurePolicy"] = RESUME_AFTER_EVICTION
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pod_spec(*, gpus: int = 0, scheduler: str | None = None,
             settings: StackSettings | None = None, cpu: str | None = None,
             memory: str | None = None, node_name: str | None = None) -> dict:
    requests_ = {"cpu": cpu or (f"{gpus * CPU_PER_GPU // 2}" if gpus else "100m"),
                 "memory": memory or (f"{gpus * MEMORY_GIB_PER_GPU // 2}Gi" if gpus else "128Mi")}
    limits = {}
    if gpus:
        requests_[GPU] = limits[GPU] = str(gpus)
    spec: dict = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                  "resources": {"requests": requests_,
                                                **({"limits": limits} if limits else {})}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if gpus and settings is not None:
        spec["tolerations"] = gpu_operator.gpu_node_tolerations(operator_of(settings))
    if node_name:
        spec["nodeName"] = node_name
    return spec


def placement(kube: Kube, namespace: str, name: str, timeout: float = 30.0,
              poll: float = 0.1) -> str | None:
    """The node the pod was bound to, or None once its scheduler reports it unschedulable."""
    def decided():
        current = kube.get("v1", "Pod", name, namespace)
        if current["spec"].get("nodeName"):
            return ("bound", current["spec"]["nodeName"])
        for condition in current.get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return ("unschedulable", None)
        return None
    return wait_until(decided, f"pod {namespace}/{name} to be bound or found unschedulable",
                      timeout=timeout, interval=poll)[1]


def ensure_namespace(kube: Kube, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
               TEST_MANAGER)


# --- kube-scheduler -------------------------------------------------------------------------

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
        self.reply: requests.Response | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stopped.is_set():
            try:
                with self.session.get(
                        f"{self.kube.server}{self.pods}",
                        params={"watch": "true", "resourceVersion": self.resource_version,
                                "timeoutSeconds": "300"}, stream=True, timeout=(5, 330)) as reply:
                    self.reply = reply
                    for line in reply.iter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"pod watch failed: {event['object']}")
                        self.resource_version = event["object"]["metadata"]["resourceVersion"]
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
            return None

    def stop(self) -> None:
        """End the stream (an open watch would hold the API server's shutdown up)."""
        self.stopped.set()
        if self.reply is not None and self.reply.raw.connection is not None:
            self.reply.raw.connection.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)
        self.session.close()


# --- what kubelets would do ------------------------------------------------------------------

def pod_status(phase: str, *, ready: bool, reason: str) -> dict:
    """A status as a kubelet reports it; a running pod with its start time (which the
    descheduler's minPodAge reads)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"phase": phase, "conditions": [
        {"type": condition, "status": str(ready), "reason": reason, "lastTransitionTime": now}
        for condition in ("Ready", "ContainersReady")]}
    if phase == "Running":
        status["startTime"] = now
    return status


def patch_pod_status(kube: Kube, pod: dict, status: dict, *,
                     resource_version: str | None = None) -> None:
    """A strategic merge patch: conditions merge by type, so PodScheduled stays. With
    `resource_version`, only if the pod has not changed since (else HTTP 409)."""
    meta = pod["metadata"]
    body: dict = {"status": status}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    kube.request("PATCH", kube.path("v1", "Pod", meta["namespace"], meta["name"], "status"),
                 body=body, content_type="application/strategic-merge-patch+json",
                 what=f"set pod {meta['namespace']}/{meta['name']} {status['phase']}")


def running_pods(kube: Kube, namespace: str, app: str | None = None) -> list[dict]:
    """The namespace's pods (labelled app=`app`, if given) that run and are not being
    deleted."""
    params = {"labelSelector": f"app={app}"} if app else {}
    return [p for p in kube.list("v1", "Pod", namespace, **params)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def settled(kube: Kube, namespace: str, app: str, count: int) -> bool:
    """Whether `app` has exactly `count` pods and all of them run: evicted pods are gone, not
    only replaced (a pod being deleted still holds its GPUs)."""
    pods = kube.list("v1", "Pod", namespace, labelSelector=f"app={app}")
    return len(pods) == count and len(running_pods(kube, namespace, app)) == count


def deploy_on_nodes(kube: Kube, settings: StackSettings, namespace: str, nodes: Iterable[str],
                    name: str, replicas_by_node: dict[str, int], opt_in: bool,
                    gpus: int = 1) -> None:
    """A Deployment of `gpus`-GPU replicas for the binpack scheduler, `replicas_by_node[n]` of them
    on node n (opted in to compaction if `opt_in`): scaled up one node at a time with every
    other of `nodes` cordoned, the way churn leaves replicas where the scheduler would not put
    them now."""
    nodes = list(nodes)
    labels = {"app": name, **(settings.compaction.opt_in if opt_in else {})}
    template = pod_template(labels, gpus=gpus, scheduler=settings.scheduler.name,
                            settings=settings)
    template["spec"]["terminationGracePeriodSeconds"] = 0
    kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": name, "namespace": namespace},
                 "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                          "template": template}})
    total = 0
    for node, count in replicas_by_node.items():
        cordon(kube, [n for n in nodes if n != node], True)
        total += count
        kube.merge_patch("apps/v1", "Deployment", name, {"spec": {"replicas": total}},
                         namespace, "scale", what=f"scale {name}")
        wait_until(lambda total=total: len(running_pods(kube, namespace, name)) == total,
                   f"{total} running replicas of {name}", timeout=60)
        cordon(kube, nodes, False)


def gpus_used(kube: Kube, namespace: str, nodes: Iterable[str]) -> dict[str, int]:
    """GPUs requested on each of `nodes` by the namespace's pods that have not ended."""
    used = dict.fromkeys(nodes, 0)
    for pod in kube.list("v1", "Pod", namespace):
        node = pod["spec"].get("nodeName")
        if node in used and pod["status"].get("phase") in ("Pending", "Running"):
            used[node] += int(pod["spec"]["containers"][0]["resources"]["requests"]
                              ["nvidia.com/gpu"])
    return used


def cordon(kube: Kube, nodes: Iterable[str], unschedulable: bool) -> None:
    """Mark `nodes` unschedulable (or schedulable again), as `kubectl cordon` does."""
    for node in nodes:
        kube.merge_patch("v1", "Node", node, {"spec": {"unschedulable": unschedulable or None}},
                         what=f"cordon {node}")


def remove_deleted_pod(kube: Kube, pod: dict) -> None:
    """What a kubelet does once it has stopped the containers of a pod being deleted: report it
    Failed (unless it had already ended; a Job's pod failure policy is judged on that), then
    remove it. The removal names the pod's uid, so a pod recreated under the same name stays;
    a pod already gone, or changed meanwhile, is left alone."""
    meta = pod["metadata"]
    try:
        if pod["status"].get("phase") not in ("Succeeded", "Failed"):
            patch_pod_status(kube, pod, {"phase": "Failed"})
        kube.request("DELETE", kube.path("v1", "Pod", meta["namespace"], meta["name"]),
                     body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
                     what=f"remove pod {meta['namespace']}/{meta['name']}")
    except ApiError as error:
        if error.status not in (404, 409):
            raise


def succeed(kube: Kube, pod: dict) -> None:
    """End a pod as its containers exiting 0 would: what a Job counts as a completion."""
    patch_pod_status(kube, pod, pod_status("Succeeded", ready=False, reason="PodCompleted"))


class FakeKubelet:
    """What the kubelets of the fake nodes would do, so that workloads run their course: a pod
    bound to a node is reported Running and Ready (so a StatefulSet goes on to its next pod and a
    Deployment counts it available), and a pod being deleted gracefully (a controller scaling
    down, the garbage collector, an eviction, a test) is reported Failed and removed at once, as
    a kubelet does once its containers have stopped. `succeed` ends a pod as its containers
    exiting 0 would.

    A thread of this process that lists the bound pods every POLL seconds. Simpler than kwok (a
    second Go binary to build, configure and stop) and than a watch (resource versions to track,
    an expired or broken stream to resume, a blocking read to interrupt when stopping): each
    list is the whole current state, so nothing is missed for good, and stopping is setting an
    event. With the tens of pods these tests run, a list costs milliseconds. Each write names
    the resourceVersion or uid it was decided on, so a decision taken on an old list never
    overwrites a newer status or deletes a pod recreated under the same name (StatefulSets).
    """

    POLL = 0.1

    def __init__(self, cp: ControlPlane, leave_out: Callable[[dict], bool] = lambda pod: False):
        """`leave_out`: pods another kubelet runs (kubelet.ProcessKubelet.runs)."""
        # A client of its own: the caller's session is not to be shared with another thread.
        self.kube = Kube(cp.server, cp.ca_file, cert=cp.admin_cert)
        self.leave_out = leave_out
        self.error: Exception | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.POLL):
                for pod in self.kube.request("GET", "/api/v1/pods",
                                             params={"fieldSelector": "spec.nodeName!="},
                                             what="list bound pods")["items"]:
                    if not self.leave_out(pod):
                        self._sync(pod)
        except Exception as error:     # reported by check() and stop()
            self.error = error

    def _sync(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            if meta.get("deletionTimestamp"):
                remove_deleted_pod(self.kube, pod)
            elif pod["status"].get("phase") == "Pending":
                patch_pod_status(self.kube, pod,
                                 pod_status("Running", ready=True, reason="FakeKubelet"),
                                 resource_version=meta["resourceVersion"])
        except ApiError as error:
            if error.status not in (404, 409):     # gone, or changed since it was listed
                raise

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the fake kubelet stopped: {self.error}") from self.error

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            raise RuntimeError("the fake kubelet's thread did not stop within 10 s")
        self.kube.session.close()
        self.check()


@contextmanager
def workloads_running(cp: ControlPlane, leave_out: Callable[[dict], bool] = lambda pod: False,
                      controllers: tuple[str, ...] = ()):
    """Controllers that create and remove workload pods (and `controllers`), and a fake
    kubelet that runs them (but those `leave_out` names); yields the kubelet."""
    manager = ControllerManager(cp, controllers)
    kubelet = FakeKubelet(cp, leave_out)
    try:
        yield kubelet
    finally:
        kubelet.stop()
        manager.stop()


@contextmanager
def gpu_workloads(cp: ControlPlane, settings: StackSettings, namespace: str,
                  nodes: Iterable[str], gpus: int = 8):
    """A namespace for workloads, GPU nodes of `gpus` GPUs, and the controllers and fake kubelet
    that run the workloads (see `workloads_running`)."""
    ensure_namespace(cp.admin, namespace)
    for name in nodes:
        create_gpu_node(cp.admin, settings, name, gpus)
    with workloads_running(cp) as kubelet:
        yield kubelet


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


# --- the descheduler -------------------------------------------------------------------------

def descheduler_command(args: list[str], kubeconfig) -> list[str]:
    """The descheduler built from its module, with `args`, as a client of `kubeconfig`. Its
    health port (10258 in the pod) is not served here, so runs cannot collide."""
    return [str(tools.descheduler()), *args, f"--kubeconfig={kubeconfig}", "--secure-port=0"]


def compaction_run(cp: ControlPlane, settings: StackSettings, objects: list[dict],
                   policy: dict | None = None) -> str:
    """One run of the declared compaction CronJob's pod, as the kubelet would run it: the plan
    init container (when declared) with Python, then the descheduler container, each with its
    flags, the declared ConfigMap's files (its policy replaced by `policy` if given) and the
    ServiceAccount's credentials. Waits until the run ends; returns the plan's and the
    descheduler's logs."""
    compaction = settings.compaction
    cron_job = find(objects, "CronJob", compaction.name)
    job = {"metadata": cron_job["metadata"], "spec": cron_job["spec"]["jobTemplate"]["spec"]}
    token = cp.service_account_token(compaction.namespace, compaction.name)
    containers = [LocalContainer(cp, objects, job, c["name"], ports={})
                  for c in job["spec"]["template"]["spec"].get("initContainers", [])]
    descheduler = LocalContainer(cp, objects, job, "descheduler", ports={})
    if policy is not None:
        for container in (*containers, descheduler):
            policy_dir = container.mounts.get(gpu_compaction.POLICY_DIR)
            if policy_dir:
                Path(policy_dir, gpu_compaction.POLICY_FILE).write_text(json.dumps(policy))
    log = ""
    token_file = cp.write(f"volumes/{compaction.name}/token", token)
    for plan in containers:
        run = subprocess.run([sys.executable, *plan.args()[1:], f"--server={cp.server}",
                              f"--token-file={token_file}", f"--ca-file={cp.ca_file}"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"the compaction plan failed\n{run.stderr}"
        log += run.stdout
    process = cp.start_process(f"descheduler-{len(cp.processes)}", descheduler_command(
        descheduler.args()[1:], cp.kubeconfig(compaction.name, token=token)))
    wait_until(lambda: not process.running(), "the compaction run to end", timeout=120,
               explain=process.tail)
    assert process.exit_code == 0, f"the compaction run failed\n{process.tail(60)}"
    return log + process.log.read_text(errors="replace")


# --- running a declared container on this machine -------------------------------------------

class LocalContainer:
    """A container of a declared Deployment, run as a local process the way the kubelet would
    start it: its Secret and ConfigMap volumes written to directories, its flags given with the
    mount paths pointing there and its listening ports moved to free loopback ports."""

    def __init__(self, cp: ControlPlane, objects: list[dict], deployment: dict, container: str,
                 ports: dict[int, int]):
        pod_spec = deployment["spec"]["template"]["spec"]
        self.spec = next(c for c in pod_spec.get("initContainers", []) + pod_spec["containers"]
                         if c["name"] == container)
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        namespace = deployment["metadata"]["namespace"]
        self.mounts: dict[str, str] = {}
        for mount in self.spec.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "emptyDir" in volume:    # shared by the pod's containers, as in a pod
                local = cp.dir / "volumes" / deployment["metadata"]["name"] / mount["name"]
                local.mkdir(parents=True, exist_ok=True)
            else:
                local = cp.dir / "volumes" / container / mount["name"]
                for key, text in _volume_files(objects, volume, namespace).items():
                    cp.write(str((local / key).relative_to(cp.dir)), text)
            self.mounts[mount["mountPath"]] = str(local)
        self.ports = ports

    def localize(self, arg: str) -> str:
        for mount_path, local in self.mounts.items():
            arg = arg.replace(mount_path + "/", local + "/").replace(
                ":" + mount_path, ":" + local)
            if arg == mount_path:
                arg = local
        for port, local_port in self.ports.items():
            for host in ("0.0.0.0", "127.0.0.1"):
                arg = arg.replace(f"{host}:{port}", f"127.0.0.1:{local_port}")
        return arg

    def args(self) -> list[str]:
        return [self.localize(a) for a in self.spec.get("command", []) + self.spec.get("args", [])]


def _volume_files(objects: list[dict], volume: dict, namespace: str) -> dict[str, str]:
    if "secret" in volume:
        source = volume["secret"]
        obj = find(objects, "Secret", source["secretName"])
        data = dict(obj.get("stringData", {}))
        data |= {k: base64.b64decode(v).decode() for k, v in obj.get("data", {}).items()}
    elif "configMap" in volume:
        source = volume["configMap"]
        obj = find(objects, "ConfigMap", source["name"])
        data = dict(obj.get("data", {}))
    else:
        raise AssertionError(f"volume {volume['name']}: only Secret and ConfigMap volumes can be "
                             f"run locally")
    assert obj["metadata"]["namespace"] == namespace
    items = source.get("items")
    return {i["path"]: data[i["key"]] for i in items} if items else data
