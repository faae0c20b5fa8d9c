"""OPA admission: OPA with kube-mgmt behind a validating webhook that refuses GPU pods which do
not use the binpack scheduler.

OPA serves the webhook over TLS (a CA and a serving certificate made by pulumi-tls) and listens
in plain HTTP on localhost only, for kube-mgmt in the same pod. kube-mgmt loads the admission
policy (from `policy/admission/`) and its parameters from ConfigMaps. OPA's own API is locked by
`policy/opa/authz.rego`: anonymous callers (the API server, probes) reach only the admission
decision, health and metrics; only kube-mgmt, holding a generated token, can write.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import pulumi
import pulumi_random as random
import pulumi_tls as tls

from . import kube
from .settings import StackSettings

COMPONENT = "admission"
POLICY_DIR = Path(__file__).resolve().parent.parent / "policy"

SERVICE = "opa"
SERVICE_PORT = 443
WEBHOOK_PORT = 8443        # TLS, for the API server
LOCAL_PORT = 8181          # plain HTTP on 127.0.0.1, for kube-mgmt
DIAGNOSTIC_PORT = 8282     # /health and /metrics, for probes and Prometheus

# The rule the webhook asks for: data.gpuplatform.admission.review in
# policy/admission/gpu_scheduler.rego. /v0/data takes the AdmissionReview as input and returns
# the rule's value as the response body.
DECISION_PATH = ("v0", "data", "gpuplatform", "admission", "review")

# kube-mgmt loads ConfigMaps with these labels; data lands at data.<namespace>.<name>.<key>.
POLICY_LABEL = ("openpolicyagent.org/policy", "rego")
DATA_LABEL = ("openpolicyagent.org/data", "opa")
POLICY_CONFIGMAP = "gpu-platform-admission-policy"
# The policy looks its parameters up by this ConfigMap name and key.
PARAMS_CONFIGMAP = "gpu-platform-admission-params"
PARAMS_KEY = "params.json"

# Loaded by OPA itself at start (not through kube-mgmt): its API authorization and health rules.
SERVER_POLICY_CONFIGMAP = "opa-server-policy"
SERVER_SECRET = "opa-server"
TLS_SECRET = "opa-tls"
TOKEN_KEY = "kube-mgmt-token"
SERVER_DATA_KEY = "opa-server.json"
SERVER_DATA_ROOT = "opa_server"    # data.opa_server in policy/opa/authz.rego

SERVER_CONFIG_ANNOTATION = "gpu-platform.io/opa-server-config-sha256"


def rego_files(subdir: str) -> dict[str, str]:
    """The policy files of `policy/<subdir>` that ship (tests stay behind)."""
    return {path.name: path.read_text()
            for path in sorted((POLICY_DIR / subdir).glob("*.rego"))
            if not path.name.endswith("_test.rego")}


def policy_params(settings: StackSettings) -> dict:
    """The admission policy's parameters, as the policy reads them (data ... params.json)."""
    return {
        "schedulerName": settings.scheduler.name,
        "gpuResourceNames": list(settings.admission.gpu_resource_names),
        "exemptNamespaces": settings.exempt_namespaces,
    }


def server_data(token: str) -> str:
    """data.opa_server for the authorization policy."""
    return json.dumps({"kube_mgmt_token": token, "admission_decision_path": list(DECISION_PATH)})


def service_dns_names(settings: StackSettings) -> list[str]:
    """The names the API server may use for the OPA Service; the serving certificate covers
    them all."""
    ns = settings.admission.namespace
    return [SERVICE, f"{SERVICE}.{ns}", f"{SERVICE}.{ns}.svc"]


def _cel_matches(names: Sequence[str]) -> str:
    tests = [f"r.startsWith('{n[:-1]}')" if n.endswith("*") else f"r == '{n}'" for n in names]
    return " || ".join(tests)


def gpu_request_condition(settings: StackSettings) -> str:
    """CEL for the webhook's matchConditions: true when any container, init container or
    ephemeral container names a guarded GPU resource in its requests or limits. Pods without
    GPUs are never sent to OPA, so OPA being down cannot block them."""
    match = _cel_matches(settings.admission.gpu_resource_names)
    per_container = (
        "has(c.resources) && ("
        f"(has(c.resources.requests) && c.resources.requests.exists(r, {match})) || "
        f"(has(c.resources.limits) && c.resources.limits.exists(r, {match})))")
    lists = ["object.spec.containers",
             "(has(object.spec.initContainers) ? object.spec.initContainers : [])",
             "(has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])"]
    return " || ".join(f"{lst}.exists(c, {per_container})" for lst in lists)


def _meta(settings: StackSettings, name: str, extra_labels: Optional[dict] = None) -> dict:
    return {"name": name, "namespace": settings.admission.namespace,
            "labels": {**kube.labels(SERVICE, COMPONENT), **(extra_labels or {})}}


def rbac_objects(settings: StackSettings) -> list[dict]:
    """kube-mgmt reads the labelled ConfigMaps and annotates them with their load status, in its
    own namespace only."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(settings, SERVICE)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": _meta(settings, "kube-mgmt"),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["get", "list", "watch", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _meta(settings, "kube-mgmt"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "kube-mgmt"},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE,
                       "namespace": settings.admission.namespace}]},
    ]


def policy_config_maps(settings: StackSettings) -> list[dict]:
    """The admission policy and its parameters, for kube-mgmt; OPA's own server policy, for
    OPA to load at start."""
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": _meta(settings, POLICY_CONFIGMAP, dict([POLICY_LABEL])),
         "data": rego_files("admission")},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": _meta(settings, PARAMS_CONFIGMAP, dict([DATA_LABEL])),
         "data": {PARAMS_KEY: json.dumps(policy_params(settings), indent=2)}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": _meta(settings, SERVER_POLICY_CONFIGMAP),
         "data": rego_files("opa")},
    ]


def secrets(settings: StackSettings, *, tls_cert: Any, tls_key: Any, ca_cert: Any,
            token: Any, server_data_json: Any) -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(settings, TLS_SECRET),
         "type": "kubernetes.io/tls",
         "stringData": {"tls.crt": tls_cert, "tls.key": tls_key, "ca.crt": ca_cert}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(settings, SERVER_SECRET),
         "type": "Opaque",
         "stringData": {TOKEN_KEY: token, SERVER_DATA_KEY: server_data_json}},
    ]


def opa_args(settings: StackSettings) -> list[str]:
    return [
        "run", "--server",
        f"--addr=https://0.0.0.0:{WEBHOOK_PORT}",
        f"--addr=http://127.0.0.1:{LOCAL_PORT}",
        # Plain HTTP for the kubelet's probes: without a scheme, OPA serves this address over
        # TLS too once it has a certificate.
        f"--diagnostic-addr=http://0.0.0.0:{DIAGNOSTIC_PORT}",
        "--tls-cert-file=/certs/tls.crt",
        "--tls-private-key-file=/certs/tls.key",
        # Picks up a renewed certificate from the Secret volume without a restart.
        "--tls-cert-refresh-period=1m",
        "--authentication=token",
        "--authorization=basic",
        # ConfigMap volumes hold hidden ..data links next to the files.
        "--ignore=.*",
        "--log-format=json",
        f"--set=decision_logs.console={str(settings.admission.decision_logs).lower()}",
        "/server-policy",
        f"{SERVER_DATA_ROOT}:/server-data/{SERVER_DATA_KEY}",
    ]


def kube_mgmt_args(settings: StackSettings) -> list[str]:
    return [
        f"--opa-url=http://127.0.0.1:{LOCAL_PORT}/v1",
        f"--opa-auth-token-file=/token/{TOKEN_KEY}",
        f"--namespaces={settings.admission.namespace}",
        "--enable-policies=true",
        "--enable-data=true",
        f"--policy-label={POLICY_LABEL[0]}", f"--policy-value={POLICY_LABEL[1]}",
        f"--data-label={DATA_LABEL[0]}", f"--data-value={DATA_LABEL[1]}",
    ]


def deployment(settings: StackSettings) -> dict:
    adm = settings.admission
    probe_port = {"port": DIAGNOSTIC_PORT, "scheme": "HTTP"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(settings, SERVICE),
        "spec": {
            "replicas": adm.replicas,
            "selector": {"matchLabels": kube.selector_labels(SERVICE, COMPONENT)},
            # Never fewer ready replicas than asked for while rolling: the webhook stays served.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": kube.labels(SERVICE, COMPONENT),
                    # OPA loads its server policy only at start: a change restarts the pods.
                    "annotations": {SERVER_CONFIG_ANNOTATION: kube.content_hash(
                        rego_files("opa"), opa_args(settings))},
                },
                "spec": {
                    "serviceAccountName": SERVICE,
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": kube.RESTRICTED_POD_SECURITY,
                    "affinity": kube.spread_by_node(SERVICE, COMPONENT),
                    "containers": [
                        {
                            "name": "opa",
                            "image": adm.opa.ref,
                            "args": opa_args(settings),
                            "ports": [{"name": "https", "containerPort": WEBHOOK_PORT},
                                      {"name": "diagnostics", "containerPort": DIAGNOSTIC_PORT}],
                            # Ready only once kube-mgmt has loaded the policy and parameters
                            # (policy/opa/health.rego).
                            "readinessProbe": {"httpGet": {"path": "/health/ready", **probe_port},
                                               "periodSeconds": 5},
                            "livenessProbe": {"httpGet": {"path": "/health", **probe_port},
                                              "initialDelaySeconds": 10, "periodSeconds": 10},
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                          "limits": {"memory": "512Mi"}},
                            "securityContext": kube.RESTRICTED_CONTAINER_SECURITY,
                            "volumeMounts": [
                                {"name": "tls", "mountPath": "/certs", "readOnly": True},
                                {"name": "server-policy", "mountPath": "/server-policy",
                                 "readOnly": True},
                                {"name": "server-data", "mountPath": "/server-data",
                                 "readOnly": True},
                            ],
                        },
                        {
                            "name": "kube-mgmt",
                            "image": adm.kube_mgmt.ref,
                            "args": kube_mgmt_args(settings),
                            "resources": {"requests": {"cpu": "20m", "memory": "64Mi"},
                                          "limits": {"memory": "256Mi"}},
                            "securityContext": kube.RESTRICTED_CONTAINER_SECURITY,
                            "volumeMounts": [{"name": "token", "mountPath": "/token",
                                              "readOnly": True}],
                        },
                    ],
                    "volumes": [
                        {"name": "tls", "secret": {"secretName": TLS_SECRET}},
                        {"name": "server-policy",
                         "configMap": {"name": SERVER_POLICY_CONFIGMAP}},
                        {"name": "server-data", "secret": {
                            "secretName": SERVER_SECRET,
                            "items": [{"key": SERVER_DATA_KEY, "path": SERVER_DATA_KEY}]}},
                        {"name": "token", "secret": {
                            "secretName": SERVER_SECRET,
                            "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY}]}},
                    ],
                },
            },
        },
    }


def service(settings: StackSettings) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(settings, SERVICE),
        "spec": {
            "selector": kube.selector_labels(SERVICE, COMPONENT),
            "ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": "https",
                       "protocol": "TCP"}],
        },
    }


def webhook_configuration(settings: StackSettings, ca_bundle: Any) -> dict:
    adm = settings.admission
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "gpu-platform-admission",
                     "labels": kube.labels(SERVICE, COMPONENT)},
        "webhooks": [{
            "name": adm.webhook_name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": adm.failure_policy,
            "timeoutSeconds": adm.timeout_seconds,
            "matchPolicy": "Equivalent",
            "clientConfig": {
                "caBundle": ca_bundle,
                "service": {"name": SERVICE, "namespace": adm.namespace, "port": SERVICE_PORT,
                            "path": "/" + "/".join(DECISION_PATH)},
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": settings.exempt_namespaces}]},
            "matchConditions": [{"name": "requests-gpu",
                                 "expression": gpu_request_condition(settings)}],
        }],
    }


class OpaAdmission(pulumi.ComponentResource):
    """Everything OPA needs; the webhook configuration is registered last, after OPA is ready
    and after the resources in `after` (the binpack scheduler) exist."""

    def __init__(self, name: str, settings: StackSettings,
                 after: Optional[Sequence[pulumi.Resource]] = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:OpaAdmission", name, None, opts)
        adm = settings.admission
        certs = adm.certificate
        child = pulumi.ResourceOptions(parent=self)

        namespace = kube.declare(kube.namespace(adm.namespace, "restricted", COMPONENT), self)
        ca_key = tls.PrivateKey("ca", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        self.ca = tls.SelfSignedCert(
            "ca", private_key_pem=ca_key.private_key_pem, is_ca_certificate=True,
            subject=tls.SelfSignedCertSubjectArgs(common_name="gpu-platform admission CA",
                                                  organization="gpu-platform"),
            validity_period_hours=certs.ca_validity_hours,
            early_renewal_hours=certs.early_renewal_hours,
            allowed_uses=["cert_signing", "crl_signing", "digital_signature"], opts=child)
        server_key = tls.PrivateKey("server", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        self.server_request = tls.CertRequest(
            "server", private_key_pem=server_key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=service_dns_names(settings)[-1]),
            dns_names=service_dns_names(settings), opts=child)
        server_cert = tls.LocallySignedCert(
            "server", cert_request_pem=self.server_request.cert_request_pem,
            ca_private_key_pem=ca_key.private_key_pem, ca_cert_pem=self.ca.cert_pem,
            validity_period_hours=certs.server_validity_hours,
            early_renewal_hours=certs.early_renewal_hours,
            allowed_uses=["server_auth", "digital_signature", "key_encipherment"], opts=child)
        token = random.RandomPassword("kube-mgmt-token", length=48, special=False, opts=child)

        after_namespace = [namespace]
        rbac = kube.declare_all(rbac_objects(settings), self, after_namespace)
        config_maps = kube.declare_all(policy_config_maps(settings), self, after_namespace)
        secret_resources = kube.declare_all(secrets(
            settings, tls_cert=server_cert.cert_pem, tls_key=server_key.private_key_pem,
            ca_cert=self.ca.cert_pem, token=token.result,
            server_data_json=pulumi.Output.secret(token.result.apply(server_data))),
            self, after_namespace)
        svc = kube.declare(service(settings), self, after_namespace)
        opa = kube.declare(deployment(settings), self,
                           [*after_namespace, *rbac.values(), *config_maps.values(),
                            *secret_resources.values()])
        pdb = kube.declare(kube.pod_disruption_budget(SERVICE, adm.namespace, COMPONENT), self,
                           after_namespace)
        self.webhook = kube.declare(
            webhook_configuration(settings, self.ca.cert_pem.apply(kube.base64_text)), self,
            [opa, svc, pdb, *config_maps.values(), *secret_resources.values(), *(after or [])])

        self.webhook_name = adm.webhook_name
        self.ca_certificate = self.ca.cert_pem
        self.register_outputs({"webhookName": self.webhook_name,
                               "caCertificate": self.ca_certificate})
