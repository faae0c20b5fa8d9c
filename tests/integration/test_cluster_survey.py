"""What a preview finds already running where the platform would install its own, read from a
real API server as the stack's context finds it: a device plugin DaemonSet as eksctl installs
it, a node-exporter on host port 9100, a Prometheus Operator and a Kueue of other installs, and
GPU nodes with and without the GPU taint. Each is named with its fix; acknowledged, the preview
goes on; the preview identity of docs/operators/preview-access.yaml may read it all, and an
identity without rights is told what was not checked."""

from pathlib import Path

import pytest
import yaml

from components.gpu_nodes.settings import GpuNodesSettings
from components.monitoring.prices import GPU_PRODUCT_LABEL
from components.platform.settings import ClusterSettings, StackSettings
from components.preview.conflicts import CHECKS, ClusterConflicts, check_conflicts
from components.preview.prices import PriceError, check_prices
from tests.kit.cluster.controlplane import ControlPlane
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.nodes_and_pods import create_gpu_node, ensure_namespace

ACCESS = Path(__file__).resolve().parents[2] / "docs" / "operators" / "preview-access.yaml"
# In the order the error lists them.
FOUND = {"other-device-plugin": "DaemonSet kube-system/nvidia-device-plugin-daemonset",
         "other-prometheus-operator": "Deployment observability/prometheus-operator",
         "other-node-exporter": "DaemonSet observability/node-exporter (host port 9100)",
         "other-kueue": "Deployment batch-system/kueue-controller-manager",
         "untainted-gpu-nodes": "gpu-untainted (1 of 2)"}


def workload(kind: str, namespace: str, name: str, image: str, container: dict | None = None,
             **pod: object) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": image, **(container or {})}],
                         **pod}}}}


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, example_settings: StackSettings) -> ControlPlane:
    """What the cluster runs before the platform: eksctl's device plugin, a monitoring stack's
    node-exporter and operator, a Kueue from its manifests, and GPU nodes one of which the
    node pool failed to taint."""
    kube = control_plane.admin
    for namespace in ("observability", "batch-system"):
        ensure_namespace(kube, namespace)
    for obj in (
        workload("DaemonSet", "kube-system", "nvidia-device-plugin-daemonset",
                 "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                 container={"volumeMounts": [{"name": "device-plugin",
                                              "mountPath": "/var/lib/kubelet/device-plugins"}]},
                 volumes=[{"name": "device-plugin",
                           "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]),
        workload("DaemonSet", "observability", "node-exporter",
                 "quay.io/prometheus/node-exporter:v1.8.2", hostNetwork=True,
                 container={"ports": [{"containerPort": 9100, "hostPort": 9100}]}),
        workload("Deployment", "observability", "prometheus-operator",
                 "quay.io/prometheus-operator/prometheus-operator:v0.80.1"),
        workload("Deployment", "batch-system", "kueue-controller-manager",
                 "registry.k8s.io/kueue/kueue:v0.14.2"),
    ):
        kube.create(obj)
    create_gpu_node(kube, example_settings, "gpu-tainted", 8,
                    labels={GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"})
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gpu-untainted", "labels": {"nvidia.com/gpu.present": "true"}}})
    return control_plane


def stack_on(cluster: ControlPlane, settings: StackSettings, user: str = "survey",
             token: str | None = None, acknowledged: tuple = ()) -> StackSettings:
    """The example stack on this cluster, its GPU nodes tainted by their node pools."""
    return settings.model_copy(update={
        "cluster": ClusterSettings(context="test",
                                   kubeconfig=str(cluster.kubeconfig(user, token=token)),
                                   acknowledged_conflicts=list(acknowledged)),
        "gpu_nodes": GpuNodesSettings(tainted_by="nodePool")})


def test_the_preview_names_each_conflict_with_its_fix(cluster, example_settings, logged):
    with pytest.raises(ClusterConflicts) as raised:
        check_conflicts(stack_on(cluster, example_settings))
    lines = str(raised.value).splitlines()
    assert "nothing was deployed" in lines[0]
    assert [line.split("]")[0][5:] for line in lines[1:]] == list(FOUND)
    for line, found in zip(lines[1:], FOUND.values(), strict=True):
        assert found in line and "Fix: " in line, line
    assert logged["warn"] == []


def test_acknowledged_the_preview_goes_on_and_says_what_it_found(cluster, example_settings,
                                                                  logged):
    check_conflicts(stack_on(cluster, example_settings, acknowledged=tuple(FOUND)))
    assert len(logged["info"]) == len(FOUND)
    assert all("acknowledged in gpu-platform:cluster.acknowledgedConflicts" in info
               for info in logged["info"])


def test_the_preview_identity_may_read_everything_the_survey_reads(cluster, example_settings,
                                                                   logged):
    kube = cluster.admin
    access = list(yaml.safe_load_all(ACCESS.read_text()))
    for namespace in {o["metadata"].get("namespace") for o in access} - {None}:
        ensure_namespace(kube, namespace)
    for obj in access:
        kube.apply(obj, TEST_MANAGER)
    account = next(o for o in access if o["kind"] == "ServiceAccount")["metadata"]
    token = cluster.service_account_token(account["namespace"], account["name"])
    with pytest.raises(ClusterConflicts) as raised:
        check_conflicts(stack_on(cluster, example_settings, "preview", token))
    assert logged["warn"] == []
    assert all(f"[{conflict}]" in str(raised.value) for conflict in FOUND)


def test_an_identity_without_rights_is_told_what_was_not_checked(cluster, example_settings,
                                                                 logged):
    cluster.admin.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "no-rights", "namespace": "default"}},
                        TEST_MANAGER)
    token = cluster.service_account_token("default", "no-rights")
    check_conflicts(stack_on(cluster, example_settings, "no-rights", token))
    warned = "\n".join(logged["warn"])
    applying = {check.looks_for for check in CHECKS if check.applies(
        stack_on(cluster, example_settings))}
    assert len(logged["warn"]) == len(applying)
    for rule in ("list daemonsets.apps cluster-wide", "list nodes cluster-wide",
                 "list pods in namespace kube-system", "list deployments.apps cluster-wide",
                 "get customresourcedefinitions.apiextensions.k8s.io cluster-wide"):
        assert f"may not {rule}" in warned, warned


def priced(settings: StackSettings, prices: dict[str, float]) -> StackSettings:
    monitoring = settings.monitoring
    return settings.model_copy(update={"monitoring": monitoring.model_copy(update={
        "usage": monitoring.usage.model_copy(update={"price_per_gpu_hour": prices,
                                                     "node_group_prices": []})})})


def test_a_price_for_a_gpu_the_cluster_does_not_have_stops_the_preview(cluster, example_settings,
                                                                       logged):
    """Keyed by the exporter's model name, a price finds the node GPU Feature Discovery labelled
    with it; `H100` names none, and would have left every cost empty."""
    stack = stack_on(cluster, example_settings)
    check_prices(priced(stack, {"NVIDIA H100 80GB HBM3": 3.2}))
    with pytest.raises(PriceError) as refused:
        check_prices(priced(stack, {"H100": 3.2, "NVIDIA H100 80GB HBM3": 3.2}))
    lines = str(refused.value).splitlines()
    assert "nothing was deployed" in lines[0]
    assert lines[1:] == [
        "  - gpu-platform:monitoring.usage.pricePerGpuHour.H100 = 3.2: names no GPU model of the "
        "cluster's nodes; allowed: a model as the DCGM exporter's modelName writes it, which GPU "
        "Feature Discovery's nvidia.com/gpu.product writes with dashes for spaces (the nodes': "
        "NVIDIA-H100-80GB-HBM3)"]
    assert logged["warn"] == []


def test_the_preview_identity_may_check_the_prices_and_one_without_rights_is_told(
        cluster, example_settings, logged):
    access = list(yaml.safe_load_all(ACCESS.read_text()))
    for namespace in {o["metadata"].get("namespace") for o in access} - {None}:
        ensure_namespace(cluster.admin, namespace)
    for obj in access:
        cluster.admin.apply(obj, TEST_MANAGER)
    account = next(o for o in access if o["kind"] == "ServiceAccount")["metadata"]
    token = cluster.service_account_token(account["namespace"], account["name"])
    with pytest.raises(PriceError):
        check_prices(priced(stack_on(cluster, example_settings, "preview", token), {"H100": 1}))
    cluster.admin.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "no-rights", "namespace": "default"}},
                        TEST_MANAGER)
    token = cluster.service_account_token("default", "no-rights")
    check_prices(priced(stack_on(cluster, example_settings, "no-rights", token), {"H100": 1}))
    assert logged["warn"] == [
        "gpu-platform: monitoring.usage: the price keys were not checked against "
        "the cluster's GPU models (GET /api/v1/nodes: HTTP 403 for the context's user); the "
        "preview identity needs to list nodes"]
