"""On the DRA path: pods that join a ComputeDomain are admitted only when their placement keeps
them in one multi-node NVLink domain.

A ComputeDomain (NVIDIA's DRA driver) shares GPU memory over NVLink between its pods through
IMEX channels, which exist only within one NVLink domain (one NVL72 rack): a pod of the domain
placed outside it gets a channel no peer can reach. A pod joins one through a claim made from
the claim template the driver's compute-domain controller creates for it. The pod names only
the template, so the decision needs the template too: a ValidatingAdmissionPolicy, which the
API server evaluates with the namespace's ComputeDomain templates as parameters (those that
carry the controller's label), where OPA sees the pod alone.

A pod is placed in one NVLink domain when it selects one by node label (`nodeSelector` on a
label of NVLINK_DOMAIN_LABELS); Kueue cannot keep a team's pods in one on the DRA path, where
its topology-aware scheduling counts no GPU (the settings refuse `teams.topology` there).
Anything else is refused, naming the ComputeDomain's template and the way."""

from __future__ import annotations

from ..base import manifests
from ..base.facts import (
    ADMISSION_COMPONENT,
    COMPUTE_DOMAIN_LABEL,
    NVLINK_DOMAIN_LABELS,
)
from .conditions import cel_list
from .inputs import OpaAdmissionInputs

POLICY_NAME = "gpu-platform-compute-domains"
# What the policy does with a refusal in each admission mode: mutate mode cannot fix this, so it
# refuses as enforce does; audit warns and records.
ACTIONS = {"enforce": ["Deny"], "mutate": ["Deny"], "audit": ["Warn", "Audit"]}


def compute_domain_policy(inputs: OpaAdmissionInputs) -> list[dict]:
    """The ValidatingAdmissionPolicy and its binding; none on the device plugin path."""
    if inputs.gpu_path != "dra":
        return []
    selectors = "(has(object.spec.nodeSelector) ? object.spec.nodeSelector : {})"
    joins = ("object.spec.resourceClaims.exists(c, has(c.resourceClaimTemplateName) && "
             "c.resourceClaimTemplateName == params.metadata.name)")
    # CEL string literals in single quotes: the texts have none.
    message = (f"'pod ' + object.metadata.namespace + '/' + (has(object.metadata.name) && "
               f"object.metadata.name != '' ? object.metadata.name : "
               f"object.metadata.generateName + '*') + ' joins the ComputeDomain of claim "
               f"template ' + params.metadata.name + ', whose IMEX channels reach only within "
               f"one multi-node NVLink domain, but nothing keeps the pod in one: select one "
               f"(nodeSelector on {' or '.join(NVLINK_DOMAIN_LABELS)})'")
    meta = {"labels": manifests.labels(POLICY_NAME, ADMISSION_COMPONENT)}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, **meta},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate"},
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"]}]},
            "matchConditions": [{
                "name": "claims-from-templates",
                "expression": "has(object.spec.resourceClaims) && object.spec.resourceClaims"
                              ".exists(c, has(c.resourceClaimTemplateName))"}],
            "validations": [{
                "expression": (f"!({joins}) || {selectors}.exists(k, k in "
                               f"{cel_list(NVLINK_DOMAIN_LABELS)})"),
                "messageExpression": message,
                "reason": "Forbidden"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, **meta},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ACTIONS[inputs.admission.mode],
            # Each ComputeDomain's claim templates in the pod's namespace, as the parameters.
            "paramRef": {"selector": {"matchExpressions": [
                {"key": COMPUTE_DOMAIN_LABEL, "operator": "Exists"}]},
                "parameterNotFoundAction": "Allow"},
            "matchResources": {"namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": inputs.exempt_namespaces}]}},
        },
    }
    return [policy, binding]
