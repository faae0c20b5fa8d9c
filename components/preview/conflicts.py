"""What already runs on the stack's cluster where the platform would install its own: read in
every preview, before anything is declared, so that each conflict is named with its fix while
nothing has changed yet.

The survey reads as the context's user (`ClusterReader`). What that user may not read is not
checked, and a warning says so and names the RBAC rule it needs, rather than passing silently.
A conflict listed in `cluster.acknowledgedConflicts` is reported without failing the preview.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi

from ..base.facts import GPU_PRESENT_LABEL, GPU_RESOURCE
from ..base.model import Read
from ..base.validation import CONFIG_NAMESPACE
from ..binpack_scheduler.sizing import dra_fleet_advice
from ..gpu_operator import critical_pods
from ..gpu_reservation import TAINT_KEY as RESERVATION_TAINT
from ..gpu_reservation.actor.gpu_reservation import tolerates
from ..platform.settings import ConflictId, StackSettings
from ..platform.wiring import component_inputs
from .cluster import ClusterError, ClusterReader, ClusterUnreachable, NotAllowed

ACKNOWLEDGE = f"{CONFIG_NAMESPACE}:cluster.acknowledgedConflicts"
# Where the kubelet's device plugins register (the device plugin API): every device plugin
# mounts it from the host.
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# Fact of the pinned kube-prometheus-stack (prometheus-node-exporter's `service.port`, on the
# host network): its node-exporter listens on this host port on every node.
NODE_EXPORTER_PORT = 9100
# Helm's record of the release an object belongs to.
HELM_RELEASE = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")
# Node labels that say who installs the NVIDIA driver and toolkit: the GPU Operator's own
# (`true`: it deploys them; `pre-installed`: it found a driver there), GPU Feature Discovery's
# record of the loaded driver (current and older names), and GKE's driver installer.
OPERATOR_DEPLOYS_DRIVER = "nvidia.com/gpu.deploy.driver"
OPERATOR_DEPLOYS_TOOLKIT = "nvidia.com/gpu.deploy.container-toolkit"
GFD_DRIVER_VERSION = "nvidia.com/cuda.driver-version.full"
GFD_DRIVER_MAJOR = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor",
                    "nvidia.com/cuda.driver.rev")
GKE_DRIVER_VERSION = "cloud.google.com/gke-gpu-driver-version"
# EKS's node labels (managed node groups, and Karpenter's on AWS), and Karpenter's GPU label.
EKS_LABEL_PREFIXES = ("eks.amazonaws.com/", "karpenter.k8s.aws/")
KARPENTER_GPU_MAKER = "karpenter.k8s.aws/instance-gpu-manufacturer"
SHOWN = 5


NODES = Read("v1", "nodes")
DAEMONSETS = Read("apps/v1", "daemonsets")
DEPLOYMENTS = Read("apps/v1", "deployments")
# Static pods show in the API as mirror pods, in kube-system where node images put them.
KUBE_SYSTEM_PODS = Read("v1", "pods", namespace="kube-system")
PROMETHEUS_CRD = Read("apiextensions.k8s.io/v1", "customresourcedefinitions",
                      name="prometheuses.monitoring.coreos.com")
KUEUE_CRD = Read("apiextensions.k8s.io/v1", "customresourcedefinitions",
                 name="clusterqueues.kueue.x-k8s.io")

Reads = dict[Read, Any]


# --- what the objects say ----------------------------------------------------------------------

def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _labels(obj: dict) -> dict[str, str]:
    return _meta(obj).get("labels") or {}


def _named(obj: dict, kind: str) -> str:
    return f"{kind} {_meta(obj).get('namespace')}/{_meta(obj).get('name')}"


def _pod_spec(workload: dict) -> dict:
    return ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}


def _containers(spec: dict) -> list[dict]:
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def _image_name(image: str) -> str:
    """The last path component of an image reference, without tag or digest."""
    return image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]


def _runs_image(spec: dict, name: str) -> bool:
    return any(_image_name(c.get("image", "")) == name for c in _containers(spec))


def _helm_release(obj: dict) -> tuple[str, str] | None:
    annotations = _meta(obj).get("annotations") or {}
    name, namespace = (annotations.get(key) for key in HELM_RELEASE)
    return (name, namespace) if name and namespace else None


def _serves_nvidia_gpus(name: str, spec: dict) -> bool:
    """A device plugin (it mounts the kubelet's registration directory) of NVIDIA's (NVIDIA in
    its name or an image: NVIDIA's own, eksctl's and GKE's are)."""
    registers = any((volume.get("hostPath") or {}).get("path", "").rstrip("/")
                    .startswith(DEVICE_PLUGIN_DIR) for volume in spec.get("volumes") or [])
    nvidia = "nvidia" in name.lower() or any("nvidia" in c.get("image", "").lower()
                                             for c in _containers(spec))
    return registers and nvidia


def _scheduled_on(daemonset: dict) -> int | None:
    """The nodes a DaemonSet runs on, once its controller has counted them."""
    status = daemonset.get("status") or {}
    return status.get("desiredNumberScheduled", 0) if status.get("observedGeneration") else None


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _os_image(node: dict) -> str:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("osImage", "")


def _has_gpu(node: dict) -> bool:
    labels = _labels(node)
    return (labels.get(GPU_PRESENT_LABEL[0]) == GPU_PRESENT_LABEL[1]
            or labels.get(KARPENTER_GPU_MAKER) == "nvidia"
            or GPU_RESOURCE in ((node.get("status") or {}).get("capacity") or {}))


def _bottlerocket_nvidia(node: dict) -> bool:
    """Bottlerocket's NVIDIA variants name themselves in the OS image."""
    return _os_image(node).startswith("Bottlerocket") and "nvidia" in _os_image(node).lower()


def _node_image_ships_them(node: dict) -> str | None:
    """Why the node's image comes with NVIDIA's driver and toolkit, if its OS says so:
    Bottlerocket's NVIDIA variants name themselves in the OS image; on EKS, Amazon Linux on a
    GPU node is the accelerated AMI (the standard one has no NVIDIA driver)."""
    os_image = _os_image(node)
    if _bottlerocket_nvidia(node):
        return f"its OS image, {os_image}, is Bottlerocket's NVIDIA variant"
    on_eks = any(key.startswith(EKS_LABEL_PREFIXES) for key in _labels(node))
    if on_eks and os_image.startswith("Amazon Linux") and _has_gpu(node):
        return f"{os_image} on an EKS GPU node: EKS's accelerated AMI"
    return None


def driver_evidence(node: dict) -> str | None:
    """What shows a driver the GPU Operator did not install on the node, if anything does."""
    labels = _labels(node)
    deployed = labels.get(OPERATOR_DEPLOYS_DRIVER)
    if deployed == "pre-installed":
        return f"a GPU Operator found a driver there ({OPERATOR_DEPLOYS_DRIVER}=pre-installed)"
    if deployed == "true":
        return None     # a GPU Operator installs it: its own driver, not one beside it
    version = labels.get(GFD_DRIVER_VERSION) or ".".join(
        labels[key] for key in GFD_DRIVER_MAJOR if key in labels)
    if version:
        return f"GPU Feature Discovery found driver {version} loaded"
    if labels.get(GKE_DRIVER_VERSION) in ("default", "latest"):
        return f"GKE installs the driver ({GKE_DRIVER_VERSION}={labels[GKE_DRIVER_VERSION]})"
    return _node_image_ships_them(node)


def toolkit_evidence(node: dict) -> str | None:
    """What shows a container toolkit the GPU Operator did not install on the node."""
    if _labels(node).get(OPERATOR_DEPLOYS_TOOLKIT) == "true":
        return None
    handlers = [h.get("name", "") for h in (node.get("status") or {}).get("runtimeHandlers")
                or [] if h.get("name", "").startswith("nvidia")]
    if handlers:
        return f"its container runtime has the {handlers[0]} runtime handler"
    return _node_image_ships_them(node)


# --- the checks -------------------------------------------------------------------------------

def _other_device_plugins(settings: StackSettings, reads: Reads) -> list[str]:
    found = []
    for daemonset in reads[DAEMONSETS]:
        # The stack's GPU Operator runs its own there; on the DRA path the next `pulumi up`
        # removes it.
        if _meta(daemonset).get("namespace") == settings.gpu_operator.namespace:
            continue
        nodes = _scheduled_on(daemonset)
        if nodes != 0 and _serves_nvidia_gpus(_meta(daemonset).get("name", ""),
                                              _pod_spec(daemonset)):
            found.append(_named(daemonset, "DaemonSet")
                         + (f" (on {nodes} nodes)" if nodes else ""))
    return found


def _static_device_plugins(settings: StackSettings, reads: Reads) -> list[str]:
    return [f"{_named(pod, 'static pod')} (on node {pod['spec'].get('nodeName')})"
            for pod in reads[KUBE_SYSTEM_PODS]
            if any(owner.get("kind") == "Node" for owner in _meta(pod).get("ownerReferences")
                   or [])
            and _serves_nvidia_gpus(_meta(pod).get("name", ""), pod.get("spec") or {})]


def _host_device_plugins(settings: StackSettings, reads: Reads) -> list[str]:
    # Bottlerocket's NVIDIA variants run NVIDIA's device plugin on the host, not in a pod.
    found = [_meta(node).get("name", "") for node in reads[NODES] if _bottlerocket_nvidia(node)]
    return ([f"NVIDIA's device plugin on the host of Bottlerocket nodes {_some(found)}"]
            if found else [])


def _nodes_with(evidence: Callable[[dict], str | None]) -> Callable[[StackSettings, Reads],
                                                                      list[str]]:
    def find(settings: StackSettings, reads: Reads) -> list[str]:
        found = [f"{_meta(node).get('name')} ({why})" for node in reads[NODES]
                 if (why := evidence(node))]
        return [f"nodes {_some(found)}"] if found else []
    return find


def _other_prometheus_operators(settings: StackSettings, reads: Reads) -> list[str]:
    ours = (settings.monitoring.release_name, settings.monitoring.namespace)
    return [_named(deployment, "Deployment") for deployment in reads[DEPLOYMENTS]
            if _runs_image(_pod_spec(deployment), "prometheus-operator")
            and _helm_release(deployment) != ours]


def _other_monitoring_crds(settings: StackSettings, reads: Reads) -> list[str]:
    # kube-prometheus-stack installs its CRDs unrecorded (the chart's crds/ directory): only
    # CRDs another release templated say whose they are.
    crd = reads[PROMETHEUS_CRD]
    owner = _helm_release(crd) if crd else None
    if owner and owner != (settings.monitoring.release_name, settings.monitoring.namespace):
        return [f"the monitoring.coreos.com CRDs of Helm release {owner[1]}/{owner[0]}"]
    return []


def _other_node_exporters(settings: StackSettings, reads: Reads) -> list[str]:
    ours = (settings.monitoring.release_name, settings.monitoring.namespace)
    found = []
    for daemonset in reads[DAEMONSETS]:
        spec = _pod_spec(daemonset)
        ports = [p for c in _containers(spec) for p in c.get("ports") or []]
        if _helm_release(daemonset) != ours and any(
                p.get("hostPort") == NODE_EXPORTER_PORT
                or (spec.get("hostNetwork") and p.get("containerPort") == NODE_EXPORTER_PORT)
                for p in ports):
            found.append(f"{_named(daemonset, 'DaemonSet')} (host port {NODE_EXPORTER_PORT})")
    return found


def _other_kueues(settings: StackSettings, reads: Reads) -> list[str]:
    ours = (settings.teams.kueue.release_name, settings.teams.kueue.namespace)
    found = [_named(deployment, "Deployment") for deployment in reads[DEPLOYMENTS]
             if _runs_image(_pod_spec(deployment), "kueue") and _helm_release(deployment) != ours]
    crd = reads[KUEUE_CRD]
    # The pinned chart templates its CRDs, so Helm records the release that owns them.
    if crd and _helm_release(crd) != ours:
        owner = _helm_release(crd)
        found.append("the kueue.x-k8s.io CRDs of " + (f"Helm release {owner[1]}/{owner[0]}"
                                                      if owner else "an install without Helm"))
    return found


def _untainted_gpu_nodes(settings: StackSettings, reads: Reads) -> list[str]:
    taint = settings.gpu_nodes.taint
    gpu_nodes = [node for node in reads[NODES]
                 if _labels(node).get(GPU_PRESENT_LABEL[0]) == GPU_PRESENT_LABEL[1]]
    untainted = [_meta(node).get("name", "") for node in gpu_nodes
                 if not any(t.get("key") == taint.key and t.get("effect") == taint.effect
                            and (t.get("value") or "") == taint.value
                            for t in (node.get("spec") or {}).get("taints") or [])]
    if not untainted:
        return []
    return [f"GPU nodes ({GPU_PRESENT_LABEL[0]}={GPU_PRESENT_LABEL[1]}) without {taint}: "
            f"{_some(untainted)} ({len(untainted)} of {len(gpu_nodes)})"]


def quota_shortfall(settings: StackSettings, nodes: int) -> tuple[int, int] | None:
    """(pods the operator's critical-pods quota admits, pods `nodes` nodes need) when they need
    more: the quota is sized from gpuOperator.maxClusterNodes."""
    inputs = component_inputs(settings).gpu_operator
    sized = critical_pods(inputs)
    observed = inputs.model_copy(update={"gpu_operator": inputs.gpu_operator.model_copy(
        update={"max_cluster_nodes": nodes})})
    needed = critical_pods(observed)
    return (sized, needed) if needed > sized else None


def _nodes_beyond_quota(settings: StackSettings, reads: Reads) -> list[str]:
    nodes = len(reads[NODES])
    shortfall = quota_shortfall(settings, nodes)
    if not shortfall:
        return []
    return [f"{nodes} nodes, more than gpuOperator.maxClusterNodes "
            f"({settings.gpu_operator.max_cluster_nodes}): they need {shortfall[1]} of the "
            f"operator's critical pods, and its quota admits {shortfall[0]}"]


# --- why each conflicts, and its fix ----------------------------------------------------------

def _device_plugin_problem(settings: StackSettings) -> tuple[str, str]:
    remove = ("remove it (eksctl's: kubectl -n kube-system delete daemonset "
              "nvidia-device-plugin-daemonset, and --install-nvidia-plugin=false for new "
              "node groups; GKE's: the node label gke-no-default-nvidia-gpu-device-plugin=true "
              "on the GPU node pools; a Helm release's: helm uninstall)")
    if settings.gpu_operator.gpu_path == "dra":
        return ("on the DRA path (gpuOperator.gpuPath: dra) NVIDIA's DRA driver serves the "
                f"GPUs, and a device plugin beside it hands the same GPUs out again as "
                f"{GPU_RESOURCE}", remove)
    return ("the GPU Operator would run its own device plugin there "
            "(gpuOperator.devicePlugin.enabled), and only one device plugin can advertise a "
            f"node's {GPU_RESOURCE}: the kubelet keeps whichever registered last",
            f"{remove}, or keep it as the only one: set gpuOperator.devicePlugin.enabled: false")


PROBLEMS: dict[ConflictId, Callable[[StackSettings], tuple[str, str]]] = {
    "other-device-plugin": _device_plugin_problem,
    "preinstalled-driver": lambda s: (
        "gpuOperator.driver.enabled has the GPU Operator install a driver on them too: "
        "its driver pods fail beside the loaded one or leave those nodes to it, so the "
        "version that runs is not the one the stack pins",
        "set gpuOperator.driver.enabled: false to use the nodes' driver, or node images without "
        "one (GKE: gpu-driver-version=disabled on the node pool)"),
    "preinstalled-toolkit": lambda s: (
        "gpuOperator.toolkit.enabled has the GPU Operator install its container toolkit "
        "there too and rewrite the container runtime's configuration the node image set up",
        "set gpuOperator.toolkit.enabled: false to use the nodes' toolkit (gpuOperator."
        "restrictVisibleDevices then does not reach it: keep "
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false in its config.toml)"),
    "other-prometheus-operator": lambda s: (
        "monitoring.stack: install brings kube-prometheus-stack's own Prometheus Operator: "
        "two operators reconcile the same Prometheus and ServiceMonitor objects, and CRDs "
        "another release owns go (with every ServiceMonitor and rule) when it is uninstalled",
        "set monitoring.stack: existing to join the stack that runs (docs/operators/"
        "monitoring.md), or remove the other one"),
    "other-node-exporter": lambda s: (
        f"kube-prometheus-stack's node-exporter listens on host port {NODE_EXPORTER_PORT} on "
        "every node too: on each node one of the two cannot start",
        "set monitoring.stack: existing to use the stack that runs it, or move the other "
        f"exporter off port {NODE_EXPORTER_PORT}"),
    "other-kueue": lambda s: (
        f"teams.enabled installs Kueue (release {s.teams.kueue.release_name} in "
        f"{s.teams.kueue.namespace}): two Kueue controllers admit the same workloads, and "
        "Helm refuses to take over CRDs another install owns",
        "set teams.kueue.mode: existing to put the teams' queues into the Kueue that runs "
        "(docs/operators/teams.md), or remove the other one"),
    "untainted-gpu-nodes": lambda s: (
        "with gpuNodes.taintedBy: nodePool the program never taints a node: without the "
        "taint, pods that ask for no GPU land on GPU nodes and hold them",
        f"have the node pools register {s.gpu_nodes.taint} (GKE, AKS: --node-taints; EKS "
        "managed node groups: taints; Karpenter: the NodePool's spec.template.spec.taints) "
        f"and taint the nodes there now (kubectl taint nodes <node> {s.gpu_nodes.taint}), "
        "or name them with gpuNodes.taintedBy: program"),
    "more-nodes-than-quota": lambda s: (
        f"the GPU Operator's pods run at a critical priority, which GKE admits outside "
        f"kube-system only under a ResourceQuota of that scope (elsewhere it caps them): "
        f"critical-pods in {s.gpu_operator.namespace}, sized from gpuOperator.maxClusterNodes; "
        "past it the newest nodes get no Node Feature Discovery worker or operands",
        "set gpuOperator.maxClusterNodes to at least the cluster's nodes, with room for those "
        "an autoscaler may add"),
}


@dataclass(frozen=True)
class Check:
    """A way a conflict shows: what it looks for, when the stack's settings make it one, the
    reads it needs, and what it finds (one line per finding)."""

    conflict: ConflictId
    looks_for: str
    applies: Callable[[StackSettings], bool]
    reads: tuple[Read, ...]
    find: Callable[[StackSettings, Reads], list[str]]


def _installs_monitoring(settings: StackSettings) -> bool:
    return settings.monitoring.stack == "install"


CHECKS = (
    Check("other-device-plugin", "NVIDIA device plugin DaemonSets outside the GPU Operator",
          lambda s: s.gpu_operator.gpu_path == "dra" or s.gpu_operator.device_plugin.enabled,
          (DAEMONSETS,), _other_device_plugins),
    Check("other-device-plugin", "NVIDIA device plugins run as static pods",
          lambda s: s.gpu_operator.gpu_path == "dra" or s.gpu_operator.device_plugin.enabled,
          (KUBE_SYSTEM_PODS,), _static_device_plugins),
    Check("other-device-plugin", "NVIDIA device plugins on the nodes' hosts (OS images)",
          lambda s: s.gpu_operator.gpu_path == "dra" or s.gpu_operator.device_plugin.enabled,
          (NODES,), _host_device_plugins),
    Check("preinstalled-driver", "a driver on the nodes (node labels and OS images)",
          lambda s: s.gpu_operator.driver.enabled, (NODES,), _nodes_with(driver_evidence)),
    Check("preinstalled-toolkit", "a container toolkit on the nodes (node labels, OS images "
          "and runtime handlers)",
          lambda s: s.gpu_operator.gpu_path == "devicePlugin" and s.gpu_operator.toolkit.enabled,
          (NODES,), _nodes_with(toolkit_evidence)),
    Check("other-prometheus-operator", "Prometheus Operator Deployments of other releases",
          _installs_monitoring, (DEPLOYMENTS,), _other_prometheus_operators),
    Check("other-prometheus-operator", "the owner of the monitoring.coreos.com CRDs",
          _installs_monitoring, (PROMETHEUS_CRD,), _other_monitoring_crds),
    Check("other-node-exporter", f"DaemonSets on host port {NODE_EXPORTER_PORT}",
          _installs_monitoring, (DAEMONSETS,), _other_node_exporters),
    Check("other-kueue", "Kueue controllers and CRDs of other installs",
          lambda s: s.teams.enabled and s.teams.kueue.mode == "install",
          (DEPLOYMENTS, KUEUE_CRD), _other_kueues),
    Check("untainted-gpu-nodes", "GPU nodes without the GPU taint",
          lambda s: s.gpu_nodes.tainted_by == "nodePool", (NODES,), _untainted_gpu_nodes),
    Check("more-nodes-than-quota", "the number of nodes against the GPU Operator's quota",
          lambda s: True, (NODES,), _nodes_beyond_quota),
)
CONFLICT_IDS: tuple[ConflictId, ...] = typing.get_args(ConflictId)


@dataclass(frozen=True)
class Advice:
    """What the settings or the cluster should change, which fails nothing: what it looks
    for, when the settings call for it, the reads it needs, and what it says (nothing, where
    all is well)."""

    looks_for: str
    applies: Callable[[StackSettings], bool]
    reads: tuple[Read, ...]
    advise: Callable[[StackSettings, Reads], list[str]]


def _dra_fleet(settings: StackSettings, reads: Reads) -> list[str]:
    advice = dra_fleet_advice(settings.scheduler,
                              sum(1 for node in reads[NODES] if _has_gpu(node)))
    return [advice] if advice else []


def _daemonsets_held_off_reserved_nodes(settings: StackSettings, reads: Reads) -> list[str]:
    """DaemonSets whose pods run on GPU nodes (they tolerate the GPU taint) but would not be
    let back onto a reserved one: the GPU Operator's get the toleration from the program."""
    gpu = settings.gpu_nodes.taint.model_dump()
    reserved = {"key": RESERVATION_TAINT, "value": "", "effect": "NoSchedule"}
    held = [_named(daemonset, "DaemonSet") for daemonset in reads[DAEMONSETS]
            if _meta(daemonset).get("namespace") != settings.gpu_operator.namespace
            and tolerates(tuple(_pod_spec(daemonset).get("tolerations") or []), gpu)
            and not tolerates(tuple(_pod_spec(daemonset).get("tolerations") or []), reserved)]
    if not held:
        return []
    return [f"reservation.enabled: {_some(held)} run on GPU nodes without tolerating "
            f"{RESERVATION_TAINT}: a pod of theirs recreated on a reserved node (a rolling "
            f"update) waits until the reservation ends. Give them the toleration {{key: "
            f"{RESERVATION_TAINT}, operator: Exists, effect: NoSchedule}} "
            f"(docs/concepts/reservation.md#limits)"]


ADVICE = (
    Advice("the number of GPU nodes against the DRA path's scheduler settings",
           lambda s: s.gpu_operator.gpu_path == "dra", (NODES,), _dra_fleet),
    Advice("DaemonSets on GPU nodes that a reservation would hold off",
           lambda s: s.reservation.enabled, (DAEMONSETS,), _daemonsets_held_off_reserved_nodes),
)


@dataclass
class Survey:
    """What a survey found: each conflict with its findings, what it could not check, and what
    the settings should change for the size of the cluster."""

    found: dict[ConflictId, list[str]]
    not_checked: list[str]
    advice: list[str] = field(default_factory=list)

    def message(self, settings: StackSettings, conflict: ConflictId) -> str:
        problem, fix = PROBLEMS[conflict](settings)
        return (f"[{conflict}] {'; '.join(self.found[conflict])}: {problem}. Fix: {fix}; or, to "
                f"install beside it, list {conflict} in {ACKNOWLEDGE}")


def survey(settings: StackSettings, reader: ClusterReader) -> Survey:
    """Every check the stack's settings call for, each read once; a read the user may not make
    leaves the checks that need it undone, each named with the rules it needs."""
    reads: Reads = {}
    refused: set[Read] = set()
    result = Survey({}, [])

    def read_for(needed: tuple[Read, ...], looks_for: str) -> bool:
        """Whether every read `needed` was made (else it is named as not checked)."""
        for read in needed:
            if read in reads or read in refused:
                continue
            try:
                reads[read] = reader.get(read.path()) if read.name else reader.items(read.path())
            except NotAllowed:
                refused.add(read)
        missing = [read.rule for read in needed if read in refused]
        if missing:
            result.not_checked.append(
                f"not checked: {looks_for}: the context's user may not {' or '.join(missing)}; "
                f"give it that right (as the stack's previewAccess output does) to have the "
                f"preview check it")
        return not missing

    for check in CHECKS:
        if (check.applies(settings) and read_for(check.reads,
                                                 f"{check.looks_for} ({check.conflict})")
                and (found := check.find(settings, reads))):
            result.found.setdefault(check.conflict, []).extend(found)
    for advice in ADVICE:
        if advice.applies(settings) and read_for(advice.reads, advice.looks_for):
            result.advice += advice.advise(settings, reads)
    return result


class ClusterConflicts(Exception):
    """What the cluster runs conflicts with what the stack would install: raised before
    anything is declared."""

    def __init__(self, problems: list[str]):
        super().__init__("the stack's cluster already runs what the platform would install "
                         "beside it (nothing was deployed):\n"
                         + "\n".join(f"  - {p}" for p in problems))


def check_conflicts(settings: StackSettings) -> None:
    """In a preview: fail on each unacknowledged conflict with what the cluster runs, naming
    them all with their fixes; report the acknowledged ones and what was not checked."""
    try:
        with ClusterReader(settings.cluster) as reader:
            result = survey(settings, reader)
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    acknowledged = set(settings.cluster.acknowledged_conflicts)
    for warning in result.not_checked + result.advice:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: {warning}")
    for conflict in sorted(acknowledged & result.found.keys()):
        pulumi.log.info(f"{CONFIG_NAMESPACE}: [{conflict}] {'; '.join(result.found[conflict])}"
                        f" (acknowledged in {ACKNOWLEDGE})")
    problems = [result.message(settings, conflict) for conflict in CONFLICT_IDS
                if conflict in result.found and conflict not in acknowledged]
    if problems:
        raise ClusterConflicts(problems)
