"""GPU recording and alert rules (one PrometheusRule), and the series the dashboard reads.

How the series join, as the pinned exporters label them:
- kube-state-metrics: `kube_pod_container_resource_requests` carries `namespace`, `pod`, `node`
  (empty until the pod is bound) and `resource`, with extended resources named by replacing every
  non-alphanumeric with `_` (nvidia.com/gpu -> `nvidia_com_gpu`); `kube_pod_status_phase` and
  `kube_pod_status_unschedulable` carry `namespace` and `pod`; `kube_node_status_allocatable`
  carries `node`.
- DCGM exporter, through the platform's ServiceMonitor: one series per GPU with `gpu`, `UUID`,
  `modelName`, `Hostname`; `namespace`, `pod` and `container` of the pod the GPU is allocated to
  (absent for a free GPU); `node` from the exporter pod's node. So DCGM joins kube-state-metrics
  on (namespace, pod) for workloads and on (node) for nodes.
- `up{job="nvidia-dcgm-exporter"}`: the scrape health of each exporter, with the same `node`.
- kube-state-metrics' nodes: `kube_node_labels` carries `node` and, for each label its
  `metricLabelsAllowlist` names (values.py), `label_<key>`; `kube_node_spec_taint` one series
  per taint with `node`, `key`, `value`, `effect`. Its pods: `kube_pod_info` carries `namespace`,
  `pod`, `uid` and `node`; `kube_pod_container_info` the same pod labels and `container`, for
  each container that has a status.

GPU use (activity joined to the pods, namespaces and teams that hold the GPUs) is a group of its
own, built in usage.py.
"""

from __future__ import annotations

from ..base import manifests
from ..base.facts import (
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    NVIDIA_RESOURCES,
)
from ..base.gpu_faults import DCGM_JOB, FAULTS, GpuFault
from ..base.ksm import ksm_label, ksm_resource
from ..base.mixin import alert
from . import usage
from .inputs import MonitoringInputs

COMPONENT = "monitoring"
RULE_NAME = "gpu-platform"


GPU = ksm_resource(GPU_RESOURCE)
# Recorded series, in evaluation order (later rules read earlier ones of the same evaluation).
POD_ALLOCATED = "gpu_platform:pod_gpu_allocated:sum"
NODE_ALLOCATABLE = "gpu_platform:node_gpu_allocatable:sum"
NODE_ALLOCATED = "gpu_platform:node_gpu_allocated:sum"
NODE_FREE = "gpu_platform:node_gpu_free:sum"
NAMESPACE_ALLOCATED = "gpu_platform:namespace_gpu_allocated:sum"
STRANDED = "gpu_platform:gpu_stranded:sum"
GPU_PODS_PENDING = "gpu_platform:gpu_pods_pending:count"
WHOLE_FREE_NODES = "gpu_platform:gpu_nodes_whole_free:count"
# On the DRA path no node advertises GPUs in its allocatable, and a pod may hold GPUs through a
# claim rather than a request: the DCGM exporter, which sees each GPU and the pod it is
# allocated to (its DRA mode, which the GPUCluster turns on), counts them. Each GPU once, by its
# UUID: a GPU that containers share has a series per container.
DCGM_GPUS = "count by ({by}, UUID) (DCGM_FI_DEV_GPU_UTIL{{{match}}})"
# GPU nodes, one series each: every node labelled as having GPUs, named in the settings or not.
GPU_NODES = (f'max by (node) (kube_node_labels{{{ksm_label(GPU_PRESENT_LABEL[0])}='
             f'"{GPU_PRESENT_LABEL[1]}"}})')
# Any resource NVIDIA's device plugins advertise: with the mixed MIG strategy a node whose GPUs
# are all partitioned advertises nvidia.com/gpu: 0 and its slices, and is served.
NVIDIA = ksm_resource(NVIDIA_RESOURCES.removesuffix("*")) + ".+"
# Device plugins of nvidia.com/gpu, by container name: the GPU Operator's
# (`nvidia-device-plugin`), NVIDIA's chart's and static manifest's (`nvidia-device-plugin-ctr`,
# with its config sidecar in the same pod), GKE's (`nvidia-gpu-device-plugin`). Not by image:
# NVIDIA's k8s-device-plugin image also runs GPU Feature Discovery, the config manager and the
# MPS daemon, which serve nothing; and GKE's plugin has an image of its own.
DEVICE_PLUGIN_CONTAINERS = "nvidia(-gpu)?-device-plugin.*"
# Device plugins a node may run, by GPU path: on the DRA path the DRA driver serves
# nvidia.com/gpu, and a device plugin would advertise the node's GPUs beside it.
DEVICE_PLUGINS_ALLOWED = {"devicePlugin": 1, "dra": 0}


def domain_free_gpus(level: str) -> str:
    """Free GPUs in each domain of a network level (a node label), summed over its nodes."""
    label = ksm_label(level)
    return (f"sum by ({label}) ({NODE_FREE} * on (node) group_left ({label}) "
            f'max by (node, {label}) (kube_node_labels{{{label}!=""}}))')


def domain_whole_free_nodes(level: str) -> str:
    """GPU nodes with every GPU free in each domain of a network level: the nodes a gang that
    must stay in one domain can still get there."""
    label = ksm_label(level)
    return (f"count by ({label}) ((({NODE_FREE} == on (node) {NODE_ALLOCATABLE}) and on (node) "
            f"({NODE_ALLOCATABLE} > 0)) * on (node) group_left ({label}) "
            f'max by (node, {label}) (kube_node_labels{{{label}!=""}}))')


def recording_rules(inputs: MonitoringInputs) -> list[dict]:
    largest = inputs.monitoring.largest_common_request
    requested = (f'sum by (namespace, pod, node) ('
                 f'kube_pod_container_resource_requests{{resource="{GPU}", node!=""}} '
                 f'* on (namespace, pod) group_left () '
                 f'max by (namespace, pod) '
                 f'(kube_pod_status_phase{{phase=~"Pending|Running"}} == 1))')
    allocatable = f'sum by (node) (kube_node_status_allocatable{{resource="{GPU}"}})'
    if inputs.gpu_path == "dra":
        # A claim's GPUs, for the pods that request none (a request wins where both count).
        claimed = DCGM_GPUS.format(by="namespace, pod, node", match='pod!=""')
        requested = f"{requested} or count by (namespace, pod, node) ({claimed})"
        allocatable = f"count by (node) ({DCGM_GPUS.format(by='node', match='')})"
    return [
        # GPUs held by pods: bound to a node and not finished (a bound pod that is still
        # pulling its image already holds its GPUs).
        {"record": POD_ALLOCATED, "expr": requested},
        {"record": NODE_ALLOCATABLE, "expr": allocatable},
        {"record": NODE_ALLOCATED, "expr": f"sum by (node) ({POD_ALLOCATED})"},
        # A node without GPU pods has no allocation series: it counts as zero allocated.
        {"record": NODE_FREE,
         "expr": f"{NODE_ALLOCATABLE} - on (node) "
                 f"({NODE_ALLOCATED} or on (node) {NODE_ALLOCATABLE} * 0)"},
        {"record": NAMESPACE_ALLOCATED, "expr": f"sum by (namespace) ({POD_ALLOCATED})"},
        # GPU nodes with every GPU free: what a whole-node job needs, and what compaction makes.
        {"record": WHOLE_FREE_NODES,
         "expr": f"count(({NODE_FREE} == on (node) {NODE_ALLOCATABLE}) and on (node) "
                 f"({NODE_ALLOCATABLE} > 0)) or vector(0)"},
        # Free GPUs on busy nodes that cannot take the largest common request (or, on a node
        # smaller than that, a pod the size of the node).
        {"record": STRANDED,
         "expr": f"sum(({NODE_FREE} < on (node) clamp_max({NODE_ALLOCATABLE}, {largest})) "
                 f"and on (node) ({NODE_ALLOCATED} > 0)) or vector(0)"},
        # GPU pods not yet running (waiting for a node, or not yet seen by a scheduler).
        {"record": GPU_PODS_PENDING,
         "expr": f'count((sum by (namespace, pod) (kube_pod_container_resource_requests'
                 f'{{resource="{GPU}"}}) > 0) and on (namespace, pod) '
                 f'(kube_pod_status_phase{{phase="Pending"}} == 1)) or vector(0)'},
    ]


def untainted_gpu_nodes(inputs: MonitoringInputs) -> str:
    """GPU nodes without the platform's GPU taint (key, value and effect: a taint of another
    value repels the GPU pods, whose toleration names this one)."""
    taint = inputs.gpu_nodes.taints[0]
    return (f'{GPU_NODES} unless on (node) kube_node_spec_taint{{key="{taint.key}", '
            f'value="{taint.value}", effect="{taint.effect}"}}')


def unserved_gpu_nodes(inputs: MonitoringInputs) -> str:
    """GPU nodes whose GPUs nothing serves: on the device plugin path, that advertise no NVIDIA
    resource; on the DRA path, for which the DCGM exporter reports no GPU (it sees the GPUs the
    DRA driver publishes)."""
    served = (NODE_ALLOCATABLE if inputs.gpu_path == "dra"
              else f'kube_node_status_allocatable{{resource=~"{NVIDIA}"}}')
    return f"{GPU_NODES} unless on (node) ({served} > 0)"


def device_plugins_per_node() -> str:
    """Running pods with a device plugin container, per node. A pod counts once (a sidecar may
    share the name); a plugin that keeps restarting still counts: its container keeps its info
    series, and its pod stays Running (two plugins on one node replace each other's socket, so
    one of them restarts)."""
    return (f'count by (node) (max by (namespace, pod, uid) (kube_pod_container_info{{'
            f'container=~"{DEVICE_PLUGIN_CONTAINERS}"}}) * on (namespace, pod, uid) '
            f'group_left (node) max by (namespace, pod, uid, node) (kube_pod_info{{node!=""}}) '
            f'and on (namespace, pod, uid) (kube_pod_status_phase{{phase="Running"}} == 1))')


def extra_device_plugins(inputs: MonitoringInputs) -> str:
    """Nodes running more device plugins than the GPU path allows."""
    return f"{device_plugins_per_node()} > {DEVICE_PLUGINS_ALLOWED[inputs.gpu_path]}"


def with_team(inputs: MonitoringInputs, expr: str) -> str:
    """`expr` (by namespace, pod), each series of a team's namespace labelled with its `team`,
    so that Alertmanager routes it to the team's receivers; unchanged without teams."""
    if not usage.team_namespaces(inputs):
        return expr
    return f"{usage.team_joined(f'({expr})')} or on (namespace, pod) ({expr})"


def fault_alert(fault: GpuFault, fatal_xid_codes: list[int], gpu: str) -> dict:
    """A GPU fault's alert, from its one classification (base/gpu_faults.py). A fault is an
    event or a count over a window already: it fires at once."""
    if fault.action == "quarantine":
        then = ("Where fault remediation is on it takes the node out of service "
                "(GpuNodeQuarantined); otherwise cordon and drain the node, then reset the GPU "
                "or reboot the node.")
    else:
        then = "Watch it: nothing is done to the node for it."
    return alert(fault.alert, fault.expr(fatal_xid_codes), "0s", fault.severity, fault.summary,
                 f"{gpu}: {fault.meaning}. Value: {{{{ $value }}}}. {then} "
                 f"Pod: {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}}.")


def alert_rules(inputs: MonitoringInputs) -> list[dict]:
    """The GPUs' alerts, the platform's quotas', and then each component's (its mixin's)."""
    alerts = inputs.monitoring.alerts
    gpu = ("GPU {{ $labels.gpu }} ({{ $labels.modelName }}, UUID {{ $labels.UUID }}) on node "
           "{{ $labels.node }}")
    quota_namespaces = "|".join(namespace for mixin in inputs.mixins
                                for namespace in mixin.critical_pods_namespaces)

    def quota(kind: str) -> str:
        return (f'kube_resourcequota{{namespace=~"{quota_namespaces}", '
                f'resourcequota="{manifests.CRITICAL_PODS_QUOTA}", resource="pods", '
                f'type="{kind}"}}')
    # GPU nodes: on the DRA path the exporter is where capacity is read from, so a node whose
    # exporter stops is one that had GPUs within the hour.
    gpu_nodes = (f"max_over_time({NODE_ALLOCATABLE}[1h])" if inputs.gpu_path == "dra"
                 else NODE_ALLOCATABLE)
    return [
        *(fault_alert(fault, alerts.fatal_xid_codes, gpu) for fault in FAULTS),
        alert("GpuTemperatureHigh", f"DCGM_FI_DEV_GPU_TEMP > {alerts.gpu_temperature_celsius}",
               alerts.gpu_temperature_for, "warning", "GPU running hot",
               f"{gpu} has been above {alerts.gpu_temperature_celsius} C for "
               f"{alerts.gpu_temperature_for} ({{{{ $value }}}} C): check cooling; the GPU "
               "will throttle."),
        alert("GpuExporterDown",
               f'({gpu_nodes} > 0) unless on (node) (up{{job="{DCGM_JOB}"}} == 1)',
               alerts.exporter_down_for, "warning", "GPU node without a working DCGM exporter",
               f"Node {{{{ $labels.node }}}} advertises {{{{ $value }}}} GPUs but no DCGM "
               f"exporter on it has been scraped for {alerts.exporter_down_for}: its GPU usage "
               "and health are unknown."),
        *gpu_node_alerts(inputs),
        alert("GpuAllocatedIdle", with_team(inputs, allocated_idle(inputs)),
              "0s", "info", "GPUs allocated but idle",
              f"Pod {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} "
              f"{usage.idle_means(inputs.monitoring.usage.active_threshold, alerts.idle_for)}: "
              "{{ $value }} GPUs others could use."),
        alert("GpuPodFragmentationPending",
               f'(sum by (namespace, pod) '
               f'(kube_pod_container_resource_requests{{resource="{GPU}"}}) '
               f"and on (namespace, pod) (kube_pod_status_unschedulable == 1)) "
               f"<= on () group_left () sum({NODE_FREE})",
               alerts.pending_for, "warning", "GPU pod pending although enough GPUs are free",
               f"Pod {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} asks for {{{{ $value }}}} "
               f"GPUs and has been unschedulable for {alerts.pending_for}, although at least as "
               "many GPUs are free across the cluster: they are split over nodes that cannot "
               "each take it (fragmentation), or its constraints exclude the nodes with room."),
        alert("GpuPlatformQuotaNearlyFull",
               f"{quota('used')} / ignoring (type) {quota('hard')} > 0.9", "15m", "warning",
               "A platform namespace's critical-pods quota is nearly full",
               "Namespace {{ $labels.namespace }} holds {{ $value | humanizePercentage }} of "
               f"the pods its {manifests.CRITICAL_PODS_QUOTA} quota allows at a critical priority. "
               "Where that priority needs a quota (GKE), pods past it are refused: in "
               f"{inputs.gpu_operator_namespace} new nodes would get no GPU operands "
               "(raise gpuOperator.maxClusterNodes); in the scheduler's and OPA's namespaces "
               "the quota is sized from their replicas, so look for other critical pods there."),
        alert("GpuPodsPendingGrowing",
               f"{GPU_PODS_PENDING} > 0 and delta({GPU_PODS_PENDING}"
               f"[{alerts.pending_growth_for}]) > 0",
               alerts.pending_growth_for, "warning", "Pending GPU pods keep piling up",
               f"{{{{ $value }}}} GPU pods are pending and their number has grown for "
               f"{alerts.pending_growth_for}: the binpack scheduler may be stuck or down, or the "
               "cluster is out of GPUs (see the dashboard's Capacity row)."),
        *(rule for mixin in inputs.mixins for rule in mixin.alerts),
    ]


def allocated_idle(inputs: MonitoringInputs, where: str = "") -> str:
    """The GPUs of each pod idle for `monitoring.alerts.idleFor`, by namespace and pod: the
    usage rules' definition of idle over the alert's window."""
    idle = usage.idle_pods(inputs.monitoring.alerts.idle_for,
                           inputs.monitoring.usage.active_threshold, where)
    return f"sum by (namespace, pod) ({idle})"


def gpu_node_alerts(inputs: MonitoringInputs) -> list[dict]:
    """GPU nodes outside the platform's rules: without its taint, with GPUs nothing serves, or
    with more device plugins than the GPU path allows."""
    taint = inputs.gpu_nodes.taints[0]
    # A new node installs its driver and toolkit before its GPUs are served.
    unserved_for = "30m"
    node = "Node {{ $labels.node }}"
    label = "=".join(GPU_PRESENT_LABEL)
    if inputs.gpu_nodes.names is not None:
        taint_fix = ("add it to gpuNodes.names and run `pulumi up` (the program taints the "
                     "nodes it is given)")
    else:
        taint_fix = ("set the taint on its node pool (new nodes register it); until then "
                     f"`kubectl taint nodes {{{{ $labels.node }}}} {taint}`")
    if inputs.gpu_path == "dra":
        served = ("the DCGM exporter reports none of its GPUs: the DRA driver publishes none "
                  "(see its kubelet plugin's pod on the node and `kubectl get resourceslices`), "
                  "or the exporter does not run there (then GpuExporterDown fires too)")
        plugins = ("runs {{ $value }} device plugin pods although on the DRA path the DRA "
                   "driver serves nvidia.com/gpu: a device plugin advertises the same GPUs "
                   "beside it, so one GPU can go to two pods. Remove the device plugin "
                   "DaemonSet, or keep it off this node")
    else:
        served = ("it advertises no nvidia.com GPU resource: the device plugin does not run "
                  "there, or has not registered (see the GPU Operator's pods on the node: the "
                  "driver, the toolkit and the device plugin, in that order)")
        plugins = ("runs {{ $value }} device plugin pods: each advertises the node's GPUs, "
                   "the kubelet serves them from whichever registered last, and a GPU one "
                   "handed out can be handed out again by the other. Keep the GPU Operator's "
                   "and remove the other DaemonSet (on GKE, label the node pool "
                   "gke-no-default-nvidia-gpu-device-plugin=true), or keep it off this node")
    return [
        alert("GpuNodeUntainted", untainted_gpu_nodes(inputs), "10m", "warning",
               "GPU node without the platform's GPU taint",
               f"{node} is labelled {label} but does not carry the taint {taint}: pods without "
               "GPUs can land on it and take the CPU and memory its GPU pods need, stranding "
               f"its GPUs. Fix: {taint_fix}."),
        alert("GpuNodeGpusNotServed", unserved_gpu_nodes(inputs), unserved_for, "warning",
               "GPU node whose GPUs nothing serves",
               f"{node} is labelled {label}, but for {unserved_for} {served}. No pod can get "
               "its GPUs."),
        alert("GpuNodeExtraDevicePlugin", extra_device_plugins(inputs), "15m", "warning",
               "More GPU device plugins on a node than the GPU path allows",
               f"{node} {plugins}. `kubectl get pods -A -o wide --field-selector "
               "spec.nodeName={{ $labels.node }}` lists them."),
    ]


def prometheus_rule(inputs: MonitoringInputs) -> dict:
    mon = inputs.monitoring
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "namespace": mon.namespace,
                     "labels": {**manifests.labels(RULE_NAME, COMPONENT),
                                **mon.prometheus_labels}},
        # One group: its rules run in order, so the alerts read the series recorded in the same
        # evaluation (separate groups run independently, a step apart in either order). GPU use
        # has a group of its own, which runs at a fixed interval.
        "spec": {"groups": [
            {"name": "gpu-platform",
             "rules": recording_rules(inputs) + alert_rules(inputs)},
            usage.usage_group(inputs),
        ]},
    }
