"""Admission end to end, through a real kube-apiserver: the program's objects as declared, with
OPA's pods run by a real kube-controller-manager from the declared Deployment and started as real
OPA processes by a kubelet of this suite (kubelet.py), which loads the policy from the declared
ConfigMaps exactly as a pod mounts them; the API server calls the declared webhooks at the
Service's ready endpoints. Also: OPA's restarts, a policy change rolled out, and bursts."""

import copy
import io
import itertools
import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, redirect_stdout
from dataclasses import dataclass

import pytest
import requests
import urllib3
from kubelet import ProcessKubelet, RunningPod

import tools
from components import opa_admission
from components.base import facts
from components.base.facts import AUDIT_LABEL
from components.opa_admission.inputs import OpaAdmissionInputs
from components.platform.settings import StackSettings
from controlplane import ApiError, ControlPlane, wait_until
from declared_objects import TEST_MANAGER, WEBHOOK_KINDS, apply_declared, find
from fake_kubelet import workloads_running
from harness import admission_of
from kube_components import Scheduler, scheduler_with_strategy, start_binpack_scheduler
from nodes_and_pods import (
    create_gpu_node,
    create_node,
    ensure_namespace,
    job,
    placement,
    pod,
    pod_template,
)
from scripts import admission_report

USER_NAMESPACE = "team-a"


# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


@dataclass
class Admission:
    cp: ControlPlane
    kubelet: ProcessKubelet
    settings: StackSettings
    ca_bundle: str
    # The OPA generation the webhooks call (roll_out moves it on).
    current: OpaAdmissionInputs

    def generation_name(self, base: str = facts.OPA_SERVICE) -> str:
        return opa_admission.generation_name(self.current, base)

    def opa_pods(self) -> list[RunningPod]:
        """The running pods of the generation the webhooks call."""
        return self.kubelet.pods_of(self.settings.admission.namespace,
                                    lambda name: name.startswith(f"{self.generation_name()}-"))

    def ready_endpoints(self) -> list[str]:
        slices = self.cp.admin.list("discovery.k8s.io/v1", "EndpointSlice",
                                    self.settings.admission.namespace,
                                    labelSelector=f"kubernetes.io/service-name="
                                                  f"{self.generation_name()}")
        return sorted(address for endpoints in slices for e in endpoints.get("endpoints") or []
                      if e.get("conditions", {}).get("ready") for address in e["addresses"])

    def decisions(self) -> float:
        """How many admission decisions the OPA pods have served (from their own metrics)."""
        total = 0.0
        for running in self.opa_pods():
            text = requests.get(f"http://{running.address}:{opa_admission.DIAGNOSTIC_PORT}"
                                f"/metrics", timeout=5).text
            total += sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith("http_request_duration_seconds_count")
                         and 'handler="v0/data"' in line)
        return total

    def serving(self, replicas: int) -> bool:
        """`replicas` OPA pods ready and in the Service's endpoints, and no other pod."""
        pods = self.opa_pods()
        return (len(pods) == replicas and all(p.containers["opa"].ready for p in pods)
                and self.ready_endpoints() == sorted(p.address for p in pods))


def gpu_pod_admitted(kube, settings: StackSettings, name: str = "probe") -> bool:
    """Whether a GPU pod that keeps the rules is admitted now (a dry run: OPA is asked)."""
    try:
        kube.create(pod(name, USER_NAMESPACE, gpus=1, settings=settings,
                        scheduler=settings.scheduler.name), dry_run=True)
        return True
    except ApiError:
        return False


@pytest.fixture(scope="module")
def admission(control_plane, declared, example_settings) -> Iterator[Admission]:
    cp, settings = control_plane, example_settings
    webhooks = [o for o in declared.objects if o["kind"] in WEBHOOK_KINDS]
    probe = find(declared.objects, "ConfigMap", opa_admission.REACHABILITY_PROBE)
    # As `pulumi up` orders them: everything OPA needs, then (once OPA is ready) the webhooks,
    # then the reachability probe.
    apply_declared(cp.admin, [o for o in declared.objects
                              if o["kind"] not in WEBHOOK_KINDS and o is not probe])
    with ExitStack() as stack:
        kubelet = ProcessKubelet(cp, {settings.admission.opa.repository: tools.opa()})
        stack.callback(kubelet.stop)
        stack.enter_context(workloads_running(cp, leave_out=kubelet.runs))
        # Schedulers: the default one for OPA's pods and pods without GPUs, the binpack one
        # for GPU pods.
        Scheduler(cp, "default-scheduler", scheduler_with_strategy("default-scheduler"),
                  kubeconfig=cp.kubeconfig("default-scheduler"))
        start_binpack_scheduler(cp, settings.scheduler, declared.objects)
        # OPA's pods land on the node without GPUs, with the pods of the tests that need none.
        create_node(cp.admin, "cpu-node-1")
        result = Admission(cp, kubelet, settings,
                           webhooks[0]["webhooks"][0]["clientConfig"]["caBundle"],
                           admission_of(settings))
        wait_until(lambda: result.serving(settings.admission.replicas),
                   f"{settings.admission.replicas} OPA pods ready behind the Service",
                   timeout=90, explain=lambda: kubelet_state(result))
        for webhook in webhooks:
            cp.admin.apply(webhook, TEST_MANAGER)
        ensure_namespace(cp.admin, USER_NAMESPACE)
        # The API server picks a new webhook up within moments: wait until it refuses (dry run).
        wait_until(lambda: not gpu_pod_admitted_on(cp.admin, settings, scheduler=None),
                   "the webhook to take effect", timeout=15)
        cp.admin.apply(probe, TEST_MANAGER)
        create_gpu_node(cp.admin, settings, "gpu-node-1", gpus=8)
        yield result


def gpu_pod_admitted_on(kube, settings: StackSettings, scheduler: str | None) -> bool:
    try:
        kube.create(pod("webhook-probe", USER_NAMESPACE, gpus=1, settings=settings,
                        scheduler=scheduler), dry_run=True)
        return True
    except ApiError:
        return False


def kubelet_state(admission: Admission) -> str:
    lines = []
    for running in admission.opa_pods():
        for name, container in running.containers.items():
            lines.append(f"{running.name}/{name}: ready={container.ready} "
                         f"restarts={container.restarts}")
            if container.process:
                lines.append(container.process.tail(10))
    return "\n".join(lines) + f"\nready endpoints: {admission.ready_endpoints()}"


def test_opa_runs_with_no_credentials_and_loads_its_policy_from_the_pods_volumes(
        admission, example_settings):
    """Nothing but the pod's own volumes gives OPA its policy: no token is mounted, and each
    OPA pod decides with the parameters of the declared ConfigMap."""
    kube = admission.cp.admin
    for running in admission.opa_pods():
        stored = kube.get("v1", "Pod", running.name, example_settings.admission.namespace)
        assert not any("projected" in v for v in stored["spec"].get("volumes", []))
        assert stored["status"]["containerStatuses"][0]["ready"] is True
    before = admission.decisions()
    assert gpu_pod_admitted(kube, example_settings)
    assert admission.decisions() == before + 1


def test_gpu_pod_without_the_binpack_scheduler_is_refused_with_the_policy_message(
        admission, example_settings):
    kube = admission.cp.admin
    with pytest.raises(ApiError) as refused:
        kube.create(pod("train-default", USER_NAMESPACE, gpus=1, settings=example_settings))
    message = refused.value.message
    print("\nrefusal:", message)
    assert refused.value.status == 403
    assert f'admission webhook "{example_settings.admission.webhook_name}" denied the request' \
        in message
    assert (f'pod "{USER_NAMESPACE}/train-default": container "main" requests nvidia.com/gpu but '
            f'spec.schedulerName is "default-scheduler"; GPU pods must set spec.schedulerName: '
            f'{example_settings.scheduler.name}') in message


def test_gpu_pod_with_the_binpack_scheduler_is_admitted_and_bound(admission, example_settings):
    kube = admission.cp.admin
    before = admission.decisions()
    kube.create(pod("train-binpack", USER_NAMESPACE, gpus=2, settings=example_settings,
                    scheduler=example_settings.scheduler.name))
    assert admission.decisions() == before + 1, "OPA did not decide the GPU pod"
    assert placement(kube, USER_NAMESPACE, "train-binpack") == "gpu-node-1"


def test_pod_without_gpus_is_admitted_without_asking_opa(admission):
    kube = admission.cp.admin
    before = admission.decisions()
    kube.create(pod("web", USER_NAMESPACE))
    assert admission.decisions() == before, "a pod without GPUs was sent to OPA"
    assert placement(kube, USER_NAMESPACE, "web") == "cpu-node-1"


def test_gpu_pod_in_an_exempt_namespace_is_admitted_without_asking_opa(admission,
                                                                        example_settings):
    kube = admission.cp.admin
    namespace = example_settings.gpu_operator.namespace
    assert namespace in admission_of(example_settings).exempt_namespaces
    before = admission.decisions()
    kube.create(pod("validator", namespace, gpus=1, settings=example_settings))
    assert admission.decisions() == before


def test_nobody_may_read_or_change_opas_policy_through_its_api(admission, example_settings):
    caller = requests.Session()
    caller.trust_env = False
    # A caller inside the cluster, at a pod's address: the certificate names the Service, which
    # the API server verifies (every test above goes through it); this one is about what OPA
    # lets any caller do.
    caller.verify = False
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    address = admission.opa_pods()[0].address
    url = f"https://{address}:{example_settings.admission.webhook_port}"
    for token in (None, "any-token"):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for method, path in [("GET", "/v1/policies"), ("PUT", "/v1/policies/x"),
                             ("GET", "/v1/data"), ("PUT", "/v1/data/gpu_platform"),
                             ("POST", "/v1/data/system/authz/allow")]:
            response = caller.request(method, url + path, headers=headers, timeout=5,
                                      data="package x" if method == "PUT" else None)
            assert response.status_code == 401, f"{method} {path}: {response.status_code}"


# --- the ways around the rules, each closed ---------------------------------------------------

def admitted(kube, obj) -> bool:
    """Whether the API server would create `obj` now (a dry run)."""
    try:
        kube.create(obj, dry_run=True)
        return True
    except ApiError:
        return False


def refusal(kube, obj) -> str:
    with pytest.raises(ApiError) as refused:
        kube.create(obj)
    assert refused.value.status == 403, refused.value.message
    return refused.value.message


def test_gpu_pod_naming_its_node_is_refused_even_on_the_binpack_scheduler(admission,
                                                                          example_settings):
    message = refusal(admission.cp.admin, pod(
        "pinned", USER_NAMESPACE, gpus=1, settings=example_settings,
        scheduler=example_settings.scheduler.name, node_name="gpu-node-1"))
    assert f'pod "{USER_NAMESPACE}/pinned": spec.nodeName "gpu-node-1" skips the scheduler' \
        in message


def test_cpu_pod_naming_a_gpu_node_is_refused_and_one_naming_a_cpu_node_is_not(admission):
    kube = admission.cp.admin
    message = refusal(kube, pod("squatter", USER_NAMESPACE, node_name="gpu-node-1"))
    assert "it is a GPU node" in message
    kube.create(pod("pinned-web", USER_NAMESPACE, node_name="cpu-node-1"))


def gpu_resource_pod(name: str, resource: str) -> dict:
    obj = pod(name, USER_NAMESPACE)
    obj["spec"]["containers"][0]["resources"]["limits"] = {resource: "1"}
    return obj


@pytest.mark.parametrize("resource", ["nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"])
def test_renamed_shared_gpus_are_guarded(admission, resource):
    message = refusal(admission.cp.admin, gpu_resource_pod("shared", resource))
    assert f"requests {resource} but spec.schedulerName is" in message


def tolerating(name: str, settings) -> dict:
    obj = pod(name, USER_NAMESPACE)
    obj["spec"]["tolerations"] = [settings.gpu_nodes.taint.toleration()]
    return obj


def test_cpu_pod_tolerating_the_gpu_taint_is_refused_but_a_daemonsets_pod_is_not(
        admission, example_settings):
    message = refusal(admission.cp.admin, tolerating("sidecar-on-gpu", example_settings))
    assert "requests no GPU but tolerates the GPU node taint" in message
    agent = tolerating("node-agent-x1", example_settings)
    agent["metadata"]["ownerReferences"] = [{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent",
        "uid": "6a1c7f0e-0000-4000-8000-000000000001", "controller": True}]
    daemonsets = admission.cp.impersonating(
        "system:serviceaccount:kube-system:daemon-set-controller")
    daemonsets.create(agent)
    # The same pod from a user who names a DaemonSet as its owner is still refused.
    agent["metadata"]["name"] = "node-agent-forged"
    assert "tolerates the GPU node taint" in refusal(admission.cp.admin, agent)


def test_a_gpu_toleration_added_later_is_refused(admission, example_settings):
    kube = admission.cp.admin
    kube.create(pod("grows-a-toleration", USER_NAMESPACE))
    with pytest.raises(ApiError) as refused:
        kube.request("PATCH", kube.path("v1", "Pod", USER_NAMESPACE, "grows-a-toleration"),
                     body={"spec": {"tolerations": [
                         example_settings.gpu_nodes.taint.toleration()]}},
                     content_type="application/strategic-merge-patch+json")
    assert refused.value.status == 403
    assert "tolerates the GPU node taint" in refused.value.message


def test_visible_devices_and_the_nvidia_runtime_class_without_a_gpu_are_refused(admission):
    kube = admission.cp.admin
    env_pod = pod("sees-all", USER_NAMESPACE)
    env_pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                "value": "all"}]
    assert 'container "main" sets NVIDIA_VISIBLE_DEVICES' in refusal(kube, env_pod)
    kube.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": "nvidia"}, "handler": "nvidia"}, TEST_MANAGER)
    runtime_pod = pod("nvidia-runtime", USER_NAMESPACE)
    runtime_pod["spec"]["runtimeClassName"] = "nvidia"
    assert 'spec.runtimeClassName is "nvidia"' in refusal(kube, runtime_pod)


def test_debug_container_cannot_see_a_running_gpu_pods_node(admission, example_settings):
    kube = admission.cp.admin
    kube.create(pod("train-debugged", USER_NAMESPACE, gpus=1, settings=example_settings,
                    scheduler=example_settings.scheduler.name))
    assert placement(kube, USER_NAMESPACE, "train-debugged") == "gpu-node-1"
    debugger = {"name": "debugger", "image": "busybox:1", "env": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    with pytest.raises(ApiError) as refused:
        kube.request("PATCH", kube.path("v1", "Pod", USER_NAMESPACE, "train-debugged",
                                        "ephemeralcontainers"),
                     body={"spec": {"ephemeralContainers": [debugger]}},
                     content_type="application/strategic-merge-patch+json")
    assert refused.value.status == 403
    assert 'ephemeral container "debugger" sets NVIDIA_VISIBLE_DEVICES' in refused.value.message


def test_privileged_gpu_pod_is_refused(admission, example_settings):
    obj = pod("privileged-train", USER_NAMESPACE, gpus=1, settings=example_settings,
              scheduler=example_settings.scheduler.name)
    obj["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert 'container "main" is privileged, and it may run on a GPU node' in refusal(
        admission.cp.admin, obj)


def test_a_sidecar_that_the_toolkit_would_treat_as_privileged_is_refused(admission,
                                                                         example_settings):
    """A container that asks for no GPU but adds CAP_SYS_ADMIN, in a GPU pod: the NVIDIA
    container toolkit would treat it as privileged and show it every GPU of the node."""
    obj = pod("sidecar-sees-all", USER_NAMESPACE, gpus=1, settings=example_settings,
              scheduler=example_settings.scheduler.name)
    obj["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1",
                                      "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}})
    message = refusal(admission.cp.admin, obj)
    assert 'container "sidecar" adds the capability SYS_ADMIN' in message


def test_a_chart_that_keeps_zero_gpus_is_a_pod_without_gpus(admission):
    """`nvidia.com/gpu: 0` asks for nothing: such a pod goes where pods without GPUs go."""
    kube = admission.cp.admin
    obj = gpu_resource_pod("cpu-variant", "nvidia.com/gpu")
    obj["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "0"}
    kube.create(obj)
    assert placement(kube, USER_NAMESPACE, "cpu-variant") == "cpu-node-1"
    obj["metadata"]["name"] = "cpu-variant-on-gpu-nodes"
    obj["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert "requests no GPU but tolerates the GPU node taint" in refusal(kube, obj)


def daemonset(name: str, container: dict, **spec) -> dict:
    """A node agent as users write them: tolerating every taint, so on every node."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": USER_NAMESPACE},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"tolerations": [{"operator": "Exists"}], "containers": [container],
                         "terminationGracePeriodSeconds": 0, **spec}}}}


def test_a_users_daemonset_runs_on_gpu_nodes_only_without_device_paths(admission):
    """The real DaemonSet controller creates the pods: a log agent reading /var/log runs on the
    GPU node too; a privileged agent is refused there, and the controller's events say why."""
    kube = admission.cp.admin
    kube.create(daemonset("log-agent", {"name": "agent", "image": "busybox:1",
                                        "volumeMounts": [{"name": "logs",
                                                          "mountPath": "/var/log"}]},
                          volumes=[{"name": "logs", "hostPath": {"path": "/var/log"}}]))
    wait_until(lambda: {p["spec"].get("nodeName") for p in kube.list(
        "v1", "Pod", USER_NAMESPACE, labelSelector="app=log-agent")} >= {"gpu-node-1",
                                                                         "cpu-node-1"},
        "the log agent on every node", timeout=30)
    kube.create(daemonset("node-debugger", {"name": "debugger", "image": "busybox:1",
                                            "securityContext": {"privileged": True}}))

    def refused_events() -> list[str]:
        return [e["message"] for e in kube.list("v1", "Event", USER_NAMESPACE)
                if e["involvedObject"].get("name") == "node-debugger"
                and e.get("reason") == "FailedCreate"]
    messages = wait_until(refused_events, "the DaemonSet controller to report the refusal",
                          timeout=30)
    print("\nDaemonSet refused:", messages[0])
    assert 'container "debugger" is privileged, and it may run on a GPU node (it tolerates ' \
           "the GPU node taint" in messages[0]
    assert kube.list("v1", "Pod", USER_NAMESPACE, labelSelector="app=node-debugger") == []


def test_gpu_pods_cannot_outrank_others_into_preempting_them(admission, example_settings):
    """Preemption serves only pods that opted in to it: a GPU pod naming a class above
    admission.maxGpuPodPriority (the API server has resolved its priority by the time OPA sees
    it) is refused, and so is a bare pod in the preemptible class, which nothing would bring
    back; a pod naming no class is not affected."""
    kube, settings = admission.cp.admin, example_settings

    def gpu_pod(name: str, priority_class: str = "") -> dict:
        obj = pod(name, USER_NAMESPACE, gpus=1, settings=settings,
                  scheduler=settings.scheduler.name)
        if priority_class:
            obj["spec"]["priorityClassName"] = priority_class
        return obj

    kube.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "urgent"}, "value": 1000}, TEST_MANAGER)
    message = refusal(kube, gpu_pod("jumps-the-queue", "urgent"))
    assert 'priorityClassName "urgent" gives it priority 1000, above 0' in message
    assert "would preempt other users' GPU pods" in message
    assert "priority 2000000000" in refusal(kube, gpu_pod("poses-as-system",
                                                          "system-cluster-critical"))
    preemptible = settings.scheduler.preemptible_class.name
    assert "gone for good once preempted" in refusal(kube, gpu_pod("bare-preemptible",
                                                                   preemptible))
    kube.create(gpu_pod("no-class"))
    assert kube.get("v1", "Pod", "no-class", USER_NAMESPACE)["spec"]["priority"] == 0


def test_gpu_claims_through_dynamic_resource_allocation_are_refused(admission):
    kube = admission.cp.admin
    if not kube.serves("resource.k8s.io/v1", "ResourceClaim"):
        pytest.skip("this API server serves no resource.k8s.io/v1")
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "one-gpu", "namespace": USER_NAMESPACE},
             "spec": {"devices": {"requests": [
                 {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    message = refusal(kube, claim)
    assert 'asks for devices of the device class "gpu.nvidia.com" through Dynamic Resource ' \
           "Allocation" in message
    # A generic class whose selector reaches the driver without naming it: refused by its class.
    claim["metadata"]["name"] = "reaches-the-driver"
    claim["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": "everything.example.com",
        "selectors": [{"cel": {"expression": "device.driver.endsWith('.com')"}}]}
    assert 'the device class "everything.example.com"' in refusal(kube, claim)


def test_a_gpu_claim_made_before_the_platform_can_still_lose_its_finalizer(admission,
                                                                           declared):
    """A claim the policy would refuse, made while no webhook was registered: deleting it must
    finish, so the update that removes its finalizer is not the policy's business."""
    kube = admission.cp.admin
    if not kube.serves("resource.k8s.io/v1", "ResourceClaim"):
        pytest.skip("this API server serves no resource.k8s.io/v1")
    webhook = find(declared.objects, "ValidatingWebhookConfiguration", "gpu-platform-admission")
    kube.delete("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration",
                webhook["metadata"]["name"])
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "before-the-platform", "namespace": USER_NAMESPACE,
                          "finalizers": ["example.com/cleanup"]},
             "spec": {"devices": {"requests": [
                 {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    try:
        # The API server drops a deleted webhook within moments.
        wait_until(lambda: admitted(kube, claim), "the webhook to be gone", timeout=15)
        kube.create(claim)
    finally:
        kube.apply(webhook, TEST_MANAGER)
    wait_until(lambda: not gpu_pod_admitted_on(kube, admission.settings, scheduler=None),
               "the webhook to take effect again", timeout=15)
    assert "gpu.nvidia.com" in refusal(kube, {**claim, "metadata": {
        "name": "after-the-platform", "namespace": USER_NAMESPACE}})
    kube.delete("resource.k8s.io/v1", "ResourceClaim", "before-the-platform", USER_NAMESPACE)
    kube.merge_patch("resource.k8s.io/v1", "ResourceClaim", "before-the-platform",
                     {"metadata": {"finalizers": None}}, USER_NAMESPACE,
                     what="remove the claim's finalizer")
    wait_until(lambda: not [c for c in kube.list("resource.k8s.io/v1", "ResourceClaim",
                                                  USER_NAMESPACE)
                            if c["metadata"]["name"] == "before-the-platform"],
               "the claim to be gone", timeout=15)


def gpu_pod_with(settings: StackSettings, name: str, **spec) -> dict:
    """A GPU pod on the binpack scheduler with `spec` added."""
    obj = pod(name, USER_NAMESPACE, gpus=1, settings=settings, scheduler=settings.scheduler.name)
    obj["spec"].update(spec)
    return obj


# Host paths the API server accepts, each reaching a GPU device, the driver or a runtime's
# socket on the node under a spelling of its own.
HOST_PATH_SPELLINGS = ["//dev", "/./dev/nvidia0", "dev", "/var//run/./containerd",
                       "/run/k3s/containerd/containerd.sock", "/var/run/docker.sock",
                       "/lib/x86_64-linux-gnu", "/local/var/lib/kubelet/device-plugins"]


@pytest.mark.parametrize("path", HOST_PATH_SPELLINGS)
def test_a_host_path_is_decided_as_the_node_resolves_it(admission, example_settings, path):
    kube = admission.cp.admin
    obj = gpu_pod_with(example_settings, "spelled-around",
                       volumes=[{"name": "host", "hostPath": {"path": path}}])
    assert f"mounts the host path {path}, which holds GPU devices or driver files" in \
        refusal(kube, obj)


def test_the_hosts_ipc_and_the_toolkits_device_list_are_refused(admission, example_settings):
    kube = admission.cp.admin
    assert "spec.hostIPC shares the node's shared memory" in refusal(
        kube, gpu_pod_with(example_settings, "host-ipc", hostIPC=True))
    listed = gpu_pod_with(example_settings, "device-list",
                          volumes=[{"name": "scratch", "emptyDir": {}}])
    listed["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "//var/run/./nvidia-container-devices/all"}]
    assert "where the NVIDIA container toolkit reads which GPUs to give it" in \
        refusal(kube, listed)


def test_where_node_pools_taint_the_gpu_nodes_a_pod_bound_by_name_gets_no_runtime_socket(
        admission, example_settings):
    """The headline way around string paths: a pod without GPUs or tolerations, bound by name,
    mounting the container runtime's socket spelled with doubled slashes: root on any node, GPU
    nodes among them, where node pools taint their own."""
    kube = admission.cp.admin
    nodes = example_settings.gpu_nodes.model_copy(update={"tainted_by": "nodePool",
                                                          "names": [], "labels": {}})
    roll_out(admission, example_settings.model_copy(update={"gpu_nodes": nodes}), "node pools")
    try:
        obj = pod("socket", USER_NAMESPACE, node_name="cpu-node-1")
        obj["spec"]["volumes"] = [{"name": "runtime", "hostPath": {
            "path": "//run//containerd/containerd.sock"}}]
        message = refusal(kube, obj)
        assert "mounts the host path //run//containerd/containerd.sock" in message
        assert 'spec.nodeName "cpu-node-1" may be a GPU node' in message
    finally:
        roll_out(admission, example_settings, "named GPU nodes")


def test_pods_without_a_gpu_concern_never_reach_opa_in_a_burst(admission, example_settings):
    """Pods without GPUs, and their updates (labels, annotations, a finalizer), from many
    clients: none is sent to OPA, so none waits for it."""
    ensure_namespace(admission.cp.admin, "web")
    before = admission.decisions()

    def cpu_pod(index: int) -> tuple[str, dict]:
        return "cpu", pod(f"web-{index}", "web")

    created = create_pods(admission, cpu_pod, clients=16, dry_run=False, count=300)
    kube = admission.cp.admin
    for index in range(100):
        kube.merge_patch("v1", "Pod", f"web-{index}", {"metadata": {
            "labels": {"tier": "frontend"}, "annotations": {"example.com/owner": "web"},
            "finalizers": ["example.com/keep"]}}, "web", what="update a pod")
    try:
        assert [error for _, _, _, error in created if error] == []
        print(f"\n300 pods without GPUs and 100 updates: {admission.decisions() - before:.0f} "
              f"decisions by OPA")
        assert admission.decisions() == before
    finally:
        for index in range(100):
            kube.merge_patch("v1", "Pod", f"web-{index}", {"metadata": {"finalizers": None}},
                             "web", what="remove the finalizer")
        admission.cp.admin.request("DELETE", "/api/v1/namespaces/web/pods",
                                   params={"gracePeriodSeconds": "0"})


def test_binpack_scheduler_cannot_touch_the_cluster_schedulers_lease(admission,
                                                                     example_settings):
    cp, sched = admission.cp, example_settings.scheduler
    cp.admin.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "kube-scheduler", "namespace": "kube-system"},
                    "spec": {"holderIdentity": "control-plane-1"}}, TEST_MANAGER)
    scheduler = cp.client(cp.service_account_token(sched.namespace, sched.name))
    for method in ("GET", "PUT"):
        with pytest.raises(ApiError) as refused:
            scheduler.request(method, scheduler.path("coordination.k8s.io/v1", "Lease",
                                                     "kube-system", "kube-scheduler"),
                              body=None if method == "GET" else cp.admin.get(
                                  "coordination.k8s.io/v1", "Lease", "kube-scheduler",
                                  "kube-system"))
        assert refused.value.status == 403


# --- the mutate and audit modes ----------------------------------------------------------------

# How long a rolled-out policy change may take to reach every OPA pod behind the webhook:
# each new pod loads the policy at start and is ready within seconds, and the Deployment
# replaces the pods one at a time, none before the next is ready.
ROLLOUT_SECONDS = 60


def switch_mode(admission: Admission, settings: StackSettings, mode: str) -> StackSettings:
    """Roll the stack to another admission mode (see roll_out)."""
    adm = settings.admission.model_copy(update={
        "mode": mode, "failure_policy": "Ignore" if mode == "audit" else "Fail"})
    return roll_out(admission, settings.model_copy(update={"admission": adm}), f"mode {mode}")


def roll_out(admission: Admission, changed: StackSettings, what: str) -> StackSettings:
    """Roll the stack onto changed settings as `pulumi up` does: a new OPA generation (its
    ConfigMaps, Service and Deployment, each replacing the old one, created first), then, once
    its pods are ready, both webhook configurations, built from the changed settings, which
    call its Service; the old generation's objects are deleted last."""
    adm, inputs = changed.admission, admission_of(changed)
    cp = admission.cp
    # One `pulumi up` after another: the last one's old generation has handed over (an up
    # takes longer than OPA's shutdown wait).
    wait_until(lambda: not admission.kubelet.terminating_in(adm.namespace),
               "the old OPA generation to be gone", timeout=60)
    started = time.monotonic()
    old = admission.current
    new_generation = opa_admission.generation(inputs) != opa_admission.generation(old)
    for obj in [*opa_admission.policy_config_maps(inputs), opa_admission.service(inputs),
                opa_admission.deployment(inputs)]:
        cp.admin.apply(obj, TEST_MANAGER)
    admission.current = inputs
    wait_until(lambda: admission.serving(adm.replicas),
               f"the OPA pods of {what} ready behind their Service", timeout=ROLLOUT_SECONDS,
               explain=lambda: kubelet_state(admission))
    print(f"\npolicy change to {what}: its OPA pods ready after "
          f"{time.monotonic() - started:.1f} s")
    cp.admin.apply(opa_admission.webhook_configuration(inputs, admission.ca_bundle),
                   TEST_MANAGER)
    mutating = opa_admission.mutating_webhook_configuration(inputs, admission.ca_bundle)
    if mutating:
        cp.admin.apply(mutating, TEST_MANAGER)
    else:
        cp.admin.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                        "gpu-platform-admission")
    if new_generation:
        delete_generation(cp, old)
    return changed


def delete_generation(cp: ControlPlane, inputs: OpaAdmissionInputs) -> None:
    """Delete an OPA generation's objects, as the engine deletes replaced resources: its pods
    then end gracefully (the kubelet gives them their grace period)."""
    for obj in [opa_admission.deployment(inputs), opa_admission.service(inputs),
                *opa_admission.policy_config_maps(inputs)]:
        cp.admin.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                        obj["metadata"]["namespace"], propagation="Background")


def bare_gpu_pod(name: str) -> dict:
    """A GPU pod as a vendor's chart writes it: no scheduler, no tolerations."""
    return pod(name, USER_NAMESPACE, gpus=1)


def test_mutate_fixes_a_gpu_pod_that_the_binpack_scheduler_then_binds(admission,
                                                                      example_settings):
    kube = admission.cp.admin
    settings = switch_mode(admission, example_settings, "mutate")
    try:
        wait_until(lambda: kube.create(bare_gpu_pod("probe-mutate"), dry_run=True)["spec"][
            "schedulerName"] == settings.scheduler.name, "the mutating webhook to take effect",
            timeout=15)
        created = kube.create(bare_gpu_pod("vendor-chart-pod"))
        assert created["spec"]["schedulerName"] == settings.scheduler.name
        assert settings.gpu_nodes.taint.toleration() in created["spec"]["tolerations"]
        assert placement(kube, USER_NAMESPACE, "vendor-chart-pod") == "gpu-node-1"
        # What cannot be fixed is still refused.
        pinned = bare_gpu_pod("vendor-pinned")
        pinned["spec"]["nodeName"] = "gpu-node-1"
        assert "skips the scheduler" in refusal(kube, pinned)
    finally:
        switch_mode(admission, example_settings, "enforce")


def test_audit_admits_with_the_warning_kubectl_shows_and_labels_the_pod(admission,
                                                                        example_settings):
    kube = admission.cp.admin
    switch_mode(admission, example_settings, "audit")
    try:
        def admitted_with_warning():
            try:
                kube.create(bare_gpu_pod("probe-audit"), dry_run=True)
            except ApiError:
                return False
            return bool(kube.warnings)
        wait_until(admitted_with_warning, "audit mode to take effect", timeout=15)
        created = kube.create(bare_gpu_pod("audited"))
        print("\nwarnings:", kube.warnings)
        assert any(w.startswith(f'gpu-platform audit: pod "{USER_NAMESPACE}/audited": '
                                f'container "main" requests nvidia.com/gpu but '
                                f'spec.schedulerName is "default-scheduler"')
                   for w in kube.warnings), kube.warnings
        assert created["metadata"]["labels"][AUDIT_LABEL] == "violation"
    finally:
        switch_mode(admission, example_settings, "enforce")
    assert "spec.schedulerName" in refusal(kube, bare_gpu_pod("after-audit"))


def test_audit_labels_a_violation_an_update_makes(admission, example_settings):
    """A toleration of the GPU taint added to a running pod without GPUs, and a privileged debug
    container added to a GPU pod: admitted in audit mode, each with the warning, and labelled."""
    kube = admission.cp.admin
    kube.create(pod("web-later-tolerating", USER_NAMESPACE))
    kube.create(gpu_pod_with(example_settings, "train-audit-debug"))
    switch_mode(admission, example_settings, "audit")
    try:
        wait_until(lambda: admitted(kube, bare_gpu_pod("probe-audit")) and bool(kube.warnings),
                   "audit mode to take effect", timeout=15)
        toleration = example_settings.gpu_nodes.taint.toleration()
        updated = kube.merge_patch("v1", "Pod", "web-later-tolerating",
                                   {"spec": {"tolerations": [toleration]}}, USER_NAMESPACE,
                                   what="add the GPU toleration")
        assert any("tolerates the GPU node taint" in w for w in kube.warnings), kube.warnings
        assert updated["metadata"]["labels"][AUDIT_LABEL] == "violation"
        debugged = kube.request(
            "PATCH", kube.path("v1", "Pod", USER_NAMESPACE, "train-audit-debug",
                               "ephemeralcontainers"),
            body={"spec": {"ephemeralContainers": [{"name": "root-shell", "image": "busybox:1",
                                                    "securityContext": {"privileged": True}}]}},
            content_type="application/strategic-merge-patch+json")
        assert any('ephemeral container "root-shell" is privileged' in w
                   for w in kube.warnings), kube.warnings
        # The API server keeps only the ephemeral containers from this request: the warning,
        # and the API server's audit log, tell of it, not a label.
        assert AUDIT_LABEL not in debugged["metadata"].get("labels", {})
    finally:
        switch_mode(admission, example_settings, "enforce")


def test_where_node_pools_taint_the_gpu_nodes_a_debug_container_gets_no_device_path(
        admission, example_settings):
    """In a node-pool stack the policy knows no GPU node's name, so a pod bound to any node may
    be on one: a privileged debug container added to it is refused, while an unprivileged one
    is added."""
    kube = admission.cp.admin
    kube.create(pod("web-to-debug", USER_NAMESPACE))
    assert placement(kube, USER_NAMESPACE, "web-to-debug") == "cpu-node-1"
    nodes = example_settings.gpu_nodes.model_copy(update={"tainted_by": "nodePool",
                                                          "names": [], "labels": {}})
    roll_out(admission, example_settings.model_copy(update={"gpu_nodes": nodes}), "node pools")
    try:
        def add_debugger(name: str, security: dict) -> None:
            kube.request("PATCH", kube.path("v1", "Pod", USER_NAMESPACE, "web-to-debug",
                                            "ephemeralcontainers"),
                         body={"spec": {"ephemeralContainers": [
                             {"name": name, "image": "busybox:1", "securityContext": security}]}},
                         content_type="application/strategic-merge-patch+json")
        with pytest.raises(ApiError) as refused:
            add_debugger("root-shell", {"privileged": True})
        assert refused.value.status == 403
        assert ('spec.nodeName "cpu-node-1" may be a GPU node (GPU nodes are not named in this '
                "stack)") in refused.value.message
        add_debugger("shell", {})
    finally:
        roll_out(admission, example_settings, "named GPU nodes")


def probe_of_a_later_run(declared, run: str) -> dict:
    """The declared reachability probe as a later `pulumi up` applies it when the way to OPA
    has changed (a new fingerprint)."""
    probe = copy.deepcopy(find(declared.objects, "ConfigMap", opa_admission.REACHABILITY_PROBE))
    probe["data"]["fingerprint"] = run
    return probe


def test_the_reachability_probe_is_admitted_by_opa_itself(admission, declared):
    kube, asked = admission.cp.admin, admission.decisions()
    for dry_run in (True, False):       # preview, then up
        kube.apply(probe_of_a_later_run(declared, "reachable"), TEST_MANAGER, dry_run=dry_run)
    assert admission.decisions() == asked + 2


# --- restarts and bursts -----------------------------------------------------------------------

# How soon OPA decides again after its container or pod restarts: it loads the policy from the
# pod's volumes in well under a second; the rest is the kubelet's restart and readiness probe.
RESTART_SECONDS = 10


def client(admission: Admission):
    """A client of its own, for a thread."""
    cp = admission.cp
    return type(cp.admin)(cp.server, cp.ca_file, cert=cp.admin_cert)


def test_an_opa_container_killed_comes_back_with_its_policy_by_itself(admission,
                                                                     example_settings):
    """As when the kernel kills OPA at its memory limit: the kubelet restarts the container,
    which loads the policy from the pod's volumes again, with no other component's help."""
    replicas = example_settings.admission.replicas
    victim = admission.opa_pods()[0]
    killed = time.monotonic()
    admission.kubelet.kill(victim, "opa")
    wait_until(lambda: victim.containers["opa"].restarts == 1 and admission.serving(replicas),
               "the killed OPA container to be restarted and ready", timeout=RESTART_SECONDS,
               explain=lambda: kubelet_state(admission))
    print(f"\nOPA container killed: restarted and ready again after "
          f"{time.monotonic() - killed:.1f} s")
    stored = admission.cp.admin.get("v1", "Pod", victim.name,
                                    example_settings.admission.namespace)
    assert stored["status"]["containerStatuses"][0]["restartCount"] == 1
    before = admission.decisions()
    for index in range(4):      # both replicas decide again
        assert gpu_pod_admitted(admission.cp.admin, example_settings, f"after-kill-{index}")
    assert admission.decisions() == before + 4


def test_a_deleted_opa_pod_is_replaced_by_one_that_decides(admission, example_settings):
    """The whole pod gone (a node drained, a pod deleted): its ReplicaSet's replacement loads
    the policy from its own volumes."""
    adm = example_settings.admission
    victim = admission.opa_pods()[0]
    deleted = time.monotonic()
    admission.cp.admin.delete("v1", "Pod", victim.name, adm.namespace)
    wait_until(lambda: victim.uid not in {p.uid for p in admission.opa_pods()}
               and admission.serving(adm.replicas),
               "a replacement OPA pod ready behind the Service", timeout=30,
               explain=lambda: kubelet_state(admission))
    print(f"\nOPA pod deleted: replaced and ready after {time.monotonic() - deleted:.1f} s")
    assert gpu_pod_admitted(admission.cp.admin, example_settings)


Result = tuple[float, str, float, str]       # start, kind, seconds, error ("" if admitted)


def create_pods(admission: Admission, make: Callable[[int], tuple[str, dict]], clients: int,
                dry_run: bool, count: int = 0, during: Callable[[], None] | None = None
                ) -> list[Result]:
    """Pods made by `make(index)` created from `clients` threads: `count` of them, or as many
    as they manage while `during` runs."""
    results: list[Result] = []
    lock = threading.Lock()
    done = threading.Event()
    indices = iter(range(count)) if count else itertools.count()

    def create() -> None:
        kube = client(admission)
        while not done.is_set():
            with lock:
                index = next(indices, None)
            if index is None:
                return
            kind, obj = make(index)
            started = time.monotonic()
            try:
                kube.create(obj, dry_run=dry_run)
                error = ""
            except ApiError as refused:
                error = refused.message
            with lock:
                results.append((started, kind, time.monotonic() - started, error))

    threads = [threading.Thread(target=create) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        if during is not None:
            during()
    finally:
        if during is not None:
            done.set()
        for thread in threads:
            thread.join()
    return sorted(results)


def test_a_burst_of_gpu_pods_through_the_webhook_is_admitted_without_errors(admission,
                                                                           example_settings):
    """Many GPU pods at once from many clients, each asked of OPA: every one admitted. They ask
    for a node that does not exist, so none is bound, and they are removed afterwards."""
    settings, namespace = example_settings, "burst"
    ensure_namespace(admission.cp.admin, namespace)

    def gpu_pod(index: int) -> tuple[str, dict]:
        obj = pod(f"burst-{index}", namespace, gpus=1, settings=settings,
                  scheduler=settings.scheduler.name)
        obj["spec"]["nodeSelector"] = {"gpu-platform.io/burst": "nowhere"}
        return "gpu", obj

    before = admission.decisions()
    try:
        results = create_pods(admission, gpu_pod, clients=16, dry_run=False, count=400)
    finally:
        admission.cp.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                                   params={"gracePeriodSeconds": "0"})
    errors = [error for _, _, _, error in results if error]
    latencies = sorted(seconds for _, _, seconds, _ in results)
    elapsed = results[-1][0] + results[-1][2] - results[0][0]
    print(f"\n400 GPU pods by 16 clients in {elapsed:.1f} s: create p50 "
          f"{statistics.median(latencies) * 1000:.0f} ms, p99 "
          f"{latencies[int(len(latencies) * 0.99) - 1] * 1000:.0f} ms, {len(errors)} errors")
    assert errors == []
    assert admission.decisions() >= before + 400


def test_opa_killed_mid_burst_refuses_gpu_pods_only_until_it_is_back(admission,
                                                                     example_settings):
    """Both replicas killed while pods are being created: pods without GPUs never notice (OPA is
    never asked about them); GPU pods are refused (failure policy Fail) until OPA is back, and
    admitted again within seconds."""
    settings = example_settings
    replicas = settings.admission.replicas
    killed_at: list[float] = []

    def mixed(index: int) -> tuple[str, dict]:
        if index % 2:
            return "cpu", pod(f"mixed-{index}", USER_NAMESPACE)
        return "gpu", pod(f"mixed-{index}", USER_NAMESPACE, gpus=1, settings=settings,
                          scheduler=settings.scheduler.name)

    def kill_both() -> None:
        time.sleep(1.0)
        killed_at.append(time.monotonic())
        for running in admission.opa_pods():
            admission.kubelet.kill(running, "opa")
        wait_until(lambda: admission.serving(replicas), "both OPA replicas back",
                   timeout=RESTART_SECONDS, explain=lambda: kubelet_state(admission))
        time.sleep(2.0)     # GPU pods admitted again, for a while

    results = create_pods(admission, mixed, clients=4, dry_run=True, during=kill_both)
    (killed,) = killed_at
    cpu_errors = [error for _, kind, _, error in results if kind == "cpu" and error]
    gpu = [(start, error) for start, kind, _, error in results if kind == "gpu"]
    refused = [start for start, error in gpu if error]
    assert cpu_errors == [], cpu_errors[:3]
    early = [error for start, kind, seconds, error in results
             if kind == "gpu" and error and start + seconds < killed]
    assert early == [], f"GPU pods refused before OPA was killed: {early[:3]}"
    last_refused = max(refused, default=killed) - killed
    admitted_after = [start for start, error in gpu if start > killed + last_refused]
    print(f"\nboth OPA replicas killed mid-burst: {len(results)} pods created by 4 clients, "
          f"{len(refused)} GPU pods refused, the last {last_refused:.1f} s after the kill; "
          f"{len(admitted_after)} GPU pods admitted after it; no pod without GPUs refused")
    assert last_refused < RESTART_SECONDS
    assert len(admitted_after) >= 10
    for error in (error for _, error in gpu if error):
        assert settings.admission.webhook_name in error, error


# Policy changes rolled out in a row while GPU pods are being created.
ROLLOUTS = 5


def test_policy_rollouts_under_a_burst_of_gpu_pods_refuse_none(admission, example_settings):
    """Five policy changes rolled out, one after another, while 16 clients create GPU pods: each
    is a new OPA generation that the webhooks switch to once it is ready, and the old one is
    removed once nothing calls it, so no GPU pod is refused. (Each change exempts one more
    namespace; the last rollout brings the example stack's policy back.)"""
    settings = example_settings
    durations: list[float] = []

    def roll_in_turn() -> None:
        for index in range(ROLLOUTS + 1):
            exempt = [f"rollout-{i}" for i in range(index + 1)] if index < ROLLOUTS else []
            changed = settings.model_copy(update={"admission": settings.admission.model_copy(
                update={"exempt_namespaces": settings.admission.exempt_namespaces + exempt})})
            started = time.monotonic()
            roll_out(admission, changed, f"{len(exempt)} more exempt namespaces")
            durations.append(time.monotonic() - started)

    def gpu_pod(index: int) -> tuple[str, dict]:
        return "gpu", pod(f"rolling-{index}", USER_NAMESPACE, gpus=1, settings=settings,
                          scheduler=settings.scheduler.name)

    results = create_pods(admission, gpu_pod, clients=16, dry_run=True, during=roll_in_turn)
    refused = [error for _, _, _, error in results if error]
    latencies = sorted(seconds for _, _, seconds, _ in results)
    print(f"\n{len(durations)} policy rollouts ({', '.join(f'{d:.1f}' for d in durations)} s) "
          f"under {len(results)} GPU pod creations by 16 clients: {len(refused)} refused; "
          f"create p50 {statistics.median(latencies) * 1000:.0f} ms, p99 "
          f"{latencies[int(len(latencies) * 0.99) - 1] * 1000:.0f} ms")
    assert len(results) >= 1000
    assert refused == [], refused[:3]


def test_with_opa_down_the_failure_policy_holds_and_other_pods_still_schedule(
        admission, example_settings, declared):
    """No OPA pod at all (the Deployment scaled to zero): the next `pulumi up` stops at the
    reachability probe, GPU pods are refused, and everything else goes on."""
    kube, adm = admission.cp.admin, example_settings.admission
    kube.merge_patch("apps/v1", "Deployment", admission.generation_name(),
                     {"spec": {"replicas": 0}},
                     adm.namespace, "scale", what="scale OPA to zero")
    try:
        wait_until(lambda: not admission.opa_pods() and not admission.ready_endpoints()
                   and not admission.kubelet.terminating_in(adm.namespace),
                   "every OPA pod gone", timeout=60)
        # The next `pulumi up` (and its preview) stops at the reachability probe, naming the
        # webhook and the cause, whatever the failure policy of the pod webhook.
        for dry_run in (True, False):
            with pytest.raises(ApiError) as unreachable:
                kube.apply(probe_of_a_later_run(declared, "unreachable"), TEST_MANAGER,
                           dry_run=dry_run)
            print("\nreachability probe refused:", unreachable.value.message)
            assert unreachable.value.status == 500
            assert f'failed calling webhook "{adm.reachability_webhook_name}"' \
                in unreachable.value.message
        # No other ConfigMap asks OPA.
        kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "app-config", "namespace": USER_NAMESPACE}})
        gpu_pod = pod("train-while-opa-down", USER_NAMESPACE, gpus=1, settings=example_settings,
                      scheduler=example_settings.scheduler.name)
        with pytest.raises(ApiError) as refused:
            kube.create(gpu_pod)
        assert refused.value.status == 500
        assert adm.webhook_name in refused.value.message
        kube.create(pod("web-while-opa-down", USER_NAMESPACE))
        assert placement(kube, USER_NAMESPACE, "web-while-opa-down") == "cpu-node-1"
    finally:
        kube.merge_patch("apps/v1", "Deployment", admission.generation_name(),
                         {"spec": {"replicas": adm.replicas}}, adm.namespace, "scale",
                         what="scale OPA back")
    wait_until(lambda: admission.serving(adm.replicas), "OPA back", timeout=30)


# --- adopting the platform on a cluster that already runs GPU work -----------------------------

def adoption_report(admission: Admission) -> tuple[int, list[dict]]:
    """scripts/admission_report.py, as docs/operators/adopting.md runs it, against this cluster
    (exit status, and what it found)."""
    kubeconfig = admission.cp.kubeconfig("platform-engineer")
    out = io.StringIO()
    with redirect_stdout(out):
        status = admission_report.main(["--context", "test", "--kubeconfig", str(kubeconfig),
                                        "--output", "json"])
    return status, json.loads(out.getvalue())


# The namespaces of the adoption walk's workloads (other tests of this module leave theirs).
ADOPTION = ("legacy", "agents")


def of_the_walk(found: list[dict]) -> list[dict]:
    return [w for w in found if w["namespace"] in ADOPTION]


def named(found: list[dict], namespace: str, kind: str, name: str) -> dict:
    return next(w for w in found if (w["namespace"], w["kind"], w["name"])
                == (namespace, kind, name))


def test_adopting_on_a_cluster_that_runs_gpu_work_audit_report_fix_enforce_roll_back(
        admission, example_settings):
    """The path docs/operators/adopting.md gives, walked with workloads that break the rules
    and ran before the platform: install in audit mode, read the report, fix one and exempt
    another, see the report clean, switch to enforce, and roll back to audit."""
    cp, settings = admission.cp, example_settings
    kube = cp.admin
    webhooks = [("ValidatingWebhookConfiguration", "gpu-platform-admission"),
                ("MutatingWebhookConfiguration", "gpu-platform-admission")]
    for kind, name in webhooks:         # a cluster before the platform
        kube.delete("admissionregistration.k8s.io/v1", kind, name)
    wait_until(lambda: admitted(kube, bare_gpu_pod("before-the-platform")),
               "the webhooks to be gone", timeout=15)
    for namespace in ADOPTION:
        ensure_namespace(kube, namespace)
    toleration = settings.gpu_nodes.taint.toleration()
    trainer = pod_template({"app": "trainer"}, gpus=1)          # on the default scheduler
    trainer["spec"]["tolerations"] = [toleration]
    kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "trainer", "namespace": "legacy"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}},
                          # The fixed pod replaces the old one at once, room on a GPU node or not.
                          "strategy": {"type": "Recreate"}, "template": trainer}})
    exporter = pod_template({"app": "exporter"})
    exporter["spec"]["tolerations"] = [{"operator": "Exists"}]
    exporter["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    kube.create({"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": "gpu-exporter", "namespace": "agents"},
                 "spec": {"selector": {"matchLabels": {"app": "exporter"}},
                          "template": exporter}})
    kube.create(pod("pinned", "legacy", gpus=1, settings=settings,
                    scheduler=settings.scheduler.name, node_name="gpu-node-1"))
    compliant = pod_template({"app": "compliant"}, gpus=1, settings=settings,
                             scheduler=settings.scheduler.name)
    kube.create(job("compliant", "legacy", compliant))
    wait_until(lambda: len(kube.list("v1", "Pod", "legacy")) >= 3
               and kube.list("v1", "Pod", "agents"), "the workloads' pods", timeout=30)

    # 1. Install in audit mode.
    audit = switch_mode(admission, settings, "audit")
    try:
        # 2. The report: what enforce would refuse, and why.
        status, found = adoption_report(admission)
        found = of_the_walk(found)
        print("\nthe report on install:", json.dumps(found, indent=1))
        assert status == 1
        assert sorted((w["namespace"], w["kind"]) for w in found) == [
            ("agents", "DaemonSet"), ("legacy", "Pod"), ("legacy", "ReplicaSet")]
        assert "spec.schedulerName" in " ".join(
            next(w for w in found if w["kind"] == "ReplicaSet")["refused"])
        assert "is privileged" in " ".join(named(found, "agents", "DaemonSet",
                                                 "gpu-exporter")["refused"])
        assert "skips the scheduler" in " ".join(named(found, "legacy", "Pod",
                                                       "pinned")["refused"])
        # A new workload against the rules, admitted in audit mode: labelled, and reported.
        kube.create(bare_gpu_pod("new-violation"))
        status, found = adoption_report(admission)
        assert named(found, USER_NAMESPACE, "Pod", "new-violation")["labelled"] == [
            "new-violation"]

        # 3. Fix: the Deployment names the binpack scheduler; the pinned pod and the new one
        # are replaced by rule-abiding ones. Exempt: the node agent's namespace.
        kube.merge_patch("apps/v1", "Deployment", "trainer", {"spec": {"template": {"spec": {
            "schedulerName": settings.scheduler.name}}}}, "legacy", what="fix the Deployment")
        for namespace, name in (("legacy", "pinned"), (USER_NAMESPACE, "new-violation")):
            kube.delete("v1", "Pod", name, namespace)
        exempt = audit.admission.model_copy(update={
            "exempt_namespaces": [*audit.admission.exempt_namespaces, "agents"]})
        audit = roll_out(admission, audit.model_copy(update={"admission": exempt}),
                         "the node agents' namespace exempt")

        def clean() -> bool:
            status, found = adoption_report(admission)
            return not of_the_walk(found) and not any(
                w["name"] == "new-violation" for w in found)
        wait_until(clean, "the report to find nothing of the walk's", timeout=60,
                   explain=lambda: json.dumps(adoption_report(admission)[1]))

        # 4. Enforce: what breaks the rules is refused from now on.
        enforced = switch_mode(admission, audit, "enforce")
        assert "spec.schedulerName" in refusal(kube, bare_gpu_pod("after-enforce"))
        # 5. Roll back to audit: admitted again, with the warning.
        switch_mode(admission, enforced, "audit")
        assert admitted(kube, bare_gpu_pod("after-roll-back")) and kube.warnings
    finally:
        switch_mode(admission, settings, "enforce")
        kube.delete("apps/v1", "DaemonSet", "gpu-exporter", "agents", propagation="Background")
        kube.delete("apps/v1", "Deployment", "trainer", "legacy", propagation="Background")
        kube.delete("batch/v1", "Job", "compliant", "legacy", propagation="Background")
