"""The DRA path on Kubernetes 1.37.2 (kube-apiserver, kube-scheduler and
kube-controller-manager built from k8s.io/kubernetes v1.37.2): GPU nodes advertise no GPU in
their status; NVIDIA's DRA driver publishes them as ResourceSlices (published here with the
driver's identity, shaped as its v0.5.0 publishes them; no kubelet plugin is needed to place
pods or decide admission). What the program declares for a stack with `gpuOperator.gpuPath:
dra` and two teams: the platform's DeviceClasses, the binpack scheduler, OPA's pods behind the
webhooks, and the real Kueue with the generated Configuration; a real kube-controller-manager
(the resource-claim controller among its controllers) and a fake kubelet.

Three GPU nodes of 8: pods that ask for nvidia.com/gpu land where the binpack scheduler packs
them, as on the device plugin path; pods with claims of their own are placed by it too."""

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from components import gpu_operator
from components.base.facts import GPU_RESOURCE
from components.gpu_operator.dra import NVIDIA_DRA_DRIVER
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit import tools
from tests.kit.cluster.controlplane import ApiError, ControlPlane, Kube, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.dra_driver import driver_user, grant, operator_grants
from tests.kit.cluster.fake_kubelet import cordon
from tests.kit.cluster.kueue import API_VERSION
from tests.kit.cluster.nodes_and_pods import (
    create_dra_gpu_node,
    ensure_namespace,
    job,
    nvidia_resource_slice,
    placement,
    pod,
    pod_template,
)
from tests.kit.cluster.running_platform import refusal, run_platform, update_refusal
from tests.kit.stacks import with_changes

KUBERNETES = tools.DRA_KUBERNETES_VERSION
# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)

RESEARCH, VISION, NO_TEAM = "research", "vision", "team-a"
GPU_NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3")
STACK = with_changes(
    kubernetesVersion=KUBERNETES, gpuNodes={"names": list(GPU_NODES)},
    gpuOperator={"gpuPath": "dra"}, admission={"replicas": 2},
    teams={"enabled": True, "gpuPodsOutsideTeams": "admit",
           "teams": [{"name": RESEARCH, "namespaces": [RESEARCH],
                      "quota": {"gpu": {GPU_RESOURCE: 12}}},
                     {"name": VISION, "namespaces": [VISION],
                      "quota": {"gpu": {GPU_RESOURCE: 12}}}]})


@dataclass
class Platform:
    cp: ControlPlane
    settings: StackSettings
    scheduler: str
    driver: Kube        # NVIDIA's DRA driver's identity


@pytest.fixture(scope="module")
def platform(control_plane) -> Iterator[Platform]:
    cp, kube = control_plane, control_plane.admin
    with ExitStack() as stack:
        running = run_platform(stack, cp, STACK, before_pods=operator_grants(cp),
                               controllers=("resourceclaim-controller",))
        settings = running.settings
        ensure_namespace(kube, NO_TEAM)
        wait_until(lambda: "spec.schedulerName" in refusal(
            kube, pod("probe", NO_TEAM, gpus=1)), "the webhook to take effect",
            timeout=15)
        driver = cp.impersonating(driver_user(settings))
        for node in GPU_NODES:
            create_dra_gpu_node(kube, settings, node, 8, driver)
        yield Platform(cp, settings, settings.scheduler.name, driver)


def gpu_pod(name: str, namespace: str, platform: Platform, gpus: int) -> dict:
    """A pod that asks for nvidia.com/gpu, as on the device plugin path."""
    return pod(name, namespace, gpus=gpus, settings=platform.settings,
               scheduler=platform.scheduler)


def claim_template(name: str, namespace: str, gpus: int,
                   device_class: str = NVIDIA_DRA_DRIVER) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": device_class, "count": gpus}}]}}}}


def claim_pod(name: str, namespace: str, platform: Platform, template: str) -> dict:
    """A pod that asks for GPUs through a claim of its own, made from `template`."""
    obj = pod(name, namespace, settings=platform.settings, scheduler=platform.scheduler)
    obj["spec"]["tolerations"] = [t.toleration() for t in platform.settings.gpu_nodes.taints]
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return obj


def claims(kube: Kube) -> list[dict]:
    """Every ResourceClaim, in every namespace."""
    return kube.request("GET", "/apis/resource.k8s.io/v1/resourceclaims")["items"]


def allocated(kube: Kube) -> dict[str, int]:
    """The GPUs allocated on each node, from the claims' allocations."""
    counts: dict[str, int] = {}
    for claim in claims(kube):
        for result in (claim.get("status", {}).get("allocation") or {}).get(
                "devices", {}).get("results", []):
            counts[result["pool"]] = counts.get(result["pool"], 0) + 1
    return counts


def delete_pods(kube: Kube, namespace: str, *names: str) -> None:
    for name in names:
        kube.delete("v1", "Pod", name, namespace)
    wait_until(lambda: not any(c["metadata"]["namespace"] == namespace for c in claims(kube)
                               if c.get("status", {}).get("reservedFor")),
               f"the claims of {namespace}'s pods to be released", timeout=60)


def test_the_platforms_device_class_serves_nvidia_com_gpu(platform):
    kube = platform.cp.admin
    served = kube.get("resource.k8s.io/v1", "DeviceClass", gpu_operator.GPU_DEVICE_CLASS)
    assert served["spec"]["extendedResourceName"] == GPU_RESOURCE
    node = kube.get("v1", "Node", GPU_NODES[0])
    assert GPU_RESOURCE not in node["status"]["allocatable"]


def test_gpu_pods_that_ask_for_nvidia_com_gpu_are_packed_as_on_the_device_plugin_path(platform):
    """Two pods of 2 GPUs then one of 3: each lands on the node the first chose, its claim
    made by the scheduler and allocated there."""
    kube = platform.cp.admin
    ensure_namespace(kube, NO_TEAM)
    kube.create(gpu_pod("first", NO_TEAM, platform, 2))
    first = placement(kube, NO_TEAM, "first", timeout=60)
    assert first in GPU_NODES
    for name, gpus in (("second", 2), ("third", 3)):
        kube.create(gpu_pod(name, NO_TEAM, platform, gpus))
        assert placement(kube, NO_TEAM, name, timeout=60) == first
    wait_until(lambda: allocated(kube).get(first) == 7, "7 GPUs allocated on the first node",
               timeout=30)
    pod = kube.get("v1", "Pod", "third", NO_TEAM)
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"][0]["resourceName"] == GPU_RESOURCE
    print(f"\nnvidia.com/gpu through DRA: 2 + 2 + 3 GPUs on {first}: {allocated(kube)}")
    delete_pods(kube, NO_TEAM, "first", "second", "third")


def test_pods_with_claims_of_their_own_are_placed_by_the_binpack_scheduler(platform):
    """A claim written directly is allocated where the binpack scheduler puts its pod, but its
    GPUs do not weigh in the scoring: recorded, as the concept page says."""
    kube = platform.cp.admin
    kube.create(claim_template("two-gpus", NO_TEAM, 2))
    kube.create(gpu_pod("anchor", NO_TEAM, platform, 4))
    anchor = placement(kube, NO_TEAM, "anchor", timeout=60)
    for index in range(2):
        kube.create(claim_pod(f"claimer-{index}", NO_TEAM, platform, "two-gpus"))
    places = [placement(kube, NO_TEAM, f"claimer-{index}", timeout=60)
              for index in range(2)]
    print(f"\npods with claims of their own: on {places}; the 4-GPU pod before them on "
          f"{anchor}; allocated {allocated(kube)}")
    assert all(place in GPU_NODES for place in places), [
        (c["type"], c.get("message")) for i in range(2) for c in kube.get(
            "v1", "Pod", f"claimer-{i}", NO_TEAM)["status"].get("conditions", [])]
    delete_pods(kube, NO_TEAM, "anchor", "claimer-0", "claimer-1")


def test_every_way_around_the_principle_is_refused(platform):
    kube = platform.cp.admin
    # A pod with claims that skips the binpack scheduler.
    skipping = claim_pod("skipping", NO_TEAM, platform, "two-gpus")
    del skipping["spec"]["schedulerName"]
    assert "has resource claims (gpus), which may hold GPUs" in refusal(kube, skipping)
    # adminAccess: every GPU of the class, whoever uses it (in a namespace labelled for it,
    # else the API server refuses it first).
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "agents", "labels": {"resource.kubernetes.io/admin-access": "true"}}},
        TEST_MANAGER)
    admin = claim_template("all-gpus", "agents", 1)
    request = admin["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    request.update({"allocationMode": "All", "adminAccess": True})
    del request["count"]
    assert "with adminAccess" in refusal(kube, admin)
    # A DeviceClass of a user's that serves the GPU resource, and one that reaches NVIDIA's.
    for spec in ({"selectors": [{"cel": {"expression":
                                         f"device.driver == '{NVIDIA_DRA_DRIVER}'"}}],
                  "extendedResourceName": GPU_RESOURCE},
                 {"selectors": [{"cel": {"expression": "device.attributes['x'].y == 'z'"}}]}):
        device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                        "metadata": {"name": "mine.example.com"}, "spec": spec}
        assert "only the platform's own classes and NVIDIA's" in refusal(kube, device_class)
    # NVIDIA's slices published by someone else, for a node of their choosing.
    forged = nvidia_resource_slice("cpu-node-1", 8)
    assert "only the driver publishes them" in refusal(kube, forged)
    # The driver's own slice is admitted.
    assert refusal(platform.driver, nvidia_resource_slice("cpu-node-1", 1)) == ""
    # A claim allocated by hand, on a node of the user's choosing.
    kube.create(claim_template("one-gpu", NO_TEAM, 1))
    claim = kube.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                         "metadata": {"name": "by-hand", "namespace": NO_TEAM},
                         "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                             "deviceClassName": NVIDIA_DRA_DRIVER}}]}}})
    claim["status"] = {"allocation": {"devices": {"results": [{
        "request": "gpus", "driver": NVIDIA_DRA_DRIVER, "pool": GPU_NODES[2],
        "device": "gpu-7"}]}, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [GPU_NODES[2]]}]}]}}}
    with pytest.raises(ApiError) as refused:
        kube.request("PUT", kube.path("resource.k8s.io/v1", "ResourceClaim", NO_TEAM,
                                      "by-hand", "status"), body=claim)
    assert "its allocation is written by a scheduler" in refused.value.message


def test_a_teams_quota_counts_the_same_gpus_whichever_way_they_are_asked_for(platform):
    """Research's 12 GPUs and vision's 12 are all the cohort has: research holds 8 through
    nvidia.com/gpu and 4 through a claim, and Kueue counts 12 against its quota."""
    kube = platform.cp.admin
    kube.create(claim_template("four-gpus", RESEARCH, 4))
    for index in range(2):
        kube.create(gpu_pod(f"asks-{index}", RESEARCH, platform, 4))
    kube.create(claim_pod("claims", RESEARCH, platform, "four-gpus"))

    def used() -> int:
        usage = kube.get(API_VERSION, "ClusterQueue", RESEARCH).get("status", {}).get(
            "flavorsUsage", [])
        return sum(int(r["total"]) for f in usage for r in f["resources"]
                   if r["name"] == GPU_RESOURCE)
    wait_until(lambda: used() == 12, "research's 12 GPUs counted in its queue", timeout=90)
    for name in ("asks-0", "asks-1", "claims"):
        assert placement(kube, RESEARCH, name, timeout=60) in GPU_NODES
    # Beyond the cohort's 24: another 13 GPUs of vision's wait in its queue.
    kube.create(gpu_pod("beyond", VISION, platform, 8))
    kube.create(claim_template("five-gpus", VISION, 5))
    kube.create(claim_pod("beyond-claim", VISION, platform, "five-gpus"))
    time.sleep(5)
    pods = {p["metadata"]["name"]: p for p in kube.list("v1", "Pod", VISION)}
    gated = [name for name, p in pods.items() if p["spec"].get("schedulingGates")]
    print(f"\nresearch's queue counts {used()} GPUs (8 asked for, 4 claimed); "
          f"vision's pods still held: {sorted(gated)}")
    assert gated, "one of vision's pods should wait: the cohort's GPUs are all in use"


# --- the DRA path's ways around the principle (issue: every name, every writer, every write) ---

DEVICE_CLASS_RESOURCE = "deviceclass.resource.kubernetes.io/"


def asking_by_class_name(name: str, platform: Platform, device_class: str) -> dict:
    """A GPU pod as the users' docs write one, but asking for a device class's devices by the
    class's own resource name instead of nvidia.com/gpu."""
    obj = gpu_pod(name, NO_TEAM, platform, 1)
    for section in obj["spec"]["containers"][0]["resources"].values():
        section[DEVICE_CLASS_RESOURCE + device_class] = section.pop(GPU_RESOURCE)
    return obj


def test_a_device_class_asked_for_by_its_own_resource_name_is_refused(platform):
    """Kubernetes 1.37 serves every DeviceClass under deviceclass.resource.kubernetes.io/<class>
    too: a pod asking for NVIDIA's GPUs so is refused for what it asks, whether it is written as
    a GPU pod or not."""
    kube = platform.cp.admin
    for device_class in (NVIDIA_DRA_DRIVER, gpu_operator.GPU_DEVICE_CLASS):
        message = refusal(kube, asking_by_class_name("by-class", platform, device_class))
        assert (f"requests {DEVICE_CLASS_RESOURCE}{device_class}, which Kubernetes serves from "
                f'the devices of the device class "{device_class}"') in message
        assert "request nvidia.com/gpu" in message
    bare = asking_by_class_name("bare", platform, NVIDIA_DRA_DRIVER)
    del bare["spec"]["schedulerName"], bare["spec"]["tolerations"]
    message = refusal(kube, bare)
    assert "which Kubernetes serves from the devices" in message
    assert "requests no GPU" not in message


def test_the_platforms_classes_are_written_only_as_the_stack_declares_them(platform):
    kube = platform.cp.admin
    declared = kube.get("resource.k8s.io/v1", "DeviceClass", gpu_operator.GPU_DEVICE_CLASS)
    ours = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": gpu_operator.GPU_DEVICE_CLASS}, "spec": declared["spec"]}
    everything = {**ours, "spec": {**declared["spec"],
                                   "selectors": [{"cel": {"expression": "true"}}]}}
    with pytest.raises(ApiError) as refused:
        kube.apply(everything, "by-hand", force=True)
    assert "is the platform's own (it serves nvidia.com/gpu)" in refused.value.message
    # The program's own write, as `pulumi up` makes it (a server-side apply of the same spec).
    kube.apply(ours, "by-hand", force=True, dry_run=True)
    # A MIG profile added to the stack: its class is admitted before the policy hears of it.
    with_mig = StackSettings.model_validate({**STACK, "gpuOperator": {
        "gpuPath": "dra", "mig": {"strategy": "mixed", "profiles": ["3g.40gb"]}}})
    [_, mig] = gpu_operator.device_classes(component_inputs(with_mig).gpu_operator)
    assert refusal(kube, mig) == ""
    mig["spec"]["selectors"][0]["cel"]["expression"] = mig["spec"]["selectors"][0]["cel"][
        "expression"].replace("3g.40gb", "7g.80gb")
    assert "is the platform's own (it serves nvidia.com/mig-3g.40gb)" in refusal(kube, mig)


def test_only_the_drivers_service_accounts_write_what_it_publishes(platform):
    """The exempt namespaces' other ServiceAccounts (the monitoring stack's) are no writers of
    NVIDIA's classes or slices, whatever RBAC grants them."""
    kube, settings = platform.cp.admin, platform.settings
    intruder = f"system:serviceaccount:{settings.monitoring.namespace}:intruder"
    for resource in ("resourceslices", "deviceclasses"):
        grant(kube, intruder, resource)
    as_intruder = platform.cp.impersonating(intruder)
    assert "only the driver publishes them" in refusal(
        as_intruder, nvidia_resource_slice("cpu-node-1", 8))
    nvidias = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "mig.nvidia.com"},
               "spec": {"selectors": [{"cel": {"expression":
                                               f"device.driver == '{NVIDIA_DRA_DRIVER}'"}}]}}
    assert "only the platform's own classes and NVIDIA's" in refusal(as_intruder, nvidias)


def test_only_listed_users_take_nvidias_devices_out_of_service(platform):
    kube = platform.cp.admin
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": "drain-every-gpu"},
            "spec": {"deviceSelector": {"driver": NVIDIA_DRA_DRIVER},
                     "taint": {"key": "example.com/maintenance", "effect": "NoExecute"}}}
    message = refusal(kube, rule)
    assert "taints the devices of NVIDIA's driver gpu.nvidia.com" in message
    assert "admission.deviceTaintWriters" in message
    rule["spec"]["taint"]["effect"] = "None"
    assert refusal(kube, rule) == ""


def test_claims_keep_to_healthy_gpus_and_their_own_compute_domain(platform):
    kube = platform.cp.admin
    tolerating = claim_template("tolerating", NO_TEAM, 1)
    tolerating["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}]
    assert "tolerates device taints (gpu.nvidia.com/xid)" in refusal(kube, tolerating)
    joining = claim_template("joining", NO_TEAM, 1,
                             device_class="compute-domain-default-channel.nvidia.com")
    joining["spec"]["spec"]["devices"]["config"] = [{"opaque": {
        "driver": "compute-domain.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
            "domainID": "5f0c9ad4-4a3b-4bc6-9e57-another-teams"}}}]
    assert "joins a ComputeDomain, which only NVIDIA's compute-domain controller names" in (
        refusal(kube, joining))
    sharing = claim_template("sharing", NO_TEAM, 1)
    sharing["spec"]["spec"]["devices"]["config"] = [{"opaque": {
        "driver": NVIDIA_DRA_DRIVER, "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing"}}}}]
    assert refusal(kube, sharing) == ""


def test_a_teams_job_whose_gpus_come_from_claim_templates_is_started_only_by_kueue(platform):
    """32 GPUs of claims, more than the cohort has: Kueue keeps the Job suspended, and a user
    starting it is refused."""
    kube = platform.cp.admin
    kube.create(claim_template("eight-gpus", RESEARCH, 8))
    template = claim_pod("worker", RESEARCH, platform, "eight-gpus")
    template["metadata"] = {"labels": {"app": "too-big"}}
    kube.create(job("too-big", RESEARCH, template, parallelism=4, completions=4))
    wait_until(lambda: any(w["metadata"]["name"].startswith("job-too-big-")
                           for w in kube.list(API_VERSION, "Workload", RESEARCH)),
               "the Job's Workload", timeout=30)
    message = update_refusal(kube, ("batch/v1", "Job"), "too-big", RESEARCH,
                             {"spec": {"suspend": False}})
    assert 'only Kueue starts a Job of namespace "research" (team "research")' in message
    kube.delete("batch/v1", "Job", "too-big", RESEARCH, propagation="Background")


def test_a_whole_node_pod_does_not_preempt_opted_in_pods_for_their_gpus(platform):
    """Kubernetes 1.37.2's scheduler cannot preempt for devices: its DynamicResources plugin
    does not simulate a victim's claim being released (KEP-5690). On two fresh nodes (the
    module's own cordoned meanwhile), with 7 of each node's 8 GPUs held by a Job's pods in the
    preemptible class, an 8-GPU pod that names no class stays pending, its preemption finds
    no node, and every opted-in pod keeps its GPUs. On the device plugin path the same pod
    preempts (test_preemption.py); the settings warn of the difference."""
    kube, settings = platform.cp.admin, platform.settings
    nodes = ("preemption-node-1", "preemption-node-2")
    for node in nodes:
        create_dra_gpu_node(kube, settings, node, 8, platform.driver)
    cordon(kube, GPU_NODES, True)
    try:
        template = pod_template({"app": "sweep"}, gpus=7, settings=settings,
                                scheduler=platform.scheduler)
        template["spec"]["priorityClassName"] = settings.scheduler.preemptible_class.name
        kube.create(job("sweep", NO_TEAM, template, parallelism=len(nodes),
                        completions=len(nodes)))
        opted_in = wait_until(lambda: (lambda pods: pods if len(pods) == len(nodes) else None)(
            [p for p in kube.list("v1", "Pod", NO_TEAM, labelSelector="app=sweep")
             if p["spec"].get("nodeName")]), "the sweep's pods to be placed", timeout=60)
        assert {p["spec"]["nodeName"] for p in opted_in} == set(nodes)
        kube.create(gpu_pod("pretrain", NO_TEAM, platform, 8))
        tried = wait_until(lambda: next(
            (c for c in kube.get("v1", "Pod", "pretrain", NO_TEAM)["status"].get(
                "conditions", [])
             if c["type"] == "PodScheduled" and "preemption:" in c.get("message", "")), None),
            "the scheduler to try preempting for pretrain", timeout=60)
        print(f"\n8-GPU pod on the DRA path, each node 7 of 8 held by opted-in pods: "
              f"{tried['reason']}: {tried['message']}")
        assert not kube.get("v1", "Pod", "pretrain", NO_TEAM)["status"].get(
            "nominatedNodeName")
        survivors = kube.list("v1", "Pod", NO_TEAM, labelSelector="app=sweep")
        assert {p["metadata"]["uid"] for p in survivors} == \
            {p["metadata"]["uid"] for p in opted_in}
        assert not [p for p in survivors if p["metadata"].get("deletionTimestamp")]
        held = allocated(kube)
        assert [held.get(node) for node in nodes] == [7, 7]
    finally:
        kube.delete("batch/v1", "Job", "sweep", NO_TEAM, propagation="Background")
        delete_pods(kube, NO_TEAM, "pretrain")
        cordon(kube, GPU_NODES, False)
        for node in nodes:
            platform.driver.delete("resource.k8s.io/v1", "ResourceSlice",
                                   nvidia_resource_slice(node, 8)["metadata"]["name"])
            kube.delete("v1", "Node", node)


def test_every_allocated_gpu_is_held_by_a_pod_the_binpack_scheduler_placed(platform):
    """Last, over everything the module ran: every claim that holds NVIDIA's devices is
    reserved for pods of the binpack scheduler."""
    kube = platform.cp.admin
    holders = [(c["metadata"]["namespace"], ref["name"]) for c in claims(kube)
               if (c.get("status", {}).get("allocation") or {}).get("devices")
               for ref in c["status"].get("reservedFor", []) if ref["resource"] == "pods"]
    assert holders, "the module's pods should hold GPUs by now"
    schedulers = {kube.get("v1", "Pod", name, namespace)["spec"]["schedulerName"]
                  for namespace, name in holders}
    assert schedulers == {platform.scheduler}
