"""What a preview finds already running where the platform would install its own: each conflict
named with its fix in one error before anything is declared, an acknowledged one reported
without failing, and what the preview's user may not read named as not checked (against a real
API server: tests/integration/test_cluster_survey.py)."""

import copy
import json
from typing import Any

import pytest
import yaml

from components.base.validation import SettingsError
from components.platform.config import load_settings
from components.platform.settings import StackSettings
from components.preview.access import preview_reads
from components.preview.cluster import ClusterReader, NotAllowed
from components.preview.conflicts import (
    ADVICE,
    CHECKS,
    CONFLICT_IDS,
    DAEMONSETS,
    DEPLOYMENTS,
    KUBE_SYSTEM_PODS,
    KUEUE_CRD,
    NODES,
    PROBLEMS,
    PROMETHEUS_CRD,
    ClusterConflicts,
    Read,
    check_conflicts,
)
from tests.kit import harness
from tests.kit.stacks import KUBECONFIG, raw, with_changes

DOCS = harness.ROOT / "docs" / "operators"
EKSCTL_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"


def stack(**sections: Any) -> StackSettings:
    """The example stack (taintedBy: program, teams on, the device plugin path, the toolkit on
    and the driver off) on the fixture kubeconfig's context, with sections merged in."""
    config = harness.example_config()
    sections = {**sections, "cluster": {"context": "gpu-cluster", "kubeconfig": str(KUBECONFIG),
                                        **sections.get("cluster", {})}}
    for key, change in sections.items():
        config[f"gpu-platform:{key}"] = (
            json.dumps(_merge(json.loads(config[f"gpu-platform:{key}"]), change))
            if isinstance(change, dict) else change)
    return harness.settings_of(config)


def _merge(base: dict, change: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in change.items():
        merged[key] = (_merge(merged[key], value) if isinstance(value, dict) and value
                       and isinstance(merged.get(key), dict) else value)
    return merged


NODE_POOLS = {"taintedBy": "nodePool", "names": [], "labels": {},
              "forceTaintOwnership": False}
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def helm(release: str, namespace: str) -> dict:
    return {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}


def daemonset(namespace: str, name: str, image: str, *, device_plugin: bool = False,
              host_port: int | None = None, on_nodes: int | None = None,
              annotations: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": image}]}
    if device_plugin:
        spec["volumes"] = [{"name": "registration",
                            "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]
    if host_port:
        spec["containers"][0]["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    status = {} if on_nodes is None else {"observedGeneration": 1,
                                          "desiredNumberScheduled": on_nodes}
    return {"metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": {"template": {"spec": spec}}, "status": status}


def deployment(namespace: str, name: str, image: str, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"template": {"spec": {"containers": [{"name": "manager",
                                                           "image": image}]}}}}


def node(name: str, labels: dict | None = None, *, tainted: bool = True, os_image: str = "",
         runtime_handlers: tuple[str, ...] = ()) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": [TAINT] if tainted else []},
            "status": {"nodeInfo": {"osImage": os_image},
                       "runtimeHandlers": [{"name": h} for h in runtime_handlers]}}


GPU = {"nvidia.com/gpu.present": "true"}
BOTTLEROCKET = "Bottlerocket OS 1.30.0 (aws-k8s-1.33-nvidia)"
EKS_GPU = {"eks.amazonaws.com/nodegroup": "gpu", "karpenter.k8s.aws/instance-gpu-manufacturer":
           "nvidia"}


class FakeCluster:
    """What ClusterReader.get answers, by read; reads in `refused` answer 403."""

    def __init__(self, objects: dict[Read, Any] | None = None, refused: tuple[Read, ...] = ()):
        self.by_path = {read.path(): value for read, value in (objects or {}).items()}
        self.named = {read.path() for read in (PROMETHEUS_CRD, KUEUE_CRD)}
        self.refused = {read.path() for read in refused}
        self.asked: list[str] = []

    def get(self, path: str, **params: str) -> dict | None:
        self.asked.append(path)
        if path in self.refused:
            raise NotAllowed(f"GET {path}: HTTP 403 for the context's user")
        if path in self.named:
            return self.by_path.get(path)
        return {"items": self.by_path.get(path, []), "metadata": {}}


def on(monkeypatch, cluster: FakeCluster) -> FakeCluster:
    monkeypatch.setattr(ClusterReader, "get", cluster.get)
    return cluster


def conflicts_of(settings: StackSettings) -> str:
    with pytest.raises(ClusterConflicts) as raised:
        check_conflicts(settings)
    return str(raised.value)


def test_a_cluster_with_only_the_platforms_own_passes_without_a_word(monkeypatch, logged):
    settings = stack()
    ours = {
        DAEMONSETS: [daemonset("gpu-operator", "nvidia-device-plugin-daemonset", EKSCTL_IMAGE,
                               device_plugin=True, on_nodes=2),
                     daemonset("monitoring", "kube-prometheus-stack-prometheus-node-exporter",
                               "quay.io/prometheus/node-exporter:v1.12.1", host_port=9100,
                               annotations=helm("kube-prometheus-stack", "monitoring"))],
        DEPLOYMENTS: [deployment("monitoring", "kube-prometheus-stack-operator",
                                 "quay.io/prometheus-operator/prometheus-operator:v0.90.0",
                                 helm("kube-prometheus-stack", "monitoring")),
                      deployment("kueue-system", "kueue-controller-manager",
                                 "registry.k8s.io/kueue/kueue:v0.19.2",
                                 helm("kueue", "kueue-system"))],
        KUEUE_CRD: {"metadata": {"annotations": helm("kueue", "kueue-system")}},
        # kube-prometheus-stack installs its CRDs unrecorded.
        PROMETHEUS_CRD: {"metadata": {}},
        NODES: [node("gpu-node-1", {**GPU, "nvidia.com/gpu.deploy.driver": "true",
                                    "nvidia.com/gpu.deploy.container-toolkit": "true"},
                     runtime_handlers=("nvidia",))],
    }
    cluster = on(monkeypatch, FakeCluster(ours))
    check_conflicts(settings)
    assert logged == {"warn": [], "info": []}
    # Each list is read once, whichever checks need it.
    assert len(cluster.asked) == len(set(cluster.asked))


# The example stack on the DRA path, where compaction is refused.
DRA_PATH = {"gpuOperator": {"gpuPath": "dra"}, "kubernetesVersion": "1.37.2",
            "compaction": {"enabled": False}}

# (conflict, stack sections, what the cluster runs, what the message says: found and fix)
# What the clusters of some cases run, named for the no-conflict cases that reuse them.
EKSCTL_PLUGIN = {DAEMONSETS: [daemonset(
        "kube-system", "nvidia-device-plugin-daemonset", EKSCTL_IMAGE, device_plugin=True,
        on_nodes=3)]}
DRIVER_FOUND = {NODES: [node("gpu-node-1", {**GPU, "nvidia.com/cuda.driver.major": "570",
                                  "nvidia.com/cuda.driver.minor": "86",
                                  "nvidia.com/cuda.driver.rev": "15"}),
              node("gpu-node-2", {**GPU, "nvidia.com/gpu.deploy.driver": "pre-installed"})]}
RUNTIME_HANDLER_FOUND = {NODES: [node("gpu-node-1", GPU, runtime_handlers=(
        "runc", "nvidia"))]}
OTHER_PROMETHEUS_OPERATOR = {DEPLOYMENTS: [deployment(
        "observability", "prom-operator", "quay.io/prometheus-operator/prometheus-operator:v0.80.1",
        helm("prom", "observability"))]}
OTHER_KUEUE = {DEPLOYMENTS: [deployment(
        "batch-system", "kueue-controller-manager", "registry.k8s.io/kueue/kueue:v0.14.2")],
        KUEUE_CRD: {"metadata": {}}}
UNTAINTED_NODE = {NODES: [node("gpu-a", GPU), node("gpu-b", GPU, tainted=False), node("cpu-a")]}
TOO_MANY_NODES = {NODES: [node(f"node-{i}", tainted=False) for i in range(101)]}

CONFLICTS = [
    ("other-device-plugin", {}, EKSCTL_PLUGIN,
     ["DaemonSet kube-system/nvidia-device-plugin-daemonset (on 3 nodes)",
      "only one device plugin can advertise", "--install-nvidia-plugin=false",
      "gpuOperator.devicePlugin.enabled: false"]),
    ("other-device-plugin", DRA_PATH,
     {DAEMONSETS: [daemonset("kube-system", "nvidia-gpu-device-plugin-large-cos",
                             "gke.gcr.io/nvidia-gpu-device-plugin@sha256:0123",
                             device_plugin=True, on_nodes=1)]},
     ["DaemonSet kube-system/nvidia-gpu-device-plugin-large-cos",
      "NVIDIA's DRA driver serves the GPUs", "gke-no-default-nvidia-gpu-device-plugin=true"]),
    ("other-device-plugin", {}, {KUBE_SYSTEM_PODS: [{
        "metadata": {"name": "nvidia-device-plugin-gpu-node-1", "namespace": "kube-system",
                     "ownerReferences": [{"kind": "Node", "name": "gpu-node-1"}]},
        "spec": {"nodeName": "gpu-node-1", **daemonset("", "", EKSCTL_IMAGE, device_plugin=True)[
            "spec"]["template"]["spec"]}}]},
     ["static pod kube-system/nvidia-device-plugin-gpu-node-1 (on node gpu-node-1)"]),
    ("preinstalled-driver", {"gpuOperator": {"driver": {"enabled": True}}},
     DRIVER_FOUND,
     ["gpu-node-1 (GPU Feature Discovery found driver 570.86.15 loaded)",
      "gpu-node-2 (a GPU Operator found a driver there", "gpuOperator.driver.enabled: false"]),
    ("preinstalled-driver", {"gpuOperator": {"driver": {"enabled": True},
                                             "toolkit": {"enabled": False},
                                             "devicePlugin": {"enabled": False}}},
     {NODES: [node("ip-10-0-1-5", EKS_GPU,
                   os_image=BOTTLEROCKET)]},
     [f"{BOTTLEROCKET}, is Bottlerocket's NVIDIA variant"]),
    ("preinstalled-driver", {"gpuOperator": {"driver": {"enabled": True}}},
     {NODES: [node("gke-gpu-pool-1", {"cloud.google.com/gke-gpu-driver-version": "latest"})]},
     ["GKE installs the driver", "gpu-driver-version=disabled"]),
    ("preinstalled-toolkit", {},
     {NODES: [node("ip-10-0-1-6", EKS_GPU, os_image="Amazon Linux 2023.7.20250512")]},
     ["Amazon Linux 2023.7.20250512 on an EKS GPU node: EKS's accelerated AMI",
      "gpuOperator.toolkit.enabled: false",
      "accept-nvidia-visible-devices-envvar-when-unprivileged = false"]),
    ("other-device-plugin", {"gpuOperator": {"toolkit": {"enabled": False}}},
     {NODES: [node("ip-10-0-1-7", EKS_GPU, os_image=BOTTLEROCKET)]},
     ["NVIDIA's device plugin on the host of Bottlerocket nodes ip-10-0-1-7",
      "gpuOperator.devicePlugin.enabled: false"]),
    ("preinstalled-toolkit", {}, RUNTIME_HANDLER_FOUND,
     ["gpu-node-1 (its container runtime has the nvidia runtime handler)"]),
    ("other-prometheus-operator", {}, OTHER_PROMETHEUS_OPERATOR,
     ["Deployment observability/prom-operator", "monitoring.stack: existing"]),
    ("other-prometheus-operator", {}, {PROMETHEUS_CRD: {"metadata": {
        "annotations": helm("prometheus-operator-crds", "observability")}}},
     ["the monitoring.coreos.com CRDs of Helm release observability/prometheus-operator-crds",
      "go (with every ServiceMonitor and rule) when it is uninstalled"]),
    ("other-node-exporter", {}, {DAEMONSETS: [daemonset(
        "observability", "node-exporter", "quay.io/prometheus/node-exporter:v1.8.2",
        host_port=9100)]},
     ["DaemonSet observability/node-exporter (host port 9100)", "one of the two cannot start"]),
    ("other-kueue", {}, OTHER_KUEUE,
     ["Deployment batch-system/kueue-controller-manager",
      "the kueue.x-k8s.io CRDs of an install without Helm", "teams.kueue.mode: existing"]),
    ("untainted-gpu-nodes", {"gpuNodes": NODE_POOLS},
     UNTAINTED_NODE,
     ["without nvidia.com/gpu=present:NoSchedule: gpu-b (1 of 2)",
      "kubectl taint nodes <node> nvidia.com/gpu=present:NoSchedule"]),
    ("more-nodes-than-quota", {},
     TOO_MANY_NODES,
     ["101 nodes, more than gpuOperator.maxClusterNodes (100)", "critical-pods in gpu-operator",
      "GKE admits outside kube-system only under a ResourceQuota"]),
]


@pytest.mark.parametrize("conflict, sections, objects, says", CONFLICTS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CONFLICTS)])
def test_each_conflict_fails_the_preview_naming_what_runs_and_the_fix(
        monkeypatch, logged, conflict, sections, objects, says):
    settings = stack(**sections)
    on(monkeypatch, FakeCluster(objects))
    message = conflicts_of(settings)
    assert "nothing was deployed" in message
    [line] = [line for line in message.splitlines() if line.startswith("  - ")]
    assert line.startswith(f"  - [{conflict}] ")
    for fragment in says:
        assert fragment in line, line
    assert f"list {conflict} in gpu-platform:cluster.acknowledgedConflicts" in line


@pytest.mark.parametrize("conflict, sections, objects, says", CONFLICTS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CONFLICTS)])
def test_an_acknowledged_conflict_is_reported_without_failing(
        monkeypatch, logged, conflict, sections, objects, says):
    settings = stack(**sections, cluster={"acknowledgedConflicts": [conflict]})
    on(monkeypatch, FakeCluster(objects))
    check_conflicts(settings)
    [info] = logged["info"]
    assert info.startswith(f"gpu-platform: [{conflict}] ") and "acknowledged" in info
    assert says[0] in info


def joining(monitoring: bool = False, kueue: bool = False) -> StackSettings:
    """The example stack joining the cluster's monitoring stack or Kueue (its chart settings
    left as they are: the survey reads only the mode)."""
    settings = stack()
    kueue_settings = settings.teams.kueue.model_copy(
        update={"mode": "existing" if kueue else "install"})
    return settings.model_copy(update={
        "monitoring": settings.monitoring.model_copy(
            update={"stack": "existing" if monitoring else "install"}),
        "teams": settings.teams.model_copy(update={"kueue": kueue_settings})})


@pytest.mark.parametrize("settings, objects", [
    # The stack's settings leave what runs to it: no device plugin, driver or toolkit of its
    # own, the existing monitoring stack or Kueue joined, nodes it taints itself.
    (lambda: stack(gpuOperator={"devicePlugin": {"enabled": False}}), EKSCTL_PLUGIN),
    (stack, DRIVER_FOUND),
    (lambda: stack(gpuOperator={"toolkit": {"enabled": False}}), RUNTIME_HANDLER_FOUND),
    (lambda: joining(monitoring=True), OTHER_PROMETHEUS_OPERATOR),
    (lambda: joining(kueue=True), OTHER_KUEUE),
    (stack, UNTAINTED_NODE),
    (lambda: stack(gpuOperator={"maxClusterNodes": 101}), TOO_MANY_NODES),
    # GKE's device plugin where every GPU node pool opted out of it: it runs nowhere.
    (stack, {DAEMONSETS: [daemonset("kube-system", "nvidia-gpu-device-plugin-large-cos",
                                 "gke.gcr.io/nvidia-gpu-device-plugin", device_plugin=True,
                                 on_nodes=0)]}),
    # GPU Feature Discovery uses the device plugin's image but registers no device plugin.
    (stack, {DAEMONSETS: [daemonset("kube-system", "gpu-feature-discovery", EKSCTL_IMAGE)]}),
])
def test_what_the_settings_leave_to_the_cluster_is_no_conflict(monkeypatch, logged, settings,
                                                               objects):
    on(monkeypatch, FakeCluster(objects))
    check_conflicts(settings())
    assert logged == {"warn": [], "info": []}


def test_one_error_names_every_conflict_and_acknowledging_some_leaves_the_others(
        monkeypatch, logged):
    everything: dict[Read, Any] = {}
    for _, sections, objects, _ in CONFLICTS:
        if not sections:
            for read, value in objects.items():
                everything[read] = (everything.get(read, []) + value
                                    if isinstance(value, list) else value)
    on(monkeypatch, FakeCluster(everything))
    message = conflicts_of(stack())
    named = [line.split("]")[0][5:] for line in message.splitlines()[1:]]
    assert named == ["other-device-plugin", "preinstalled-toolkit", "other-prometheus-operator",
                     "other-node-exporter", "other-kueue", "more-nodes-than-quota"]
    some = stack(cluster={"acknowledgedConflicts": ["other-device-plugin", "other-kueue"]})
    message = conflicts_of(some)
    assert "[other-device-plugin]" not in message and "[other-kueue]" not in message
    assert "[other-node-exporter]" in message
    assert len(logged["info"]) == 2


def test_what_the_user_may_not_read_is_named_as_not_checked_with_the_rule_it_needs(
        monkeypatch, logged):
    cluster = FakeCluster(OTHER_PROMETHEUS_OPERATOR, refused=(DAEMONSETS, KUEUE_CRD))
    on(monkeypatch, cluster)
    message = conflicts_of(stack())
    # What could be read was checked.
    assert "[other-prometheus-operator]" in message
    warned = "\n".join(logged["warn"])
    for check in ("NVIDIA device plugin DaemonSets outside the GPU Operator "
                  "(other-device-plugin)", "DaemonSets on host port 9100 (other-node-exporter)",
                  "Kueue controllers and CRDs of other installs (other-kueue)"):
        assert f"not checked: {check}" in warned
    assert "may not list daemonsets.apps cluster-wide" in warned
    assert "may not get customresourcedefinitions.apiextensions.k8s.io cluster-wide" in warned
    assert len(logged["warn"]) == 3
    # A refused read is asked once.
    assert cluster.asked.count(DAEMONSETS.path()) == 1


def test_an_unknown_conflict_id_is_refused_naming_the_ids_there_are():
    with pytest.raises(SettingsError) as refused:
        stack(cluster={"acknowledgedConflicts": ["kueue"]})
    [problem] = refused.value.problems
    assert problem.startswith('gpu-platform:cluster.acknowledgedConflicts[0] = "kueue"')
    for conflict in CONFLICT_IDS:
        assert f"'{conflict}'" in problem


def test_every_conflict_id_has_a_check_a_fix_and_a_line_in_the_checklist():
    assert {check.conflict for check in CHECKS} == set(CONFLICT_IDS) == set(PROBLEMS)
    checklist = (DOCS / "adopting.md").read_text().split(
        "## Before you install on a live cluster")[1].split("\n## ")[0]
    for conflict in CONFLICT_IDS:
        assert f"`{conflict}`" in checklist, conflict


def test_the_preview_identity_may_make_every_read_of_the_survey():
    access = list(yaml.safe_load_all((DOCS / "preview-access.yaml").read_text()))
    reads = {read for item in (*CHECKS, *ADVICE) for read in item.reads}

    def granted(read: Read) -> bool:
        kinds = ("ClusterRole", "Role") if read.namespace else ("ClusterRole",)
        return any(rule_grants(rule, read) for role in access if role["kind"] in kinds
                   and role["metadata"].get("namespace") in (None, read.namespace)
                   for rule in role["rules"])
    for read in reads:
        assert granted(read), f"docs/operators/preview-access.yaml does not grant {read.rule}"


def rule_grants(rule: dict, read: Read) -> bool:
    return (read.group in rule["apiGroups"] and read.resource in rule["resources"]
            and read.rbac_verb in rule["verbs"])


DRA_FLEET = {**DRA_PATH, "gpuOperator": {"gpuPath": "dra", "maxClusterNodes": 5000}}


def fleet(gpu_nodes: int, other_nodes: int = 0) -> FakeCluster:
    return FakeCluster({NODES: [node(f"gpu-{i}", GPU) for i in range(gpu_nodes)]
                        + [node(f"cpu-{i}", tainted=False) for i in range(other_nodes)]})


def test_a_dra_fleet_is_told_what_to_set_to_place_bursts_fast(monkeypatch, logged):
    on(monkeypatch, fleet(1024))
    check_conflicts(stack(**DRA_FLEET))
    [advice] = logged["warn"]
    assert advice.startswith("gpu-platform: 1024 GPU nodes on the DRA path")
    assert "scheduler.percentageOfNodesToScore: 10 (now 100)" in advice
    assert "scheduler.clientConnection qps: 500, burst: 1000 (now 200 and 400)" in advice
    assert "docs/operators/sizing.md#large-fleets" in advice


@pytest.mark.parametrize("sections, gpu_nodes", [
    (DRA_FLEET, 999),
    ({**DRA_FLEET, "scheduler": {"percentageOfNodesToScore": 10,
                                 "clientConnection": {"qps": 500, "burst": 1000}}}, 1024),
    ({"gpuOperator": {"maxClusterNodes": 5000}}, 1024),
], ids=["fewer-gpu-nodes", "set-as-advised", "device-plugin-path"])
def test_no_fleet_advice_where_the_settings_already_suit_the_cluster(monkeypatch, logged,
                                                                     sections, gpu_nodes):
    on(monkeypatch, fleet(gpu_nodes, other_nodes=200))
    check_conflicts(stack(**sections))
    assert logged["warn"] == []


def tolerating(ds: dict, *tolerations: dict) -> dict:
    ds["spec"]["template"]["spec"]["tolerations"] = list(tolerations)
    return ds


def test_daemonsets_a_reservation_would_hold_off_gpu_nodes_are_named_with_the_toleration(
        monkeypatch, logged):
    """A pod of a DaemonSet that runs on GPU nodes, recreated on a reserved node, waits for
    the reservation to end unless it tolerates its taint; one that tolerates every taint, the
    GPU Operator's (the program tolerates it for them) and one kept off GPU nodes are fine."""
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    on(monkeypatch, FakeCluster({DAEMONSETS: [
        tolerating(daemonset("logging", "fluent-bit", "fluent-bit:3"), gpu),
        tolerating(daemonset("monitoring", "node-exporter", "node-exporter:1"),
                   {"operator": "Exists"}),
        tolerating(daemonset("gpu-operator", "nvidia-dcgm-exporter", "dcgm-exporter:4"), gpu),
        tolerating(daemonset("security", "scanner", "scanner:2"), gpu,
                   {"key": "gpu-platform.io/reserved-for", "operator": "Exists"}),
        daemonset("kube-system", "cpu-only-agent", "agent:1")]}))
    check_conflicts(stack(reservation={"enabled": True}))
    [advice] = logged["warn"]
    assert advice.startswith("gpu-platform: reservation.enabled: DaemonSet logging/fluent-bit "
                             "run on GPU nodes without tolerating gpu-platform.io/reserved-for")
    assert "{key: gpu-platform.io/reserved-for, operator: Exists, effect: NoSchedule}" in advice
    logged["warn"].clear()
    check_conflicts(stack())
    assert logged["warn"] == []


def test_a_stacks_preview_identity_is_granted_the_reads_of_its_advice():
    """A GKE-like stack (its own device plugin, an existing monitoring stack) reads DaemonSets
    for no conflict, only for reservation's advice: its previewAccess grants the read all the
    same, so the advice is given rather than named as not checked."""
    settings = load_settings(raw(with_changes(
        gpuOperator={"devicePlugin": {"enabled": False}}, monitoring={"stack": "existing"},
        reservation={"enabled": True})))
    assert not any(DAEMONSETS in check.reads for check in CHECKS if check.applies(settings))
    assert DAEMONSETS in preview_reads(settings)
