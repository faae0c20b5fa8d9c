"""Who holds which GPUs, read from the objects the API server lists: the device plugin's
extended resource in pods and nodes, or on the DRA path, the driver's ResourceSlices and the
ResourceClaims that allocate their devices. Standard library only (a platform run ships it, see
kube_api.py)."""

from __future__ import annotations

import urllib.parse
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any

ENDED = ("Succeeded", "Failed")


def pod_gpus(pod: dict, resource: str) -> int:
    """The GPUs a pod's containers ask for (limits, which the API server copies to requests)."""
    total = 0
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources", {})
        asked = resources.get("limits", {}).get(resource,
                                                resources.get("requests", {}).get(resource))
        total += int(asked or 0)
    return total


@dataclass(frozen=True)
class DeviceView:
    """The DRA path's GPUs, which no node status lists: `driver`'s ResourceSlices, and the
    ResourceClaims that allocate them (the scheduler's for pods asking for the extended
    resource, and claims of the pods' own)."""
    slices: list[dict]
    claims: list[dict]
    driver: str

    @cached_property
    def gpus_by_node(self) -> Counter[str]:
        """Each node's GPUs, counted once: a run asks for every node's."""
        counts: Counter[str] = Counter()
        for s in self.slices:
            if s["spec"]["driver"] == self.driver:
                counts[s["spec"].get("nodeName") or ""] += len(s["spec"].get("devices") or [])
        return counts

    @cached_property
    def claims_by_name(self) -> dict[tuple[str, str], dict]:
        return {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in self.claims}

    def node_gpus(self, node: str) -> int:
        return self.gpus_by_node[node]

    def held(self) -> Counter[tuple[str, str]]:
        """The GPUs allocated to each pod (namespace, name) through the claims reserved for
        it."""
        held: Counter[tuple[str, str]] = Counter()
        for claim in self.claims:
            status = claim.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            gpus = sum(1 for r in results if r["driver"] == self.driver)
            for consumer in status.get("reservedFor") or []:
                if consumer.get("resource") == "pods":
                    held[(claim["metadata"]["namespace"], consumer["name"])] += gpus
        return held

    def holders(self, devices: set[tuple[str, str, str]]) -> set[tuple[str, str]]:
        """The pods (namespace, name) whose claims were allocated one of `devices` (driver,
        pool, device)."""
        found = set()
        for claim in self.claims:
            status = claim.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            if any((r["driver"], r["pool"], r["device"]) in devices for r in results):
                found |= {(claim["metadata"]["namespace"], consumer["name"])
                          for consumer in status.get("reservedFor") or []
                          if consumer.get("resource") == "pods"}
        return found

    def asked(self, pod: dict, device_classes: list[str], whole_node: int) -> int:
        """The GPUs a pod's own claims ask for, allocated or not: each request of a GPU
        device class, its count (all of a node's with allocationMode All)."""
        names = {s.get("resourceClaimName") for s in pod["status"].get("resourceClaimStatuses")
                 or []}
        namespace = pod["metadata"]["namespace"]
        total = 0
        for name in names:
            claim = self.claims_by_name.get((namespace, name or ""))
            if claim is None:
                continue
            for request in (claim["spec"].get("devices") or {}).get("requests") or []:
                exactly = request.get("exactly") or request
                if exactly.get("deviceClassName") not in device_classes:
                    continue
                total += (whole_node if exactly.get("allocationMode") == "All"
                          else int(exactly.get("count", 1)))
        return total


def node_gpus(node: dict, resource: str, devices: DeviceView | None) -> int:
    """The GPUs a node offers: in its status, or on the DRA path, in its ResourceSlices."""
    if devices is not None:
        return devices.node_gpus(node["metadata"]["name"])
    return int(node["status"].get("allocatable", {}).get(resource, 0))


def gpus_held(pods: list[dict], resource: str, devices: DeviceView | None
              ) -> Counter[tuple[str, str]]:
    """The GPUs each pod that has not ended holds or asks for: its extended resource, plus on
    the DRA path, what its claims were allocated."""
    held = devices.held() if devices is not None else Counter()
    for pod in pods:
        if pod["status"].get("phase") not in ENDED:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            held[key] = max(held[key], pod_gpus(pod, resource))
    return held


# What a run reads of each object it lists (kube_api.project): at fleet size a list's full
# objects (a node's image list, a pod's managed fields and volumes) would not fit its pod.
NODE_FIELDS = {"metadata": {"name": True, "annotations": True},
               "spec": {"taints": True, "unschedulable": True},
               "status": {"allocatable": True}}
POD_FIELDS = {"metadata": {"name": True, "namespace": True, "uid": True, "annotations": True,
                           "ownerReferences": {"kind": True, "controller": True},
                           "creationTimestamp": True, "deletionTimestamp": True},
              "spec": {"nodeName": True, "schedulerName": True, "schedulingGates": True,
                       "tolerations": True, "activeDeadlineSeconds": True,
                       "containers": {"resources": {"limits": True, "requests": True}}},
              "status": {"phase": True, "startTime": True,
                         "conditions": {"type": True, "status": True, "reason": True},
                         "resourceClaimStatuses": True}}
SLICE_FIELDS = {"spec": {"driver": True, "nodeName": True, "pool": True,
                         "devices": {"name": True, "attributes": True}}}
CLAIM_FIELDS = {"metadata": {"name": True, "namespace": True},
                "spec": True, "status": {"allocation": True, "reservedFor": True}}


def device_view(api: Any, driver: str | None) -> DeviceView | None:
    """On the DRA path (`driver`'s), where the devices are and who holds them, as a run's Api
    (kube_api.py) lists them; None on the device plugin path."""
    if driver is None:
        return None
    return DeviceView(api.items("/apis/resource.k8s.io/v1/resourceslices", SLICE_FIELDS),
                      api.items("/apis/resource.k8s.io/v1/resourceclaims", CLAIM_FIELDS),
                      driver)


def observe(api: Any, driver: str | None) -> tuple[list[dict], list[dict], DeviceView | None]:
    """The nodes, the pods that have not ended and, on the DRA path, the devices."""
    nodes = api.items("/api/v1/nodes", NODE_FIELDS)
    pods = api.items("/api/v1/pods?fieldSelector=" + urllib.parse.quote(
        "status.phase!=Succeeded,status.phase!=Failed"), POD_FIELDS)
    return nodes, pods, device_view(api, driver)
