"""The webhooks' matchConditions, in CEL: true for every request a rule of the policy can be
about, so that requests that cannot break one never wait for OPA."""

from collections.abc import Sequence

from ..base.facts import ADMISSION_GATE, KUEUE_PREFIX, TOPOLOGY_GATE, KueueIntegration
from ..base.model import Taint
from .facts import (
    DAEMONSET_CONTROLLERS,
    DEVICE_ANNOTATION_PREFIXES,
    NVIDIA_DEVICE_CLASS_SUFFIX,
    TOOLKIT_DEVICE_LIST_ROOT,
    WORKLOAD_KINDS,
    PodTemplate,
)
from .inputs import OpaAdmissionInputs
from .policy import claim_writers, guarded_resource_names, suspended_integrations

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"


def _cel_matches(names: Sequence[str]) -> str:
    tests = [f"r.startsWith('{n[:-1]}')" if n.endswith("*") else f"r == '{n}'" for n in names]
    return " || ".join(tests)


def cel_list(values: Sequence[str]) -> str:
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


def _cel_tolerates_key(key: str, pod: str) -> str:
    """True when a toleration of the pod names the taint's key."""
    return (f"(has({pod}.spec.tolerations) && "
            f"{pod}.spec.tolerations.exists(t, has(t.key) && t.key == '{key}'))")


def _cel_asks(inputs: OpaAdmissionInputs) -> str:
    """CEL on a container `c`: it names a resource that may resolve to a GPU in its requests or
    limits."""
    match = _cel_matches(guarded_resource_names(inputs))
    return ("has(c.resources) && ("
            f"(has(c.resources.requests) && c.resources.requests.exists(r, {match})) || "
            f"(has(c.resources.limits) && c.resources.limits.exists(r, {match})))")


def gpu_pod_condition(inputs: OpaAdmissionInputs, pod: str = "object") -> str:
    """CEL: the pod may hold GPUs: a container, init container or ephemeral container names a
    resource that may resolve to a GPU, or (on the DRA path) the pod has resource claims."""
    condition = _cel_any_container(_cel_asks(inputs), pod)
    if inputs.gpu_path == "dra":
        condition += (f" || (has({pod}.spec.resourceClaims) && "
                      f"size({pod}.spec.resourceClaims) > 0)")
    return condition


def _pod_create_condition(inputs: OpaAdmissionInputs, pod: str, daemonset_pod: str) -> str:
    """CEL: a pod `pod` (an expression with `spec` and, maybe, `metadata`) that a rule can be
    about at creation; `daemonset_pod` says whether a DaemonSet's controller creates it."""
    adm = inputs.admission
    taint = inputs.gpu_nodes.taints[0]
    spec = f"{pod}.spec"
    visible_devices = f"has(c.env) && c.env.exists(e, e.name == '{VISIBLE_DEVICES_ENV}')"
    bound_by_name = (f"(has({spec}.nodeName) && {spec}.nodeName in "
                     f"{cel_list(inputs.gpu_nodes.names)})"
                     if inputs.gpu_nodes.names is not None else
                     f"(has({spec}.nodeName) && {spec}.nodeName != '')")
    annotations = (
        f"has({pod}.metadata) && has({pod}.metadata.annotations) && "
        f"{pod}.metadata.annotations.exists(k, "
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
                           f"m.mountPath.contains('{device_list_name}')))", pod),
        f"(has({spec}.volumes) && {spec}.volumes.exists(v, has(v.hostPath)))",
        f"(has({spec}.hostPID) && {spec}.hostPID)",
        f"(has({spec}.hostIPC) && {spec}.hostIPC)",
        f"({annotations})"])
    # A pod's priority is resolved before the webhooks; a template's is not (any class named).
    high_priority = (f"(has({spec}.priority) && {spec}.priority > {adm.max_gpu_pod_priority}) "
                     f"|| (has({spec}.priorityClassName) && {spec}.priorityClassName != '' && "
                     f"!has({spec}.priority))")
    return " || ".join([
        f"({gpu_pod_condition(inputs, pod)})",
        bound_by_name,
        f"({_cel_tolerates(taint, pod)} && (!({daemonset_pod}) || {device_path} || "
        f"{high_priority}))",
        f"({_cel_any_container(visible_devices, pod)})",
        f"(has({spec}.runtimeClassName) && {spec}.runtimeClassName in "
        f"{cel_list(adm.nvidia_runtime_classes)})",
        f"({annotations})",
    ])


def pod_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL for the pod webhooks' matchConditions: true for every request a rule of the policy
    can be about (and some it turns out not to be), so that pods which cannot break a rule never
    wait for OPA, and OPA being down cannot block them.

    CREATE: pods that name a guarded resource; pods that may run on a GPU node (bound by name
    to a GPU node, or to any node where GPU nodes are not named; tolerating the GPU taint,
    except a DaemonSet's pod that asks for no device path and no high priority); pods that set
    NVIDIA_VISIBLE_DEVICES, name an NVIDIA RuntimeClass or carry a device-injecting annotation.
    UPDATE: a toleration of the GPU taint, of a taint the platform puts on GPU nodes for a
    while (passing taints) or a device-injecting annotation added; in a team
    namespace, a GPU pod's Kueue gate lifted or Kueue's labels or annotations changed by anyone
    but Kueue. Every ephemeral container added (the node is not known to the condition)."""
    taint = inputs.gpu_nodes.taints[0]
    daemonset_pod = (
        f"request.userInfo.username in {cel_list(DAEMONSET_CONTROLLERS)} && "
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
        "o.kind == 'DaemonSet' && has(o.controller) && o.controller)")
    annotations = (
        "has(object.metadata.annotations) && object.metadata.annotations.exists(k, "
        + " || ".join(f"k.startsWith('{prefix}')" for prefix in DEVICE_ANNOTATION_PREFIXES)
        + ")")
    on_create = _pod_create_condition(inputs, "object", daemonset_pod)
    on_update = (f"({_cel_tolerates(taint, 'object')} && "
                 f"!{_cel_tolerates(taint, 'oldObject')}) || ({annotations})")
    for passing in inputs.gpu_nodes.passing_taints:
        on_update += (f" || ({_cel_tolerates_key(passing.key, 'object')} && "
                      f"!{_cel_tolerates_key(passing.key, 'oldObject')})")
    if inputs.teams is not None:
        on_update += f" || ({team_pod_update_condition(inputs)})"
    return (f"request.operation == 'CREATE' ? ({on_create}) : "
            f"(has(request.subResource) && request.subResource == 'ephemeralcontainers' ? "
            f"true : ({on_update}))")


def _cel_at(root: str, fields: Sequence[str]) -> tuple[str, str]:
    """CEL: (`root`.f1.f2... is present, field by field; the expression of it)."""
    tests, expression = [], root
    for field in fields:
        tests.append(f"has({expression}.{field})")
        expression += f".{field}"
    return " && ".join(tests) or "true", expression


def _cel_templates(template: PodTemplate, test) -> str:
    """CEL: some pod template at the template's path (each item of a list, each value of a map)
    passes `test`, a function of the template's expression."""
    def one(root: str, fields: Sequence[str]) -> str:
        present, expression = _cel_at(root, fields)
        return f"({present} && has({expression}.spec) && ({test(expression)}))"

    for marker, each in (("[]", "item"), ("{}", "value")):
        if marker in template.path:
            at, then = (part.split(".") for part in template.path.split(marker + "."))
            present, items = _cel_at("object", at)
            item = "t" if each == "item" else f"{items}[t]"
            return f"({present} && {items}.exists(t, {one(item, then)}))"
    return one("object", template.path.split("."))


def template_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL for the templates webhook: a workload created, or its spec changed, with a pod
    template whose pods a rule can be about at creation (the pod condition's, on the template;
    a DaemonSet's pods are its controller's)."""
    by_kind = []
    for workload in WORKLOAD_KINDS:
        daemonset = "true" if workload.kind == "DaemonSet" else "false"
        some_template = " || ".join(
            _cel_templates(t, lambda pod, d=daemonset: _pod_create_condition(inputs, pod, d))
            for t in workload.templates)
        by_kind.append(f"(request.kind.group == '{workload.group}' && request.kind.kind == "
                       f"'{workload.kind}' && ({some_template}))")
    changed = "request.operation == 'CREATE' || oldObject.spec != object.spec"
    return f"({changed}) && ({' || '.join(by_kind)})"


def _cel_changed(field: str, prefix: str) -> str:
    """CEL: a key of metadata.<field> that starts with `prefix` added, changed or removed."""
    new, old = f"object.metadata.{field}", f"oldObject.metadata.{field}"
    return (f"(has({new}) && {new}.exists(k, k.startsWith('{prefix}') && !(has({old}) && "
            f"k in {old} && {old}[k] == {new}[k]))) || (has({old}) && {old}.exists(k, "
            f"k.startsWith('{prefix}') && !(has({new}) && k in {new})))")


def _cel_spec_changed(fields: Sequence[str]) -> str:
    """CEL: the pod spec's field at `fields` added, changed or removed."""
    (new_present, new), (old_present, old) = (_cel_at(f"{root}.spec", fields)
                                              for root in ("object", "oldObject"))
    return (f"(({new_present}) != ({old_present}) || (({new_present}) && ({old_present}) && "
            f"{new} != {old}))")


def team_pod_update_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL, on a pod UPDATE in a team namespace, of a pod that may hold GPUs: a Kueue gate
    lifted, by anyone (Kueue's own release of a pod is decided too), or, by anyone but Kueue,
    Kueue's labels or annotations changed, or the node selection of a pod Kueue holds."""
    teams = inputs.teams
    assert teams is not None
    gates = cel_list([ADMISSION_GATE, TOPOLOGY_GATE])
    gate_lifted = (f"has(oldObject.spec.schedulingGates) && oldObject.spec.schedulingGates.exists("
                   f"g, g.name in {gates} && "
                   "!(has(object.spec.schedulingGates) && "
                   "object.spec.schedulingGates.exists(h, h.name == g.name)))")
    held = (f"has(oldObject.spec.schedulingGates) && "
            f"oldObject.spec.schedulingGates.exists(g, g.name in {gates})")
    selection_changed = (f"{_cel_spec_changed(['nodeSelector'])} || "
                         f"{_cel_spec_changed(['affinity', 'nodeAffinity'])}")
    return (f"request.namespace in {cel_list(sorted(teams.namespaces))} && "
            f"({gpu_pod_condition(inputs)}) && (({gate_lifted}) || "
            f"(request.userInfo.username != '{teams.kueue_user}' && "
            f"({_cel_changed('labels', KUEUE_PREFIX)} || "
            f"{_cel_changed('annotations', KUEUE_PREFIX)} || "
            f"(({held}) && ({selection_changed})))))")


def _cel_workload_gpus(inputs: OpaAdmissionInputs, kind: KueueIntegration) -> str:
    """CEL: a workload of `kind` may hold GPUs: a pod template of it asks for a resource that
    may resolve to one, or (on the DRA path) has resource claims. A kind whose templates the
    workload does not carry (a TrainJob's are its runtime's) always may."""
    asks = _cel_asks(inputs)

    def holds(template: str) -> str:
        spec = f"{template}.spec"
        tests = [f"(has({spec}.containers) && {spec}.containers.exists(c, {asks}))",
                 f"(has({spec}.initContainers) && {spec}.initContainers.exists(c, {asks}))"]
        if inputs.gpu_path == "dra":
            tests.append(f"(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0)")
        return " || ".join(tests)

    templates = next((w.templates for w in WORKLOAD_KINDS
                      if (w.group, w.kind) == (kind.group, kind.kind)), ())
    return " || ".join(_cel_templates(t, holds) for t in templates) or "true"


def team_workload_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL for the webhook on a team's workloads of the kinds Kueue suspends (Jobs, JobSets,
    the frameworks'): one that may hold GPUs, written by anyone but Kueue and the frameworks'
    controllers, created running, started, or (a Job) grown while running."""
    teams = inputs.teams
    assert teams is not None
    by_kind = []
    for kind in suspended_integrations(inputs):
        fields = kind.suspend.split(".")
        present, suspend = _cel_at("object", fields)
        old_present, old_suspend = _cel_at("oldObject", fields)
        running = f"!({present} && {suspend} == true)"
        started = f"{old_present} && {old_suspend} == true"
        grown = ("has(object.spec.parallelism) && object.spec.parallelism > "
                 "(has(oldObject.spec.parallelism) ? oldObject.spec.parallelism : 1)"
                 if kind.kind == "Job" else "false")
        by_kind.append(
            f"(request.kind.group == '{kind.group}' && request.kind.kind == '{kind.kind}' && "
            f"({_cel_workload_gpus(inputs, kind)}) && {running} && "
            f"(request.operation == 'CREATE' || ({started}) || ({grown})))")
    trusted = cel_list([teams.kueue_user, *teams.workload_controllers])
    return f"!(request.userInfo.username in {trusted}) && ({' || '.join(by_kind)})"


def dra_condition(inputs: OpaAdmissionInputs) -> str:
    """CEL for the webhook on Dynamic Resource Allocation: every claim and claim template
    created; a claim's allocation written by anyone but the schedulers and the resource-claim
    controller; a DeviceClass written by anyone but the GPU Operator; a ResourceSlice of
    NVIDIA's drivers written by anyone but the DRA driver's kubelet plugin and its own node; a
    DeviceTaintRule written by anyone the stack does not list."""
    user = "request.userInfo.username"
    writers = inputs.dra_writers
    writes_claims = cel_list(claim_writers(inputs))
    def has(obj: str, field: str) -> str:
        return f"(has({obj}.status) && has({obj}.status.{field}))"
    allocation = " || ".join(
        f"({has('object', f)} != {has('oldObject', f)} || ({has('object', f)} && "
        f"{has('oldObject', f)} && object.status.{f} != oldObject.status.{f}))"
        for f in ("allocation", "reservedFor"))
    sub = "(has(request.subResource) ? request.subResource : '')"
    resource = "request.resource.resource"
    own_node = (f"(has(object.spec.nodeName) && {user} == 'system:node:' + "
                "object.spec.nodeName)")
    return (f"{resource} == 'resourceslices' ? (object.spec.driver.endsWith("
            f"'{NVIDIA_DEVICE_CLASS_SUFFIX}') && !({user} in "
            f"{cel_list(writers.resource_slices)}) && !{own_node}) : "
            f"{resource} == 'deviceclasses' ? "
            f"!({user} in {cel_list(writers.device_classes)}) : "
            f"{resource} == 'devicetaintrules' ? ({sub} == '' && !({user} in "
            f"{cel_list(inputs.admission.device_taint_writers)})) : "
            f"{sub} == 'status' ? (!({user} in {writes_claims}) && "
            f"({allocation})) : true")
