"""OPA admission: OPA behind a validating webhook (and, in the mutate and audit modes, a
mutating one) that keeps every GPU, and every place on a GPU node, behind the binpack scheduler.
The rules are in `policy/admission/gpu_scheduler.rego` (docs/concepts/admission.md).

OPA serves the webhook over TLS (a CA and a serving certificate made by pulumi-tls). It loads
everything it decides with as files from ConfigMap volumes when it starts: the admission policy
and its parameters (one ConfigMap, so a pod never mixes versions) and its own API rules. Nothing
writes to a running OPA: a container that restarts, for whatever reason, comes back with the
policy, and a changed policy reaches the webhook as a rolling update of the pods. OPA's own API
is locked by `policy/opa/authz.rego`: callers reach only the admission decisions, health and
metrics.
"""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pulumi
import pulumi_tls as tls

from . import kube
from .args import OpaAdmissionArgs
from .facts import (
    AUDIT_LABEL,
    CLAIM_CONTROLLERS,
    DAEMONSET_CONTROLLERS,
    DEVICE_ANNOTATION_PREFIXES,
    DEVICE_HOST_PATHS,
    JOB_CONTROLLERS,
    NVIDIA_DEVICE_CLASS_SUFFIX,
    PARENT_CONTROLLERS,
    PRIVILEGED_CAPABILITIES,
    TOOLKIT_DEVICE_LIST_ROOT,
    path_spellings,
)
from .inputs import OpaAdmissionInputs
from .settings import KUEUE_DEFAULT_QUEUE, Taint
from .teams import (
    ADMISSION_GATE,
    KUEUE_PREFIX,
    MANAGED_LABEL,
    PARENT_ANNOTATION,
    POD_GROUP_KEY,
    PODSET_LABEL,
    TOPOLOGY_GATE,
)

COMPONENT = "admission"
POLICY_DIR = Path(__file__).resolve().parent.parent / "policy"

SERVICE = "opa"
SERVICE_PORT = 443
DIAGNOSTIC_PORT = 8282     # /health and /metrics, for probes and Prometheus
DIAGNOSTIC_PORT_NAME = "diagnostics"

# The rules the webhooks ask for: data.gpuplatform.admission.review (validating) and .mutation
# (mutating) in policy/admission/gpu_scheduler.rego. /v0/data takes the AdmissionReview as input
# and returns the rule's value as the response body.
DECISION_PATH = ("v0", "data", "gpuplatform", "admission", "review")
MUTATION_PATH = ("v0", "data", "gpuplatform", "admission", "mutation")
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"

# The admission policy (policy/admission) and its parameters, mounted at POLICY_MOUNT. The
# parameters are loaded at data.gpuplatform.params, where the policy reads them.
POLICY_CONFIGMAP = "opa-admission-policy"
POLICY_MOUNT = "/policy"
PARAMS_KEY = "params.json"
PARAMS_ROOT = "gpuplatform.params"
# OPA's own API authorization and health rules (policy/opa), with their data, at
# SERVER_POLICY_MOUNT; the data at data.opa_server.
SERVER_POLICY_CONFIGMAP = "opa-server-policy"
SERVER_POLICY_MOUNT = "/server-policy"
SERVER_DATA_KEY = "opa-server.json"
SERVER_DATA_ROOT = "opa_server"
TLS_SECRET = "opa-tls"

# Every OPA pod of one generation: the same policy, parameters, arguments and image. The
# generation's Deployment, Service and ConfigMaps carry it in their names (see generation).
GENERATION_LABEL = "gpu-platform.io/opa-generation"

# How a deleted OPA pod hands over (a rollout, a drain): it keeps answering this long after
# SIGTERM, while its endpoint is taken out of the Service and the API server stops sending to
# it, then drains what is in flight within the grace period. The pod's grace period covers both.
SHUTDOWN_WAIT_SECONDS = 5
SHUTDOWN_GRACE_SECONDS = 10
TERMINATION_GRACE_SECONDS = SHUTDOWN_WAIT_SECONDS + SHUTDOWN_GRACE_SECONDS + 5

# The ConfigMap whose apply proves that the API server reaches OPA (see reachability_webhook).
REACHABILITY_PROBE = "webhook-reachability"
PROBE_LABEL = ("gpu-platform.io/webhook-probe", "reachability")


def rego_files(subdir: str) -> dict[str, str]:
    """The policy files under `policy/<subdir>` that ship, by file name (tests stay behind). A
    ConfigMap's keys are file names, so the rule groups' folders flatten, and two files of one
    name would be one key: refused."""
    shipped = [path for path in sorted((POLICY_DIR / subdir).rglob("*.rego"))
               if not path.name.endswith("_test.rego")]
    names = [path.name for path in shipped]
    if len(set(names)) != len(names):
        raise ValueError(f"policy/{subdir}: policy files share a name: {sorted(names)}")
    return {path.name: path.read_text() for path in shipped}


def policy_params(inputs: OpaAdmissionInputs) -> dict:
    """The admission policy's parameters, as the policy reads them (data ... params.json)."""
    adm = inputs.admission
    return {
        "mode": adm.mode,
        "schedulerName": inputs.scheduler_name,
        "gpuResourceNames": list(adm.gpu_resource_names),
        "exemptNamespaces": inputs.exempt_namespaces,
        "gpuNodeNames": list(inputs.gpu_nodes.names or []),
        # With node pools the program knows no GPU node's name: any pod bound by name may be on
        # one.
        "gpuNodeNamesKnown": inputs.gpu_nodes.names is not None,
        # The first taint keeps other pods off GPU nodes; GPU pods need to tolerate them all.
        "gpuTaints": [{**taint.as_manifest(), "value": taint.value, "text": str(taint),
                       "toleration": taint.toleration()} for taint in inputs.gpu_nodes.taints],
        "gpuRuntimeClasses": list(adm.nvidia_runtime_classes),
        "daemonSetControllers": list(DAEMONSET_CONTROLLERS),
        "auditLabel": AUDIT_LABEL,
        "gpuPath": inputs.gpu_path,
        "draDeviceClassSuffixes": [NVIDIA_DEVICE_CLASS_SUFFIX],
        "platformDeviceClasses": list(inputs.platform_device_classes),
        "claimWriters": claim_writers(inputs),
        "allowedDeviceClasses": list(adm.device_classes),
        "privilegedCapabilities": list(PRIVILEGED_CAPABILITIES),
        # Each guarded host path in every spelling the node resolves to it.
        "deviceHostPaths": [spelling for path in DEVICE_HOST_PATHS
                            for spelling in path_spellings(path)],
        "toolkitDeviceListRoot": TOOLKIT_DEVICE_LIST_ROOT,
        "deviceAnnotationPrefixes": list(DEVICE_ANNOTATION_PREFIXES),
        "maxGpuPodPriority": adm.max_gpu_pod_priority,
        # "" when the class is not declared: then no pod can name it.
        "preemptibleClass": inputs.preemptible_class or "",
        "teams": team_params(inputs),
    }


def team_params(inputs: OpaAdmissionInputs) -> dict:
    """What the policy keeps GPU pods in the teams' queues with: the team of each namespace,
    what Kueue marks the pods it manages with, and who creates the pods of the Jobs it admits."""
    teams = inputs.teams
    return {
        "enabled": teams is not None,
        "namespaces": teams.namespaces if teams else {},
        "gpuPodsOutsideTeams": teams.gpu_pods_outside_teams if teams else "admit",
        "queue": KUEUE_DEFAULT_QUEUE,
        "kueueUsers": [teams.kueue_user] if teams else [],
        "workloadControllers": list(teams.workload_controllers) if teams else [],
        "admissionGate": ADMISSION_GATE,
        "gates": [ADMISSION_GATE, TOPOLOGY_GATE],
        "managedLabel": MANAGED_LABEL,
        "parentAnnotation": PARENT_ANNOTATION,
        "parentControllers": list(PARENT_CONTROLLERS),
        "podGroupKey": POD_GROUP_KEY,
        "podSetLabel": PODSET_LABEL,
        "metadataPrefix": KUEUE_PREFIX,
        "jobControllers": list(JOB_CONTROLLERS),
    }


def claim_writers(inputs: OpaAdmissionInputs) -> list[str]:
    """Who allocates and releases DRA claims: the schedulers and the resource-claim
    controller."""
    return [*CLAIM_CONTROLLERS, *([inputs.scheduler_user] if inputs.scheduler_user else [])]


def server_data() -> str:
    """data.opa_server for the authorization policy: the decisions callers may ask for."""
    return json.dumps({"admission_decision_paths": [list(DECISION_PATH), list(MUTATION_PATH)]})


def service_dns_names(inputs: OpaAdmissionInputs) -> list[str]:
    """The names the API server may use for OPA's Services: every generation's Service in
    OPA's namespace (`opa-<generation>.<namespace>.svc`, which the webhooks call), which the
    serving certificate covers, so that a new generation needs no new certificate."""
    ns = inputs.admission.namespace
    return [SERVICE, f"{SERVICE}.{ns}", f"*.{ns}.svc", f"{SERVICE}.{ns}.svc"]


def _cel_matches(names: Sequence[str]) -> str:
    tests = [f"r.startsWith('{n[:-1]}')" if n.endswith("*") else f"r == '{n}'" for n in names]
    return " || ".join(tests)


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _cel_any_container(test: str, pod: str = "object") -> str:
    lists = [f"{pod}.spec.containers",
             f"(has({pod}.spec.initContainers) ? {pod}.spec.initContainers : [])",
             f"(has({pod}.spec.ephemeralContainers) ? {pod}.spec.ephemeralContainers : [])"]
    return " || ".join(f"{lst}.exists(c, {test})" for lst in lists)


def _cel_tolerates(taint: Taint, pod: str) -> str:
    """True when a toleration of the pod matches the taint, as kube-scheduler matches them."""
    effect = f"(!has(t.effect) || t.effect == '' || t.effect == '{taint.effect}')"
    operator = "(has(t.operator) ? t.operator : 'Equal')"
    key = "(has(t.key) ? t.key : '')"
    value = "(has(t.value) ? t.value : '')"
    match = (f"({key} == '' && {operator} == 'Exists') || ({key} == '{taint.key}' && "
             f"({operator} == 'Exists' || ({operator} == 'Equal' && {value} == '{taint.value}')))")
    return (f"(has({pod}.spec.tolerations) && "
            f"{pod}.spec.tolerations.exists(t, {effect} && ({match})))")


def gpu_request_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL: true when any container, init container or ephemeral container names a guarded GPU
    resource in its requests or limits."""
    match = _cel_matches(inputs.admission.gpu_resource_names)
    return _cel_any_container(
        "has(c.resources) && ("
        f"(has(c.resources.requests) && c.resources.requests.exists(r, {match})) || "
        f"(has(c.resources.limits) && c.resources.limits.exists(r, {match})))")


def pod_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL for the pod webhooks' matchConditions: true for every request a rule of the policy
    can be about (and some it turns out not to be), so that pods which cannot break a rule never
    wait for OPA, and OPA being down cannot block them.

    CREATE: pods that name a guarded resource; pods that may run on a GPU node (bound by name
    to a GPU node, or to any node where GPU nodes are not named; tolerating the GPU taint,
    except a DaemonSet's pod that asks for no device path and no high priority); pods that set
    NVIDIA_VISIBLE_DEVICES, name an NVIDIA RuntimeClass or carry a device-injecting annotation.
    UPDATE: a toleration of the GPU taint or a device-injecting annotation added; in a team
    namespace, a GPU pod's Kueue gate lifted or Kueue's labels or annotations changed by anyone
    but Kueue. Every ephemeral container added (the node is not known to the condition)."""
    adm = inputs.admission
    taint = inputs.gpu_nodes.taints[0]
    visible_devices = f"has(c.env) && c.env.exists(e, e.name == '{VISIBLE_DEVICES_ENV}')"
    daemonset_pod = (
        f"request.userInfo.username in {_cel_list(DAEMONSET_CONTROLLERS)} && "
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
        "o.kind == 'DaemonSet' && has(o.controller) && o.controller)")
    bound_by_name = ("(has(object.spec.nodeName) && object.spec.nodeName in "
                     f"{_cel_list(inputs.gpu_nodes.names)})"
                     if inputs.gpu_nodes.names is not None else
                     "(has(object.spec.nodeName) && object.spec.nodeName != '')")
    annotations = (
        "has(object.metadata.annotations) && object.metadata.annotations.exists(k, "
        + " || ".join(f"k.startsWith('{prefix}')" for prefix in DEVICE_ANNOTATION_PREFIXES)
        + ")")
    # Over-approximated: any capability added, any host path, any mount path that names the
    # toolkit's device list directory; OPA decides which count.
    device_list_name = TOOLKIT_DEVICE_LIST_ROOT.rsplit("/", 1)[1]
    device_path = " || ".join([
        _cel_any_container("(has(c.securityContext) && ((has(c.securityContext.privileged) && "
                           "c.securityContext.privileged) || (has(c.securityContext.capabilities)"
                           " && has(c.securityContext.capabilities.add) && "
                           "size(c.securityContext.capabilities.add) > 0))) || "
                           "(has(c.volumeMounts) && c.volumeMounts.exists(m, "
                           f"m.mountPath.contains('{device_list_name}')))"),
        "(has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.hostPath)))",
        "(has(object.spec.hostPID) && object.spec.hostPID)",
        "(has(object.spec.hostIPC) && object.spec.hostIPC)",
        f"({annotations})"])
    high_priority = (f"(has(object.spec.priority) && "
                     f"object.spec.priority > {adm.max_gpu_pod_priority})")
    on_create = " || ".join([
        f"({gpu_request_condition(inputs)})",
        bound_by_name,
        f"({_cel_tolerates(taint, 'object')} && (!({daemonset_pod}) || {device_path} || "
        f"{high_priority}))",
        f"({_cel_any_container(visible_devices)})",
        f"(has(object.spec.runtimeClassName) && object.spec.runtimeClassName in "
        f"{_cel_list(adm.nvidia_runtime_classes)})",
        f"({annotations})",
    ])
    if inputs.gpu_path == "dra":
        on_create += (" || (has(object.spec.resourceClaims) && "
                      "size(object.spec.resourceClaims) > 0)")
    on_update = (f"({_cel_tolerates(taint, 'object')} && "
                 f"!{_cel_tolerates(taint, 'oldObject')}) || ({annotations})")
    if inputs.teams is not None:
        on_update += f" || ({team_pod_update_condition(inputs)})"
    return (f"request.operation == 'CREATE' ? ({on_create}) : "
            f"(has(request.subResource) && request.subResource == 'ephemeralcontainers' ? "
            f"true : ({on_update}))")


def _cel_changed(field: str, prefix: str) -> str:
    """CEL: a key of metadata.<field> that starts with `prefix` added, changed or removed."""
    new, old = f"object.metadata.{field}", f"oldObject.metadata.{field}"
    return (f"(has({new}) && {new}.exists(k, k.startsWith('{prefix}') && !(has({old}) && "
            f"k in {old} && {old}[k] == {new}[k]))) || (has({old}) && {old}.exists(k, "
            f"k.startsWith('{prefix}') && !(has({new}) && k in {new})))")


def team_pod_update_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL, on a pod UPDATE: in a team namespace, someone other than Kueue lifts a GPU pod's
    Kueue gate or changes Kueue's labels or annotations on it."""
    teams = inputs.teams
    assert teams is not None
    gate_lifted = (f"has(oldObject.spec.schedulingGates) && oldObject.spec.schedulingGates.exists("
                   f"g, g.name in {_cel_list([ADMISSION_GATE, TOPOLOGY_GATE])} && "
                   "!(has(object.spec.schedulingGates) && "
                   "object.spec.schedulingGates.exists(h, h.name == g.name)))")
    return (f"request.namespace in {_cel_list(sorted(teams.namespaces))} && "
            f"request.userInfo.username != '{teams.kueue_user}' && "
            f"({gpu_request_condition(inputs)}) && (({gate_lifted}) || "
            f"{_cel_changed('labels', KUEUE_PREFIX)} || "
            f"{_cel_changed('annotations', KUEUE_PREFIX)})")


def _cel_workload_gpus(inputs: OpaAdmissionInputs) -> str:
    """CEL: a Job's, or a JobSet's, pod template asks for a guarded resource."""
    match = _cel_matches(inputs.admission.gpu_resource_names)
    asks = ("has(c.resources) && ((has(c.resources.requests) && "
            f"c.resources.requests.exists(r, {match})) || (has(c.resources.limits) && "
            f"c.resources.limits.exists(r, {match})))")

    def template(spec: str) -> str:
        return " || ".join(f"({lst}.exists(c, {asks}))" for lst in (
            f"{spec}.containers",
            f"(has({spec}.initContainers) ? {spec}.initContainers : [])"))

    return (f"request.kind.kind == 'Job' ? ({template('object.spec.template.spec')}) : "
            "(has(object.spec.replicatedJobs) && object.spec.replicatedJobs.exists(j, "
            f"{template('j.template.spec.template.spec')}))")


def team_workload_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL for the webhook on a team's Jobs and JobSets: one that asks for GPUs, written by
    anyone but Kueue, created running, started, or (a Job) grown while running."""
    teams = inputs.teams
    assert teams is not None
    running = "!(has(object.spec.suspend) && object.spec.suspend)"
    was_suspended = "has(oldObject.spec.suspend) && oldObject.spec.suspend"
    grown = ("request.kind.kind == 'Job' && has(object.spec.parallelism) && "
             "object.spec.parallelism > (has(oldObject.spec.parallelism) ? "
             "oldObject.spec.parallelism : 1)")
    return (f"request.userInfo.username != '{teams.kueue_user}' && "
            f"({_cel_workload_gpus(inputs)}) && {running} && "
            f"(request.operation == 'CREATE' ? "
            f"!(request.userInfo.username in {_cel_list(teams.workload_controllers)}) : "
            f"(({was_suspended}) || ({grown})))")


def dra_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL for the webhook on Dynamic Resource Allocation: every claim and claim template
    created; a claim's allocation written by anyone but the schedulers and the resource-claim
    controller; a DeviceClass written by anyone but the exempt namespaces' ServiceAccounts (the
    platform's own classes left out); an NVIDIA driver's ResourceSlice written by anyone but
    them."""
    trusted = " || ".join(f"request.userInfo.username.startsWith('system:serviceaccount:{ns}:')"
                          for ns in inputs.exempt_namespaces)
    writers = _cel_list(claim_writers(inputs))
    def has(obj: str, field: str) -> str:
        return f"(has({obj}.status) && has({obj}.status.{field}))"
    allocation = " || ".join(
        f"({has('object', f)} != {has('oldObject', f)} || ({has('object', f)} && "
        f"{has('oldObject', f)} && object.status.{f} != oldObject.status.{f}))"
        for f in ("allocation", "reservedFor"))
    sub = "(has(request.subResource) ? request.subResource : '')"
    resource = "request.resource.resource"
    return (f"{resource} == 'resourceslices' ? (object.spec.driver.endsWith("
            f"'{NVIDIA_DEVICE_CLASS_SUFFIX}') && !({trusted})) : "
            f"{resource} == 'deviceclasses' ? (!(object.metadata.name in "
            f"{_cel_list(inputs.platform_device_classes)}) && !({trusted})) : "
            f"{sub} == 'status' ? (!(request.userInfo.username in {writers}) && "
            f"({allocation})) : true")


def _meta(inputs: OpaAdmissionInputs, name: str, extra_labels: dict | None = None) -> dict:
    return {"name": name, "namespace": inputs.admission.namespace,
            "labels": {**kube.labels(SERVICE, COMPONENT), **(extra_labels or {})}}


def service_account(inputs: OpaAdmissionInputs) -> dict:
    """OPA's own identity: it reads nothing from the API server, so it is granted nothing and
    its pods mount no token."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(inputs, SERVICE),
            "automountServiceAccountToken": False}


def loaded_files(inputs: OpaAdmissionInputs) -> dict[str, dict[str, str]]:
    """What OPA loads at start, by ConfigMap: the admission policy with its parameters, and
    OPA's own server policy with its data."""
    return {POLICY_CONFIGMAP: {**rego_files("admission"),
                               PARAMS_KEY: json.dumps(policy_params(inputs), indent=2)},
            SERVER_POLICY_CONFIGMAP: {**rego_files("opa"), SERVER_DATA_KEY: server_data()}}


def generation(inputs: OpaAdmissionInputs) -> str:
    """A digest of everything an OPA pod runs with: the files it loads, its arguments, its
    image. A change is a new generation: its own ConfigMaps, Deployment and Service, named
    after it, which the webhooks call once it is ready, while the old generation, called no
    more, is removed (OpaAdmission)."""
    # A letter first: a label value of digits and one `e` would read as a number in YAML.
    return "g" + kube.content_hash(loaded_files(inputs), opa_args(inputs),
                                   inputs.image(inputs.admission.opa))[:9]


def generation_name(inputs: OpaAdmissionInputs, base: str) -> str:
    """The name of a generation's ConfigMap, Deployment or Service."""
    return f"{base}-{generation(inputs)}"


def policy_config_maps(inputs: OpaAdmissionInputs) -> list[dict]:
    """The generation's ConfigMaps: what its pods load when they start."""
    return [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": _meta(inputs, generation_name(inputs, base)), "data": data}
            for base, data in loaded_files(inputs).items()]


def tls_secret(inputs: OpaAdmissionInputs, *, tls_cert: Any, tls_key: Any, ca_cert: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(inputs, TLS_SECRET),
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": tls_cert, "tls.key": tls_key, "ca.crt": ca_cert}}


def policy_files() -> list[str]:
    """OPA's file arguments: each policy by path, and each data file under the document it
    belongs at (a data file loaded with its directory would land at the root)."""
    return [*(f"{SERVER_POLICY_MOUNT}/{name}" for name in rego_files("opa")),
            f"{SERVER_DATA_ROOT}:{SERVER_POLICY_MOUNT}/{SERVER_DATA_KEY}",
            *(f"{POLICY_MOUNT}/{name}" for name in rego_files("admission")),
            f"{PARAMS_ROOT}:{POLICY_MOUNT}/{PARAMS_KEY}"]


def opa_args(inputs: OpaAdmissionInputs) -> list[str]:
    return [
        "run", "--server",
        f"--addr=https://0.0.0.0:{inputs.admission.webhook_port}",
        # Plain HTTP for the kubelet's probes: without a scheme, OPA serves this address over
        # TLS too once it has a certificate.
        f"--diagnostic-addr=http://0.0.0.0:{DIAGNOSTIC_PORT}",
        "--tls-cert-file=/certs/tls.crt",
        "--tls-private-key-file=/certs/tls.key",
        # Picks up a renewed certificate from the Secret volume without a restart.
        "--tls-cert-refresh-period=1m",
        # Every request is authorized by policy/opa/authz.rego (no caller holds a token).
        "--authentication=token",
        "--authorization=basic",
        "--log-format=json",
        # A deleted pod answers on until the API server has stopped sending to it (see
        # SHUTDOWN_WAIT_SECONDS), then finishes what it is answering.
        f"--shutdown-wait-period={SHUTDOWN_WAIT_SECONDS}",
        f"--shutdown-grace-period={SHUTDOWN_GRACE_SECONDS}",
        f"--set=decision_logs.console={str(inputs.admission.decision_logs).lower()}",
        *policy_files(),
    ]


def generations_quota(replicas: int) -> int:
    """OPA's pods of the critical priority: while a new generation starts, the one the webhooks
    call serves, and the one before may still be handing over; and one more, for a pod still
    terminating as its replacement starts."""
    return 3 * replicas + 1


def generation_selector(inputs: OpaAdmissionInputs) -> dict[str, str]:
    """The labels that select the generation's pods (its Deployment's and its Service's)."""
    return {**kube.selector_labels(SERVICE, COMPONENT), GENERATION_LABEL: generation(inputs)}


def deployment(inputs: OpaAdmissionInputs) -> dict:
    adm = inputs.admission
    probe_port = {"port": DIAGNOSTIC_PORT, "scheme": "HTTP"}
    names = {base: generation_name(inputs, base) for base in loaded_files(inputs)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(inputs, generation_name(inputs, SERVICE)),
        "spec": {
            "replicas": adm.replicas,
            "selector": {"matchLabels": generation_selector(inputs)},
            # Never fewer ready replicas than asked for while rolling (a change of replicas,
            # or of anything else that is not a new generation): the webhook stays served.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": {**kube.labels(SERVICE, COMPONENT),
                               GENERATION_LABEL: generation(inputs)},
                },
                "spec": {
                    "serviceAccountName": SERVICE,
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                    "priorityClassName": kube.CRITICAL_PRIORITY,
                    "securityContext": kube.RESTRICTED_POD_SECURITY,
                    "affinity": kube.spread_by_node(SERVICE, COMPONENT),
                    "containers": [
                        {
                            "name": "opa",
                            "image": inputs.image(adm.opa),
                            "args": opa_args(inputs),
                            "ports": [{"name": "https", "containerPort": adm.webhook_port},
                                      {"name": DIAGNOSTIC_PORT_NAME,
                                       "containerPort": DIAGNOSTIC_PORT}],
                            # Ready exactly when it can decide (policy/opa/health.rego).
                            "readinessProbe": {"httpGet": {"path": "/health/ready", **probe_port},
                                               "periodSeconds": 2},
                            "livenessProbe": {"httpGet": {"path": "/health", **probe_port},
                                              "initialDelaySeconds": 10, "periodSeconds": 10},
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                          "limits": {"memory": "512Mi"}},
                            "securityContext": kube.RESTRICTED_CONTAINER_SECURITY,
                            "volumeMounts": [
                                {"name": "tls", "mountPath": "/certs", "readOnly": True},
                                {"name": "server-policy", "mountPath": SERVER_POLICY_MOUNT,
                                 "readOnly": True},
                                {"name": "policy", "mountPath": POLICY_MOUNT, "readOnly": True},
                            ],
                        },
                    ],
                    "volumes": [
                        {"name": "tls", "secret": {"secretName": TLS_SECRET}},
                        {"name": "server-policy",
                         "configMap": {"name": names[SERVER_POLICY_CONFIGMAP]}},
                        {"name": "policy", "configMap": {"name": names[POLICY_CONFIGMAP]}},
                    ],
                },
            },
        },
    }


def service(inputs: OpaAdmissionInputs) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(inputs, generation_name(inputs, SERVICE)),
        "spec": {
            "selector": generation_selector(inputs),
            "ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": "https",
                       "protocol": "TCP"}],
        },
    }


def _webhook(inputs: OpaAdmissionInputs, name: str, path: Sequence[str], ca_bundle: Any,
             rules: list[dict], match_conditions: list[dict]) -> dict:
    adm = inputs.admission
    webhook = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": adm.failure_policy,
        "timeoutSeconds": adm.timeout_seconds,
        "matchPolicy": "Equivalent",
        "clientConfig": {
            "caBundle": ca_bundle,
            "service": {"name": generation_name(inputs, SERVICE), "namespace": adm.namespace,
                        "port": SERVICE_PORT,
                        "path": "/" + "/".join(path)},
        },
        "rules": rules,
        "namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": inputs.exempt_namespaces}]},
    }
    if match_conditions:
        webhook["matchConditions"] = match_conditions
    return webhook


def _configuration(kind: str, name: str, webhooks: list[dict]) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name, "labels": kube.labels(SERVICE, COMPONENT)},
            "webhooks": webhooks}


def _pod_rules(*operations: str) -> dict:
    return {"apiGroups": [""], "apiVersions": ["v1"], "operations": list(operations),
            "resources": ["pods"], "scope": "Namespaced"}


EPHEMERAL_CONTAINERS_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                             "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"}


def reachability_webhook(inputs: OpaAdmissionInputs, ca_bundle: Any) -> dict:
    """The pod webhook's way to OPA (Service, port, CA, decision) for one object only: the
    reachability probe ConfigMap. It fails closed in every mode, so when the API server cannot
    reach OPA, or OPA has no policy loaded, applying the probe is refused with the webhook's name
    and the network or TLS error, and `pulumi up` stops there instead of ending green with a
    webhook that refuses or waves through every GPU pod. Nothing else matches it."""
    adm = inputs.admission
    webhook = _webhook(inputs, adm.reachability_webhook_name, DECISION_PATH, ca_bundle,
                       [{"apiGroups": [""], "apiVersions": ["v1"],
                         "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"],
                         "scope": "Namespaced"}], [])
    return webhook | {
        "failurePolicy": "Fail",
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": adm.namespace}},
        "objectSelector": {"matchLabels": dict([PROBE_LABEL])},
    }


def reachability_probe(inputs: OpaAdmissionInputs, fingerprint: Any) -> dict:
    """The probe: applied after the webhooks are registered, and again whenever `fingerprint`
    (a digest of everything on the way from the API server to OPA's decision) changes, so a run
    that changes that way checks it again. Server-side apply makes a preview's dry run ask OPA
    too, once the webhook exists."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {**_meta(inputs, REACHABILITY_PROBE, dict([PROBE_LABEL])), "annotations": {
            "gpu-platform.io/purpose":
                f"Sent to OPA through the webhook {inputs.admission.reachability_webhook_name} "
                f"when applied: if that fails, the API server cannot reach OPA "
                f"(docs/concepts/admission.md#reachability-probe)."}},
        "data": {"fingerprint": fingerprint},
    }


def reachability_fingerprint(inputs: OpaAdmissionInputs, ca_bundle: str) -> str:
    return kube.content_hash(reachability_webhook(inputs, ca_bundle), service(inputs),
                             deployment(inputs))


def webhook_configuration(inputs: OpaAdmissionInputs, ca_bundle: Any) -> dict:
    """The validating webhooks, in every mode: pods (created, tolerations or device annotations
    added, ephemeral containers added), DRA claims at creation (any version of resource.k8s.io
    the cluster serves) and the reachability probe."""
    adm = inputs.admission
    pods = _webhook(
        inputs, adm.webhook_name, DECISION_PATH, ca_bundle,
        [_pod_rules("CREATE", "UPDATE"), EPHEMERAL_CONTAINERS_RULE],
        [{"name": "gpu-relevant", "expression": pod_condition(inputs)}])
    # Claims only at creation: their devices cannot change afterwards, and their finalizers and
    # status must stay free to change (a claim being deleted has to lose its finalizer).
    claims = _webhook(
        inputs, adm.claims_webhook_name, DECISION_PATH, ca_bundle,
        [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
          "operations": ["CREATE"],
          "resources": ["resourceclaims", "resourceclaimtemplates"], "scope": "Namespaced"},
         {"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"], "operations": ["UPDATE"],
          "resources": ["resourceclaims/status"], "scope": "Namespaced"},
         {"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
          "operations": ["CREATE", "UPDATE"], "resources": ["deviceclasses", "resourceslices"],
          "scope": "Cluster"}],
        [{"name": "dra-relevant", "expression": dra_condition(inputs)}])
    webhooks = [pods, claims]
    if inputs.teams is not None:
        # A team's Jobs and JobSets: only Kueue starts them (their pods are admitted for the
        # admission Kueue writes into them).
        workloads = _webhook(
            inputs, adm.workloads_webhook_name, DECISION_PATH, ca_bundle,
            [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
              "resources": ["jobs"], "scope": "Namespaced"},
             {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["*"],
              "operations": ["CREATE", "UPDATE"], "resources": ["jobsets"],
              "scope": "Namespaced"}],
            [{"name": "team-workload", "expression": team_workload_condition(inputs)}])
        workloads["namespaceSelector"] = {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In",
            "values": sorted(set(inputs.teams.namespaces) - set(inputs.exempt_namespaces))}]}
        webhooks.append(workloads)
    return _configuration("ValidatingWebhookConfiguration", "gpu-platform-admission",
                          [*webhooks, reachability_webhook(inputs, ca_bundle)])


def mutating_webhook_configuration(inputs: OpaAdmissionInputs, ca_bundle: Any) -> dict | None:
    """mutate and audit modes: the mutating webhook. mutate: on pod CREATE (what it fixes is set
    at creation); audit: on every pod write the validating webhook sees, so that a violation an
    update makes is labelled too. Reinvoked if a later webhook changes the pod; the patch it
    computes then is empty."""
    adm = inputs.admission
    if adm.mode == "enforce":
        return None
    # audit: a violation an update makes is labelled too. (Not a debug container's: the API
    # server keeps only the ephemeral containers of an ephemeralcontainers request.)
    rules = [_pod_rules("CREATE")] if adm.mode == "mutate" else [_pod_rules("CREATE", "UPDATE")]
    webhook = _webhook(inputs, adm.mutating_webhook_name, MUTATION_PATH, ca_bundle, rules,
                       [{"name": "gpu-relevant", "expression": pod_condition(inputs)}])
    webhook["reinvocationPolicy"] = "IfNeeded"
    return _configuration("MutatingWebhookConfiguration", "gpu-platform-admission", [webhook])


class OpaAdmission(kube.Component):
    """OPA behind the admission webhooks: its TLS, policy, Deployment and Service, then the
    webhook configurations, registered once OPA is ready (and after whatever the component
    depends on, such as the binpack scheduler), and last a probe that proves the API server
    reaches OPA through them."""

    namespace: str
    "OPA's namespace."
    webhook_name: str
    "The name of the webhook on pods."
    certificate_not_after: pulumi.Output[str]
    "When the webhook's serving certificate expires, RFC 3339."
    ca_certificate: pulumi.Output[str]
    "The webhook CA's certificate, PEM."

    def __init__(self, name: str, args: OpaAdmissionArgs,
                 opts: pulumi.ResourceOptions | None = None):
        inputs = self.inputs(OpaAdmissionInputs, args)
        super().__init__(name, opts)
        adm = inputs.admission
        certs = adm.certificate
        child = pulumi.ResourceOptions(parent=self)

        namespace = kube.declare(kube.namespace(adm.namespace, "restricted", COMPONENT), self)
        ca_key = tls.PrivateKey(self.child_name("ca"), algorithm="ECDSA",
                                ecdsa_curve="P256", opts=child)
        self.ca = tls.SelfSignedCert(
            self.child_name("ca"), private_key_pem=ca_key.private_key_pem,
            is_ca_certificate=True,
            subject=tls.SelfSignedCertSubjectArgs(common_name="gpu-platform admission CA",
                                                  organization="gpu-platform"),
            validity_period_hours=certs.ca_validity_hours,
            early_renewal_hours=certs.early_renewal_hours,
            allowed_uses=["cert_signing", "crl_signing", "digital_signature"], opts=child)
        server_key = tls.PrivateKey(self.child_name("server"), algorithm="ECDSA",
                                    ecdsa_curve="P256", opts=child)
        self.server_request = tls.CertRequest(
            self.child_name("server"), private_key_pem=server_key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=service_dns_names(inputs)[-1]),
            dns_names=service_dns_names(inputs), opts=child)
        server_cert = tls.LocallySignedCert(
            self.child_name("server"), cert_request_pem=self.server_request.cert_request_pem,
            ca_private_key_pem=ca_key.private_key_pem, ca_cert_pem=self.ca.cert_pem,
            validity_period_hours=certs.server_validity_hours,
            early_renewal_hours=certs.early_renewal_hours,
            allowed_uses=["server_auth", "digital_signature", "key_encipherment"], opts=child)

        after_namespace = [namespace]
        account = kube.declare(service_account(inputs), self, after_namespace)
        # A generation's objects keep their logical names (`<namespace>/<base name>`): a new
        # generation replaces them, created first, the webhooks switched to its Service, and
        # the old ones deleted last, once nothing calls them.
        ns = adm.namespace
        config_maps = {base: kube.declare(config_map, self, after_namespace,
                                          name=f"{ns}/{base}")
                       for base, config_map in zip(loaded_files(inputs),
                                                   policy_config_maps(inputs), strict=True)}
        certificate = kube.declare(tls_secret(
            inputs, tls_cert=server_cert.cert_pem, tls_key=server_key.private_key_pem,
            ca_cert=self.ca.cert_pem), self, after_namespace)
        svc = kube.declare(service(inputs), self, after_namespace, name=f"{ns}/{SERVICE}")
        quota = kube.declare(kube.critical_pods_quota(adm.namespace, COMPONENT,
                                                      generations_quota(adm.replicas)),
                             self, after_namespace)
        opa = kube.declare(deployment(inputs), self,
                           [*after_namespace, quota, account, *config_maps.values(),
                            certificate], name=f"{ns}/{SERVICE}")
        pdb = kube.declare(kube.pod_disruption_budget(SERVICE, adm.namespace, COMPONENT), self,
                           after_namespace)
        ca_bundle = self.ca.cert_pem.apply(kube.base64_text)
        ready = [opa, svc, pdb, *config_maps.values(), certificate]
        self.webhook = kube.declare(webhook_configuration(inputs, ca_bundle), self, ready)
        webhooks = [self.webhook]
        if mutating := mutating_webhook_configuration(inputs, ca_bundle):
            webhooks.append(kube.declare(mutating, self, ready))
        # Last: `pulumi up` fails here, naming the cause, if the API server cannot reach OPA.
        self.reachability_probe = kube.declare(reachability_probe(inputs, ca_bundle.apply(
            lambda ca: reachability_fingerprint(inputs, ca))), self, webhooks)

        self.namespace = adm.namespace
        self.webhook_name = adm.webhook_name
        self.certificate_not_after = server_cert.validity_end_time
        self.ca_certificate = self.ca.cert_pem
        self.register_outputs({"namespace": self.namespace, "webhookName": self.webhook_name,
                               "certificateNotAfter": self.certificate_not_after,
                               "caCertificate": self.ca_certificate})
