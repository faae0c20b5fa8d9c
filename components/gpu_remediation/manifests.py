"""Fault remediation's objects: its namespace and ServiceAccount, the ClusterRole it needs, the
ConfigMap with its settings and modules, and the Deployment that runs a pass every interval."""


from ..base import gpu_count, gpu_faults, kube_api, kueue_requeue, manifests, metrics_http
from ..base.facts import GPU_RESOURCE, KUEUE_API
from .actor import gpu_remediation
from .actor.gpu_remediation import Config, FaultQuery
from .inputs import GpuRemediationInputs

COMPONENT = "remediation"
CONFIG_DIR = "/remediation"
MODULES = (gpu_remediation, gpu_count, gpu_faults, kube_api, kueue_requeue, metrics_http)
METRICS_PORT_NAME = "metrics"
TAINT_KEY = gpu_faults.QUARANTINE_TAINT
# On a quarantined node: since when (RFC 3339) and why (a sentence).
SINCE_ANNOTATION = "gpu-platform.io/gpu-fault-since"
REASON_ANNOTATION = "gpu-platform.io/gpu-fault-reason"
# On the DRA path, where the node stays in service for its healthy GPUs: the fault it is out for.
FAULT_ANNOTATION = "gpu-platform.io/gpu-fault"
# On each DeviceTaintRule the remediation writes: the node of the device.
RULE_NODE_LABEL = "gpu-platform.io/gpu-fault-node"
# Set to "true" on a quarantined node by an operator or a repair workflow: back in service.
REPAIRED_LABEL = "gpu-platform.io/gpu-repaired"
# On a team's Kueue Workload taken off its queue by a drain, until put back: when (RFC 3339).
REQUEUED_ANNOTATION = "gpu-platform.io/fault-requeued-at"
# How long a pass waits for Kueue to release a deactivated Workload's quota before it puts the
# Workload back (the next pass does it otherwise).
REQUEUE_WAIT_SECONDS = 30
CONTROLLER = "gpu-platform.io/remediation"
# NVSentinel's node label (its node-drainer and fault-quarantine), and its values while a node is
# out of service: quarantined, then draining, drained (or not), remediating.
NVSENTINEL_STATE_LABEL = "dgxc.nvidia.com/nvsentinel-state"
NVSENTINEL_OUT_OF_SERVICE = ["quarantined", "draining", "drain-succeeded", "drain-failed",
                             "remediating"]
CONFIG_HASH_ANNOTATION = "gpu-platform.io/remediation-config-sha256"


def actor_config(inputs: GpuRemediationInputs) -> Config:
    remediation = inputs.remediation
    return Config(
        prometheusUrl=inputs.prometheus_url,
        faults=[FaultQuery(name=fault.name, action=fault.action, meaning=fault.meaning,
                           query=fault.node_expr(inputs.fatal_xid_codes, by="node, UUID"))
                for fault in gpu_faults.FAULTS],
        mode=remediation.mode,
        maxNodes=remediation.max_nodes,
        maxShare=remediation.max_share,
        window=remediation.window,
        windowSeconds=remediation.window_seconds,
        gpuTaintKey=inputs.gpu_taint_key,
        taintKey=TAINT_KEY,
        sinceAnnotation=SINCE_ANNOTATION,
        reasonAnnotation=REASON_ANNOTATION,
        repairedLabel=REPAIRED_LABEL,
        faultAnnotation=FAULT_ANNOTATION,
        ruleNodeLabel=RULE_NODE_LABEL,
        nvsentinel=remediation.detector == "nvsentinel",
        nvsentinelStateLabel=NVSENTINEL_STATE_LABEL,
        nvsentinelOutOfService=NVSENTINEL_OUT_OF_SERVICE,
        gpuResource=GPU_RESOURCE,
        draDriver=inputs.dra_driver,
        controller=CONTROLLER,
        intervalSeconds=remediation.interval_seconds,
        teamNamespaces=inputs.team_namespaces if remediation.mode == "drain" else [],
        workloadsApi=f"/apis/{KUEUE_API}",
        ownerResources=inputs.workload_owners,
        requeuedAnnotation=REQUEUED_ANNOTATION,
        requeueWaitSeconds=REQUEUE_WAIT_SECONDS)


def remediation_rules(inputs: GpuRemediationInputs) -> list[dict]:
    """What it does, and no more: read nodes and pods (and on the DRA path who holds which
    device); on quarantine, taint, annotate and label nodes; on drain, evict pods and, with
    teams, read their owners and take Workloads off their queue and back; create events."""
    mode = inputs.remediation.mode
    taints = mode in ("quarantine", "drain") and inputs.remediation.detector == "platform"
    rules = [manifests.rule([""], ["nodes"], ["get", "list"] + (["patch"] if taints else [])),
             manifests.rule([""], ["pods"], ["list"]),
             manifests.rule(["events.k8s.io"], ["events"], ["create"])]
    if inputs.dra_driver:
        rules.append(manifests.rule(["resource.k8s.io"], ["resourceslices", "resourceclaims"],
                                    ["list"]))
        if taints:
            # The failed devices out of service, the node's healthy GPUs in use.
            rules.append(manifests.rule(["resource.k8s.io"], ["devicetaintrules"],
                                        ["list", "create", "delete", "deletecollection"]))
    if mode == "drain":
        rules.append(manifests.rule([""], ["pods/eviction"], ["create"]))
        if inputs.team_namespaces:
            rules += manifests.requeue_rules(inputs.workload_owners)
    return rules


def rbac_objects(inputs: GpuRemediationInputs) -> list[dict]:
    remediation = inputs.remediation
    return manifests.account_with_cluster_role(remediation.name, remediation.namespace,
                                               COMPONENT, remediation_rules(inputs))


def module_run(inputs: GpuRemediationInputs) -> manifests.ModuleRun:
    remediation = inputs.remediation
    return manifests.module_run(remediation.name, remediation.namespace, COMPONENT,
                                inputs.image(remediation.image), CONFIG_DIR,
                                actor_config(inputs), gpu_remediation, MODULES,
                                remediation.resources)


def deployment(inputs: GpuRemediationInputs) -> dict:
    remediation = inputs.remediation
    run = module_run(inputs)
    container = {**run.container, "ports": [{"name": METRICS_PORT_NAME, "protocol": "TCP",
                                             "containerPort": gpu_remediation.METRICS_PORT}]}
    # One pod: two would report each fault twice (their actions are the same).
    return manifests.single_pod_deployment(
        remediation.name, remediation.namespace, COMPONENT,
        {CONFIG_HASH_ANNOTATION: run.content_hash},
        {"containers": [container], "volumes": [run.volume]})


def remediation_objects(inputs: GpuRemediationInputs) -> list[dict]:
    """Everything remediation needs, its namespace first."""
    return [manifests.namespace(inputs.remediation.namespace, "restricted", COMPONENT),
            *rbac_objects(inputs), module_run(inputs).config_map, deployment(inputs)]
