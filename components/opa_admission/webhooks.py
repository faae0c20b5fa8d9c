"""The webhook configurations that send requests to OPA, and the probe that proves the API
server reaches OPA through them."""

from collections.abc import Sequence
from typing import Any

from ..base import manifests
from ..base.facts import ADMISSION_COMPONENT, OPA_SERVICE
from .conditions import dra_condition, pod_condition, team_workload_condition, template_condition
from .facts import WORKLOAD_KINDS
from .inputs import OpaAdmissionInputs
from .policy import DECISION_PATH, MUTATION_PATH, TEMPLATES_PATH, suspended_integrations
from .server import SERVICE_PORT, _meta, deployment, generation_name, service

# The ConfigMap whose apply proves that the API server reaches OPA (see reachability_webhook).
REACHABILITY_PROBE = "webhook-reachability"
PROBE_LABEL = ("gpu-platform.io/webhook-probe", "reachability")


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
            "service": {"name": generation_name(inputs, OPA_SERVICE), "namespace": adm.namespace,
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
            "metadata": {"name": name,
                         "labels": manifests.labels(OPA_SERVICE, ADMISSION_COMPONENT)},
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
    return manifests.content_hash(reachability_webhook(inputs, ca_bundle), service(inputs),
                                  deployment(inputs))


def templates_webhook(inputs: OpaAdmissionInputs, ca_bundle: Any) -> dict:
    """Workloads whose pod templates would make pods a rule can be about (Deployments, Jobs,
    JobSets, framework objects...), created or changed: OPA decides each template as the pod its
    controller would create, and answers with warnings only, in every mode. Its failure policy
    is Ignore, since it never refuses: OPA down must not block a workload."""
    groups: dict[str, list[str]] = {}
    for workload in WORKLOAD_KINDS:
        groups.setdefault(workload.group, []).append(workload.resource)
    rules = [{"apiGroups": [group], "apiVersions": ["v1"] if group in ("apps", "batch") else ["*"],
              "operations": ["CREATE", "UPDATE"], "resources": resources, "scope": "Namespaced"}
             for group, resources in groups.items()]
    webhook = _webhook(inputs, inputs.admission.templates_webhook_name, TEMPLATES_PATH,
                       ca_bundle, rules,
                       [{"name": "template-relevant", "expression": template_condition(inputs)}])
    return webhook | {"failurePolicy": "Ignore"}


def webhook_configuration(inputs: OpaAdmissionInputs, ca_bundle: Any) -> dict:
    """The validating webhooks, in every mode: pods (created, tolerations or device annotations
    added, ephemeral containers added, Kueue's gates lifted), Dynamic Resource Allocation (any
    version of resource.k8s.io the cluster serves: claims at creation, their allocations, device
    classes, ResourceSlices and DeviceTaintRules), with teams a team's Jobs and JobSets,
    workloads' pod templates (warnings only), and the reachability probe."""
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
          "operations": ["CREATE", "UPDATE"],
          "resources": ["deviceclasses", "resourceslices", "devicetaintrules"],
          "scope": "Cluster"}],
        [{"name": "dra-relevant", "expression": dra_condition(inputs)}])
    webhooks = [pods, claims]
    if inputs.teams is not None:
        # A team's Jobs, JobSets and frameworks' workloads: only Kueue starts them (their pods
        # are admitted for the admission Kueue writes into them).
        kinds: dict[str, list[str]] = {}
        for kind in suspended_integrations(inputs):
            kinds.setdefault(kind.group, []).append(kind.resource)
        workloads = _webhook(
            inputs, adm.workloads_webhook_name, DECISION_PATH, ca_bundle,
            [{"apiGroups": [group], "apiVersions": ["v1"] if group == "batch" else ["*"],
              "operations": ["CREATE", "UPDATE"], "resources": resources,
              "scope": "Namespaced"} for group, resources in kinds.items()],
            [{"name": "team-workload", "expression": team_workload_condition(inputs)}])
        workloads["namespaceSelector"] = {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In",
            "values": sorted(set(inputs.teams.namespaces) - set(inputs.exempt_namespaces))}]}
        webhooks.append(workloads)
    return _configuration("ValidatingWebhookConfiguration", "gpu-platform-admission",
                          [*webhooks, templates_webhook(inputs, ca_bundle),
                           reachability_webhook(inputs, ca_bundle)])


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
