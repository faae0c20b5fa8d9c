"""Admission end to end, through a real kube-apiserver: real OPA serving the webhook over TLS
with the program's server policy, a real kube-mgmt loading the admission policy and parameters
from the ConfigMaps the program declares (with the RBAC it declares), and the program's
ValidatingWebhookConfiguration with only its client config pointed at the local OPA."""

import copy
from dataclasses import dataclass

import pytest
import requests

import tools
from cluster import (
    TEST_MANAGER,
    ApiError,
    LocalContainer,
    Scheduler,
    apply_declared,
    create_gpu_node,
    create_node,
    ensure_namespace,
    find,
    load_configmaps_as_kube_mgmt_does,
    placement,
    pod,
    scheduler_with_strategy,
    start_binpack_scheduler,
)
from components import opa_admission
from components.settings import AUDIT_LABEL, StackSettings
from controlplane import ControlPlane, Process, free_port, wait_until

USER_NAMESPACE = "team-a"
KUBE_MGMT_STATUS = "openpolicyagent.org/kube-mgmt-status"
KUBE_MGMT_MISSING = ("no kube-mgmt binary (the Go module proxy does not serve kube-mgmt; see "
                     "docs/developers/testing.md): the ConfigMaps were loaded into OPA by the "
                     "test, as kube-mgmt does")


@pytest.fixture(scope="module")
def kube_mgmt_bin():
    try:
        return tools.kube_mgmt()
    except tools.ModuleUnavailable:
        return None


@dataclass
class Admission:
    cp: ControlPlane
    opa: Process
    webhook_port: int
    diagnostic_port: int
    token: str
    local_port: int
    kube_mgmt_token: str
    kube_mgmt: bool
    ca_bundle: str

    @property
    def opa_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def decisions(self) -> float:
        """How many admission decisions OPA has served (from its own metrics)."""
        text = requests.get(f"http://127.0.0.1:{self.diagnostic_port}/metrics", timeout=5).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("http_request_duration_seconds_count")
                   and 'handler="v0/data"' in line)


@pytest.fixture(scope="module")
def admission(control_plane, declared, example_settings, kube_mgmt_bin):
    cp, settings = control_plane, example_settings
    webhook = find(declared.objects, "ValidatingWebhookConfiguration", "gpu-platform-admission")
    # The program registers the webhook only after OPA is ready; so does the test.
    apply_declared(cp.admin, [o for o in declared.objects if o["kind"] != webhook["kind"]])
    deployment = find(declared.objects, "Deployment", opa_admission.SERVICE)
    ports = {port: free_port() for port in (settings.admission.webhook_port,
                                            opa_admission.LOCAL_PORT,
                                            opa_admission.DIAGNOSTIC_PORT)}
    opa = LocalContainer(cp, declared.objects, deployment, "opa", ports)
    opa_process = cp.start_process("opa", [str(tools.opa()), *opa.args()])
    opa_token = find(declared.objects, "Secret", opa_admission.SERVER_SECRET)["stringData"][
        opa_admission.TOKEN_KEY]
    # kube-mgmt runs with its ServiceAccount's token: the declared Role is all it may use.
    token = cp.service_account_token(settings.admission.namespace, opa_admission.SERVICE)
    diagnostic = ports[opa_admission.DIAGNOSTIC_PORT]
    wait_until(lambda: requests.get(f"http://127.0.0.1:{diagnostic}/health", timeout=2).ok,
               "OPA to serve /health", explain=opa_process.tail)
    if kube_mgmt_bin:
        kube_mgmt = LocalContainer(cp, declared.objects, deployment, "kube-mgmt", ports)
        loader = cp.start_process("kube-mgmt", [
            str(kube_mgmt_bin), *kube_mgmt.args(),
            f"--kubeconfig={cp.kubeconfig('kube-mgmt', token=token)}"])
    else:
        loader = opa_process
        load_configmaps_as_kube_mgmt_does(
            cp.client(token), settings, f"http://127.0.0.1:{ports[opa_admission.LOCAL_PORT]}",
            opa_token)
    wait_until(lambda: requests.get(f"http://127.0.0.1:{diagnostic}/health/ready",
                                    timeout=2).status_code == 200,
               "OPA to report ready (the policy and its parameters loaded)",
               timeout=60, explain=lambda: opa_process.tail() + "\n" + loader.tail())

    cp.admin.apply(pointed_at_local_opa(webhook, ports[settings.admission.webhook_port]),
                   TEST_MANAGER)
    ensure_namespace(cp.admin, USER_NAMESPACE)
    # The API server picks a new webhook up within moments: wait until it refuses (dry run).
    probe = pod("webhook-probe", USER_NAMESPACE, gpus=1, settings=settings)
    wait_until(lambda: _refused(cp.admin, probe), "the webhook to take effect", timeout=15)

    # Schedulers, so that admitted pods are seen to land: the binpack one for GPU pods, the
    # default one for the rest.
    start_binpack_scheduler(cp, settings, declared.objects)
    Scheduler(cp, "default-scheduler", scheduler_with_strategy("default-scheduler"),
              kubeconfig=cp.kubeconfig("default-scheduler"))
    create_gpu_node(cp.admin, settings, "gpu-node-1", gpus=8)
    create_node(cp.admin, "cpu-node-1")
    return Admission(cp, opa_process, ports[settings.admission.webhook_port], diagnostic, opa_token,
                     ports[opa_admission.LOCAL_PORT], token, bool(kube_mgmt_bin),
                     webhook["webhooks"][0]["clientConfig"]["caBundle"])


def pointed_at_local_opa(configuration: dict, port: int) -> dict:
    """A declared webhook configuration with only its client config changed: the API server
    calls the local OPA by URL instead of through the Service."""
    local = copy.deepcopy(configuration)
    for webhook in local["webhooks"]:
        client = webhook["clientConfig"]
        client["url"] = f"https://127.0.0.1:{port}{client.pop('service')['path']}"
    return local


def _refused(kube, obj) -> bool:
    try:
        kube.create(obj, dry_run=True)
        return False
    except ApiError:
        return True


def test_kube_mgmt_loaded_the_declared_policy_and_parameters(admission, example_settings,
                                                             kube_mgmt_bin):
    if not kube_mgmt_bin:
        pytest.skip(KUBE_MGMT_MISSING)
    ns = example_settings.admission.namespace
    for name in (opa_admission.POLICY_CONFIGMAP, opa_admission.PARAMS_CONFIGMAP):
        config_map = admission.cp.admin.get("v1", "ConfigMap", name, ns)
        status = config_map["metadata"].get("annotations", {}).get(KUBE_MGMT_STATUS)
        assert status == '{"status":"ok"}', f"{name}: kube-mgmt status {status}"


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
    assert namespace in example_settings.exempt_namespaces
    before = admission.decisions()
    kube.create(pod("validator", namespace, gpus=1, settings=example_settings))
    assert admission.decisions() == before


def test_anonymous_calls_to_opas_policy_api_are_refused(admission, certificates):
    anonymous = requests.Session()
    anonymous.trust_env = False
    anonymous.verify = str(admission.cp.write("pki/admission-ca.crt", certificates.ca.cert_pem))
    for method, path in [("GET", "/v1/policies"), ("PUT", "/v1/policies/x"),
                         ("GET", "/v1/data"), ("PUT", "/v1/data/gpu_platform"),
                         ("POST", "/v1/data/system/authz/allow")]:
        response = anonymous.request(method, admission.opa_url + path,
                                     data="package x" if method == "PUT" else None, timeout=5)
        assert response.status_code == 401, f"anonymous {method} {path}: {response.status_code}"
    # The token kube-mgmt holds is let in.
    granted = anonymous.get(admission.opa_url + "/v1/policies", timeout=5,
                            headers={"Authorization": f"Bearer {admission.token}"})
    assert granted.status_code == 200


# --- the ways around the rules, each closed ---------------------------------------------------

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
    assert "is privileged and would see every GPU of its node" in refusal(admission.cp.admin,
                                                                          obj)


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
    assert "asks for NVIDIA devices (gpu.nvidia.com) through Dynamic Resource Allocation" \
        in message
    claim["metadata"]["name"] = "one-nic"
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nic.example.com"
    kube.create(claim)


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

def switch_mode(admission: Admission, settings: StackSettings, mode: str) -> StackSettings:
    """Roll the stack to another admission mode as `pulumi up` would: the parameter ConfigMap
    (loaded into OPA), then both webhook configurations, built from the changed settings."""
    adm = settings.admission.model_copy(update={
        "mode": mode, "failure_policy": "Ignore" if mode == "audit" else "Fail"})
    changed = settings.model_copy(update={"admission": adm})
    cp = admission.cp
    params = next(o for o in opa_admission.policy_config_maps(changed)
                  if o["metadata"]["name"] == opa_admission.PARAMS_CONFIGMAP)
    cp.admin.apply(params, TEST_MANAGER)
    if not admission.kube_mgmt:
        load_configmaps_as_kube_mgmt_does(cp.client(admission.kube_mgmt_token), changed,
                                          f"http://127.0.0.1:{admission.local_port}",
                                          admission.token)
    loaded = (f"http://127.0.0.1:{admission.local_port}/v1/data/{adm.namespace}/"
              f"{opa_admission.PARAMS_CONFIGMAP}/{opa_admission.PARAMS_KEY}")
    wait_until(lambda: requests.get(loaded, timeout=2, headers={
        "Authorization": f"Bearer {admission.token}"}).json().get("result", {}).get("mode")
        == mode, f"OPA to load mode {mode}")
    cp.admin.apply(pointed_at_local_opa(opa_admission.webhook_configuration(
        changed, admission.ca_bundle), admission.webhook_port), TEST_MANAGER)
    mutating = opa_admission.mutating_webhook_configuration(changed, admission.ca_bundle)
    if mutating:
        cp.admin.apply(pointed_at_local_opa(mutating, admission.webhook_port), TEST_MANAGER)
    else:
        cp.admin.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                        "gpu-platform-admission")
    return changed


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


def test_with_opa_stopped_the_failure_policy_holds_and_other_pods_still_schedule(
        admission, example_settings, declared):
    kube = admission.cp.admin
    admission.opa.stop()
    # The next `pulumi up` (and its preview) stops at the reachability probe, naming the webhook
    # and the cause, whatever the failure policy of the pod webhook.
    for dry_run in (True, False):
        with pytest.raises(ApiError) as unreachable:
            kube.apply(probe_of_a_later_run(declared, "unreachable"), TEST_MANAGER,
                       dry_run=dry_run)
        assert unreachable.value.status == 500
        assert f'failed calling webhook "{example_settings.admission.reachability_webhook_name}"' \
            in unreachable.value.message
        assert "connection refused" in unreachable.value.message
    # No other ConfigMap asks OPA.
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "app-config", "namespace": USER_NAMESPACE}})
    gpu_pod = pod("train-while-opa-down", USER_NAMESPACE, gpus=1, settings=example_settings,
                  scheduler=example_settings.scheduler.name)
    if example_settings.admission.failure_policy == "Fail":
        with pytest.raises(ApiError) as refused:
            kube.create(gpu_pod)
        assert refused.value.status == 500
        assert example_settings.admission.webhook_name in refused.value.message
    else:
        kube.create(gpu_pod)
    kube.create(pod("web-while-opa-down", USER_NAMESPACE))
    assert placement(kube, USER_NAMESPACE, "web-while-opa-down") == "cpu-node-1"
