"""A team's Kueue workload put back in its queue whole, as the runs that take GPUs back do
(idle reclaim, fault remediation): the Workload that holds a pod is found up the pod's chain of
controllers, deactivated (`spec.active: false`) so that Kueue stops every pod of it and frees
its quota, and activated again once Kueue has, so that it is queued again and admitted where
the quota has room. A gang restarts whole instead of hanging on the pods that were taken.

Standard library only: it ships in a run's ConfigMap beside the run's module."""

from __future__ import annotations

import time
from typing import TypedDict

from components.base.kube_api import Api, format_time

# Owners followed up from a pod's controller to find its Workload: a TrainJob's pod is its
# JobSet's Job's, two hops above the Job.
MAX_OWNER_HOPS = 2


class Requeue(TypedDict):
    """What putting workloads back needs (part of a run's config.json)."""

    teamNamespaces: list[str]       # where a pod Kueue admitted goes back to its queue
    workloadsApi: str
    ownerResources: dict[str, str]  # `<group>/<kind>` of a workload's owner: its resource
    requeuedAnnotation: str         # on a Workload taken off its queue until put back: when
    requeueWaitSeconds: int


def controller(pod: dict) -> dict | None:
    """The pod's controller (its owner reference with `controller: true`), if any."""
    return next((ref for ref in pod["metadata"].get("ownerReferences") or []
                 if ref.get("controller")), None)


def condition_true(obj: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def kueue_workload(api: Api, config: Requeue, pod: dict) -> dict | None:
    """The Kueue Workload that holds a team pod's GPUs and can go back to its queue: the one
    owned by an object up the pod's chain of controllers (its Job; a JobSet's Job and the
    JobSet; a TrainJob's JobSet; a RayJob's RayCluster...), followed through the kinds of
    `ownerResources` only. None for a pod no such Workload holds, one whose owner has several
    Workloads (a LeaderWorkerSet's groups), or one that owns its Workload itself (Kueue's pod
    integration: a bare pod, a Deployment's): such a pod is evicted as any pod, and Kueue ends
    its Workload with it (deactivated, the Workload would go with the pod it belongs to, with
    nothing left to queue again)."""
    meta = pod["metadata"]
    if meta["namespace"] not in config["teamNamespaces"]:
        return None
    owned: dict[str, list[dict]] = {}
    for workload in workloads(api, config, meta["namespace"]):
        for ref in workload["metadata"].get("ownerReferences") or []:
            owned.setdefault(ref.get("uid"), []).append(workload)
    if not owned:
        return None
    if meta.get("uid") in owned:
        return None
    owner = controller(pod)
    # The pod's controller, then up to MAX_OWNER_HOPS owners above that.
    for hop in range(MAX_OWNER_HOPS + 1):
        if owner is None:
            return None
        if (uid := owner.get("uid")) in owned:
            return owned[uid][0] if len(owned[uid]) == 1 else None
        owner = controller_of(api, config, meta["namespace"], owner) \
            if hop < MAX_OWNER_HOPS else None
    return None


def controller_of(api: Api, config: Requeue, namespace: str, ref: dict) -> dict | None:
    """The controller of the object an owner reference names, where it is of a kind in
    `ownerResources` and still there."""
    group = ref.get("apiVersion", "").rpartition("/")[0]
    resource = config["ownerResources"].get(f"{group}/{ref.get('kind')}")
    if resource is None:
        return None
    root = "/apis" if group else "/api"
    path = f"{root}/{ref['apiVersion']}/namespaces/{namespace}/{resource}/{ref['name']}"
    status, obj = api.call("GET", path)
    if status == 404:
        return None
    if status >= 300:
        raise RuntimeError(f"GET {path}: {status} {obj.get('message', obj)}")
    return controller(obj)


def workloads(api: Api, config: Requeue, namespace: str) -> list[dict]:
    """The namespace's Kueue Workloads; none where the API server serves none (no Kueue)."""
    status, listed = api.call("GET", f"{config['workloadsApi']}/namespaces/{namespace}/workloads")
    if status == 404:
        return []
    if status >= 300:
        raise RuntimeError(f"listing Workloads in {namespace}: {status} "
                           f"{listed.get('message', listed)}")
    return listed["items"]


def workload_path(config: Requeue, workload: dict) -> str:
    meta = workload["metadata"]
    return f"{config['workloadsApi']}/namespaces/{meta['namespace']}/workloads/{meta['name']}"


def put_back(api: Api, config: Requeue, workload: dict) -> None:
    """Back in its queue: Kueue admits it again when the quota has room."""
    api.ok("PATCH", workload_path(config, workload), {
        "metadata": {"annotations": {config["requeuedAnnotation"]: None}},
        "spec": {"active": True}}, "application/merge-patch+json")


def requeue(api: Api, config: Requeue, workload: dict, now: float) -> bool:
    """Takes the Workload off its queue (Kueue then stops it and frees its quota) and, once
    Kueue has, puts it back; False if Kueue had not within the run's wait, when the next run
    puts it back (put_back_left)."""
    path = workload_path(config, workload)
    api.ok("PATCH", path, {"metadata": {"annotations": {
        config["requeuedAnnotation"]: format_time(now)}}, "spec": {"active": False}},
        "application/merge-patch+json")
    deadline = time.monotonic() + config["requeueWaitSeconds"]
    while True:
        status, current = api.call("GET", path)
        if status == 404:
            return True         # removed meanwhile (its owner deleted): nothing to put back
        if status >= 300:
            raise RuntimeError(f"GET {path}: {status} {current.get('message', current)}")
        if not condition_true(current, "QuotaReserved"):
            break
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    put_back(api, config, workload)
    return True


def put_back_left(api: Api, config: Requeue) -> list[str]:
    """The Workloads an earlier run took off their queue and did not put back, once Kueue has
    freed their quota."""
    done = []
    for namespace in config["teamNamespaces"]:
        for workload in workloads(api, config, namespace):
            meta = workload["metadata"]
            if (config["requeuedAnnotation"] in (meta.get("annotations") or {})
                    and not condition_true(workload, "QuotaReserved")):
                put_back(api, config, workload)
                done.append(f"{namespace}/{meta['name']}")
    return done
