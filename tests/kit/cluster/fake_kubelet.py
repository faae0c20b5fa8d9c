"""What the kubelets of the fake nodes would do, so that workloads run their course: pods bound to a
node reported Running, pods being deleted reported Failed and removed, a Job's pods ended as its
containers exiting 0 would (FakeKubelet, and the contexts that run it with the workload
controllers); and what tests then do with running workloads: count, spread and cordon."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager

from components.base.facts import GPU_RESOURCE
from components.base.gpu_count import pod_gpus
from components.platform.settings import StackSettings
from tests.kit.cluster.controlplane import ApiError, ControlPlane, Kube, wait_until
from tests.kit.cluster.kube_components import ControllerManager
from tests.kit.cluster.nodes_and_pods import create_gpu_node, ensure_namespace, pod_template

# How long deploy_on_nodes lets a cordon reach the scheduler before it scales (see there).
CORDON_HEAD_START_SECONDS = 1.0


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
        # kube-scheduler learns of the cordon through its node informer and of the new pods
        # through another, and cannot be asked what it has seen: the cordon gets a head start
        # (without it, about one setup in ten under load put a replica on a cordoned node).
        time.sleep(CORDON_HEAD_START_SECONDS)
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
            used[node] += pod_gpus(pod, GPU_RESOURCE)
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

