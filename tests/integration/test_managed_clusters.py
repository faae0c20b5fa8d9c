"""What managed clusters refuse that the plain local control plane allows.

GKE limits the critical priority classes: its API server runs ResourceQuota admission with a
`limitedResources` configuration, so a pod of priority system-cluster-critical outside
kube-system is refused unless a ResourceQuota with a matching PriorityClass scope covers it. The
binpack scheduler and OPA run at that priority, and the GPU Operator's chart runs every one of
its pods at system-node-critical; without a quota their Deployments and DaemonSets would never
get pods, the webhook would never be registered and no GPU would be advertised."""

import copy

import pytest
import yaml

from components import gpu_operator
from components.base import manifests
from tests.kit.cluster.controlplane import ApiError, ControlPlane, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, apply_declared, find
from tests.kit.cluster.kube_components import ControllerManager
from tests.kit.cluster.load import create_concurrently
from tests.kit.harness import operator_of

# The ResourceQuota admission configuration as GKE documents it for critical priorities.
LIMITED_CRITICAL_PRIORITIES = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AdmissionConfiguration",
    "plugins": [{"name": "ResourceQuota", "configuration": {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "ResourceQuotaConfiguration",
        "limitedResources": [{"resource": "pods", "matchScopes": [{
            "scopeName": "PriorityClass", "operator": "In",
            "values": ["system-node-critical", "system-cluster-critical"]}]}]}}],
}


@pytest.fixture(scope="module")
def gke_like(tmp_path_factory):
    config = tmp_path_factory.mktemp("gke") / "admission-config.yaml"
    config.write_text(yaml.safe_dump(LIMITED_CRITICAL_PRIORITIES))
    cp = ControlPlane(apiserver_args=(f"--admission-control-config-file={config}",))
    cp.start()
    yield cp
    cp.stop()


def pod_of(deployment: dict, name: str) -> dict:
    """The pod the Deployment's ReplicaSet would create."""
    template = copy.deepcopy(deployment["spec"]["template"])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**template["metadata"], "name": name,
                         "namespace": deployment["metadata"]["namespace"]},
            "spec": template["spec"]}


@pytest.mark.parametrize("deployment_name", ["gpu-binpack-scheduler", "opa"])
def test_critical_pods_are_admitted_only_with_the_declared_quota(gke_like, declared,
                                                                 deployment_name):
    cp = gke_like
    deployment = find(declared.objects, "Deployment", deployment_name)
    namespace = deployment["metadata"]["namespace"]
    quota = find([o for o in declared.objects if o["metadata"].get("namespace") == namespace],
                 "ResourceQuota", "critical-pods")
    cp.admin.apply(find(declared.objects, "Namespace", namespace), TEST_MANAGER)
    with pytest.raises(ApiError) as refused:
        cp.admin.create(pod_of(deployment, "without-quota"), dry_run=True)
    # The API server answers 500 here, with the quota plugin's message.
    assert "insufficient quota to match these scopes" in refused.value.message
    cp.admin.apply(quota, TEST_MANAGER)
    admitted_once_the_quota_is_seen(cp, pod_of(deployment, "with-quota"))
    replicas = deployment["spec"]["replicas"]
    # Every replica, and as many again while a rolling update replaces them; OPA's, a third
    # time, while a new generation starts beside one still handing over.
    copies = 3 if deployment_name == "opa" else 2
    for index in range(copies * replicas):
        cp.admin.create(pod_of(deployment, f"replica-{index}"))


def admitted_once_the_quota_is_seen(cp: ControlPlane, pod: dict) -> None:
    """The quota admission plugin reads quotas from its informer's cache, which a busy API
    server fills a moment after the quota is applied: wait until a dry run is admitted."""
    def admitted() -> bool:
        try:
            cp.admin.create(pod, dry_run=True)
            return True
        except ApiError as error:
            if "insufficient quota to match these scopes" not in error.message:
                raise
            return False
    wait_until(admitted, "the API server to see the quota", timeout=30)


def operand(namespace: str, name: str, priority_class: str) -> dict:
    """A pod as the operator's chart runs them: an operand, the operator or NFD."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"priorityClassName": priority_class, "containers": [
                {"name": "operand", "image": "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0"}]}}


def test_the_operators_critical_pods_are_admitted_only_with_the_declared_quota(
        gke_like, declared, example_settings):
    cp = gke_like
    namespace = example_settings.gpu_operator.namespace
    quota = find([o for o in declared.objects if o["metadata"].get("namespace") == namespace],
                 "ResourceQuota", manifests.CRITICAL_PODS_QUOTA)
    cp.admin.apply(find(declared.objects, "Namespace", namespace), TEST_MANAGER)
    with pytest.raises(ApiError) as refused:
        cp.admin.create(operand(namespace, "toolkit-without-quota",
                                manifests.NODE_CRITICAL_PRIORITY), dry_run=True)
    assert "insufficient quota to match these scopes" in refused.value.message
    cp.admin.apply(quota, TEST_MANAGER)
    admitted_once_the_quota_is_seen(cp, operand(namespace, "toolkit-with-quota",
                                                manifests.NODE_CRITICAL_PRIORITY))
    # As many pods as the chart runs for the example stack are admitted, whichever critical
    # class they name; the quota is sized for exactly that, so one more is refused (counted
    # once the quota controller has given the quota its status).
    allowed = gpu_operator.critical_pods(operator_of(example_settings))
    assert int(quota["spec"]["hard"]["pods"]) == allowed
    controllers = ControllerManager(cp)
    try:
        wait_until(lambda: cp.admin.get("v1", "ResourceQuota", manifests.CRITICAL_PODS_QUOTA,
                                        namespace).get("status", {}).get("hard"),
                   "the quota controller to count the quota", timeout=30)
        create_concurrently(cp, [operand(namespace, f"operand-{index}",
                                         manifests.NODE_CRITICAL_PRIORITY
                                         if index % 2 else manifests.CRITICAL_PRIORITY)
                                 for index in range(allowed)])
        with pytest.raises(ApiError) as full:
            cp.admin.create(operand(namespace, "one-too-many", manifests.NODE_CRITICAL_PRIORITY))
        assert "exceeded quota" in full.value.message
    finally:
        controllers.stop()


def test_the_whole_platform_applies_on_such_a_cluster(gke_like, declared):
    applied, _ = apply_declared(gke_like.admin, declared.objects)
    assert any(o["kind"] == "ResourceQuota" for o in applied)
