"""Reservation and fault remediation where features meet: the DRA path on Kubernetes 1.37.2
(GPUs in NVIDIA's driver's ResourceSlices, allocated through claims), with admission's webhooks
in front and a team whose workloads the real Kueue admits. A team's whole-node pod, admitted
within its quota and waiting because every node is partly busy, gets the node with the fewest
GPUs allocated; the run's toleration passes admission and Kueue; a pod that would have refilled
that node waits instead, and the whole-node pod lands once the node has emptied. A GPU that
reports a fatal XID leaves service through a DeviceTaintRule: the pod holding it through its
claim is evicted, the node keeps serving its other GPUs, and admission refuses a pod that
tolerates the fault's taint.

The busy state is made the way churn makes it: nodes cordoned while pods start, so they land
on nodes the binpack scheduler would not have chosen, then uncordoned."""

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from components.base.facts import GPU_RESOURCE
from components.gpu_remediation import REPAIRED_LABEL
from components.gpu_remediation.actor.gpu_remediation import rule_name
from tests.kit import tools
from tests.kit.cluster.controlplane import ApiError, ControlPlane, wait_until
from tests.kit.cluster.dra_driver import driver_user, operator_grants
from tests.kit.cluster.fake_kubelet import cordon
from tests.kit.cluster.nodes_and_pods import (
    create_dra_gpu_node,
    ensure_namespace,
    lands,
    placement,
    pod,
)
from tests.kit.cluster.remediation_run import remediating
from tests.kit.cluster.reservation_run import (
    declared_reservation,
    reservation_run,
    reservation_settings,
)
from tests.kit.cluster.running_platform import RunningPlatform, run_platform
from tests.kit.stacks import with_changes

KUBERNETES = tools.DRA_KUBERNETES_VERSION
# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
RESEARCH, OUTSIDE = "research", "batch"
# GPUs allocated on each node at the start: none has 8 free, and only gpu-2 has 4.
BUSY = {"gpu-1": 6, "gpu-2": 2, "gpu-3": 5}
STACK = with_changes(
    kubernetesVersion=KUBERNETES, gpuNodes={"names": list(BUSY)}, gpuOperator={"gpuPath": "dra"},
    reservation={"enabled": True}, remediation={"mode": "drain"},
    teams={"enabled": True, "gpuPodsOutsideTeams": "admit",
           "teams": [{"name": RESEARCH, "namespaces": [RESEARCH],
                      "quota": {"gpu": {GPU_RESOURCE: 16}}}]})


@pytest.fixture(scope="module")
def platform(control_plane: ControlPlane) -> Iterator[RunningPlatform]:
    cp, kube = control_plane, control_plane.admin
    with ExitStack() as stack:
        running = run_platform(stack, cp, STACK, before_pods=operator_grants(cp),
                               controllers=("resourceclaim-controller",))
        driver = cp.impersonating(driver_user(running.settings))
        for node in BUSY:
            create_dra_gpu_node(kube, running.settings, node, 8, driver)
        ensure_namespace(kube, OUTSIDE)
        for node, gpus in BUSY.items():
            cordon(kube, [n for n in BUSY if n != node], True)
            for index in range(gpus):
                gpu_pod(running, OUTSIDE, f"{node}-{index}", 1)
                assert placement(kube, OUTSIDE, f"{node}-{index}") == node
            cordon(kube, BUSY, False)
        yield running


def gpu_pod(platform: RunningPlatform, namespace: str, name: str, gpus: int) -> dict:
    return platform.kube.create(pod(name, namespace, gpus=gpus, settings=platform.settings,
                                    scheduler=platform.settings.scheduler.name))


def unschedulable(platform: RunningPlatform, namespace: str, name: str) -> bool:
    conditions = platform.kube.get("v1", "Pod", name, namespace)["status"].get("conditions", [])
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in conditions)


def test_a_teams_whole_node_pod_gets_a_node_kept_on_the_dra_path(platform):
    kube = platform.kube
    settings = reservation_settings(platform.settings, wait_before="0s")
    objects = declared_reservation(settings)     # its ServiceAccount's rights as declared
    big = gpu_pod(platform, RESEARCH, "whole-node", 8)
    wait_until(lambda: unschedulable(platform, RESEARCH, "whole-node"),
               "Kueue to admit the whole-node pod and the scheduler to find no node", timeout=60)
    printed = reservation_run(platform.cp, objects, settings)
    assert f"gpu-2: reserved for {RESEARCH}/whole-node (2 of its 8 GPUs in use)" in printed
    taints = kube.get("v1", "Node", "gpu-2")["spec"]["taints"]
    assert {"key": "gpu-platform.io/reserved-for", "value": big["metadata"]["uid"],
            "effect": "NoSchedule"} in taints

    gpu_pod(platform, OUTSIDE, "four", 4)
    wait_until(lambda: unschedulable(platform, OUTSIDE, "four"),
               "the 4-GPU pod to find no node but the reserved one", timeout=30)
    for index in range(BUSY["gpu-2"]):
        kube.delete("v1", "Pod", f"gpu-2-{index}", OUTSIDE)
    assert lands(kube, RESEARCH, "whole-node") == "gpu-2"
    assert "gpu-2: released" in reservation_run(platform.cp, objects, settings)
    assert not [t for t in kube.get("v1", "Node", "gpu-2")["spec"]["taints"]
                if t["key"] == "gpu-platform.io/reserved-for"]


def allocations(platform: RunningPlatform, node: str) -> dict[str, str]:
    """`node`'s allocated devices, each with the pod of OUTSIDE its claim is reserved for."""
    held = {}
    for claim in platform.kube.list("resource.k8s.io/v1", "ResourceClaim", OUTSIDE):
        status = claim.get("status") or {}
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results", []):
            if result["pool"] == node:
                held[result["device"]] = status["reservedFor"][0]["name"]
    return held


def test_a_failed_gpu_leaves_service_alone_and_its_pod_moves_on_the_dra_path(platform):
    """After the reservation test: gpu-1 holds its 6 pods. The failed GPU is taken out through
    a DeviceTaintRule (written by remediation, which admission's writer list names); only the
    pod holding it is evicted, the node keeps serving its other GPUs, and no claim is given the
    failed one."""
    kube = platform.kube
    device, holder = sorted(allocations(platform, "gpu-1").items())[0]
    with remediating(platform.cp, platform.settings, list(BUSY)) as remediation:
        remediation.set_xid("gpu-1", int(device.removeprefix("gpu-")), 79)
        remediation.wait_until_seen("gpu-1")
        log = remediation.run()
    assert "gpu-1: quarantined" in log and f"(devices {device})" in log, log
    assert [line for line in log.splitlines() if ": evicted" in line] == \
        [f"{OUTSIDE}/{holder}: evicted"], log
    rule = kube.get("resource.k8s.io/v1", "DeviceTaintRule", rule_name("gpu-1", device))
    taint = rule["spec"]["taint"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        "gpu-platform.io/gpu-fault", "fatal-xid", "NoSchedule")
    assert not [t for t in kube.get("v1", "Node", "gpu-1")["spec"]["taints"]
                if t["key"] == "gpu-platform.io/gpu-fault"]
    wait_until(lambda: holder not in allocations(platform, "gpu-1").values(),
               "the pod holding the failed GPU to be gone", timeout=60)
    for index in range(3):
        gpu_pod(platform, OUTSIDE, f"after-fault-{index}", 1)
        lands(kube, OUTSIDE, f"after-fault-{index}")
    assert device not in allocations(platform, "gpu-1"), "a claim was given the failed GPU"
    # Admission: no pod may tolerate the fault's taint by name.
    refused = pod("tolerates-fault", OUTSIDE, gpus=1, settings=platform.settings,
                  scheduler=platform.settings.scheduler.name)
    refused["spec"]["tolerations"].append({"key": "gpu-platform.io/gpu-fault",
                                           "operator": "Exists", "effect": "NoSchedule"})
    with pytest.raises(ApiError, match="a GPU node out of service after a GPU fault"):
        kube.create(refused)
    # Repaired: its DeviceTaintRule goes, and the GPU serves again.
    kube.merge_patch("v1", "Node", "gpu-1", {"metadata": {"labels": {REPAIRED_LABEL: "true"}}})
    with remediating(platform.cp, platform.settings, list(BUSY)) as remediation:
        assert "gpu-1: back in service" in remediation.run()
    assert not kube.list("resource.k8s.io/v1", "DeviceTaintRule")
    assert "gpu-platform.io/gpu-fault" not in (
        kube.get("v1", "Node", "gpu-1")["metadata"].get("annotations") or {})
