"""Admission end to end: what OPA is asked and what it decides, and each way around the rules,
closed (the package's __init__.py says how it runs)."""

import pytest
import requests
import urllib3

from tests.integration.admission.opa import (
    USER_NAMESPACE,
    admitted,
    create_pods,
    gpu_pod_admitted,
    gpu_pod_admitted_on,
    gpu_pod_with,
    refusal,
    roll_out,
)
from tests.kit.cluster.controlplane import ApiError, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, find
from tests.kit.cluster.nodes_and_pods import ensure_namespace, placement, pod
from tests.kit.harness import admission_of


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
    # The API server resolves a class from its informer's cache, which sees a new class a moment
    # after it is stored: wait until a pod without GPUs (not sent to OPA) may name it.
    cpu_pod = pod("names-urgent", USER_NAMESPACE)
    cpu_pod["spec"]["priorityClassName"] = "urgent"
    wait_until(lambda: admitted(kube, cpu_pod), "the API server to resolve PriorityClass urgent")
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

