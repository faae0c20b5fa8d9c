"""Admission end to end, through a real kube-apiserver: real OPA serving the webhook over TLS
with the program's server policy, a real kube-mgmt loading the admission policy and parameters
from the ConfigMaps the program declares (with the RBAC it declares), and the program's
ValidatingWebhookConfiguration with only its client config pointed at the local OPA."""

import copy
from dataclasses import dataclass

import pytest
import requests

import tools
from cluster import (ApiError, LocalContainer, Scheduler, TEST_MANAGER, apply_declared,
                     create_gpu_node, create_node, ensure_namespace, find,
                     load_configmaps_as_kube_mgmt_does, placement, pod, scheduler_with_strategy,
                     start_binpack_scheduler)
from components import opa_admission
from controlplane import ControlPlane, Process, free_port, wait_until

USER_NAMESPACE = "team-a"
KUBE_MGMT_STATUS = "openpolicyagent.org/kube-mgmt-status"
KUBE_MGMT_MISSING = ("no kube-mgmt binary (the Go module proxy does not serve kube-mgmt; see "
                     "README): the ConfigMaps were loaded into OPA by the test, as kube-mgmt does")


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
    ports = {port: free_port() for port in (opa_admission.WEBHOOK_PORT, opa_admission.LOCAL_PORT,
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

    local = copy.deepcopy(webhook)
    client = local["webhooks"][0]["clientConfig"]
    path = client.pop("service")["path"]
    client["url"] = f"https://127.0.0.1:{ports[opa_admission.WEBHOOK_PORT]}{path}"
    cp.admin.apply(local, TEST_MANAGER)
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
    return Admission(cp, opa_process, ports[opa_admission.WEBHOOK_PORT], diagnostic, opa_token)


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


def test_with_opa_stopped_the_failure_policy_holds_and_other_pods_still_schedule(
        admission, example_settings):
    kube = admission.cp.admin
    admission.opa.stop()
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
