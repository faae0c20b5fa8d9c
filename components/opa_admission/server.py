"""OPA's own objects: its ServiceAccount, TLS Secret, the generation's Deployment and Service,
and OPA's arguments."""

from typing import Any

from ..base import manifests
from ..base.facts import ADMISSION_COMPONENT, OPA_DIAGNOSTIC_PORT_NAME, OPA_SERVICE
from .inputs import OpaAdmissionInputs
from .policy import (
    POLICY_CONFIGMAP,
    POLICY_MOUNT,
    SERVER_POLICY_CONFIGMAP,
    SERVER_POLICY_MOUNT,
    loaded_files,
    policy_files,
)

SERVICE_PORT = 443
DIAGNOSTIC_PORT = 8282     # /health and /metrics, for probes and Prometheus
TLS_SECRET = "opa-tls"
# Every OPA pod of one generation: the same policy, parameters, arguments and image. The
# generation's Deployment, Service and ConfigMaps carry it in their names (see generation).
GENERATION_LABEL = "gpu-platform.io/opa-generation"
# How long the API server (and, on a real cluster, each node's proxy) may take to see an OPA
# endpoint come or go: they learn of it from a watch, moments after the pod's readiness changes,
# and longer under load.
ENDPOINT_PROPAGATION_SECONDS = 5
# How a new OPA pod takes over: it counts as available only once it has been ready this long,
# and `pulumi up` switches the webhooks to a new generation only once its Deployment is available.
MIN_READY_SECONDS = ENDPOINT_PROPAGATION_SECONDS
# How a deleted OPA pod hands over (a rollout, a drain): it keeps answering this long after
# SIGTERM, while its endpoint is taken out of the Service and the API server stops sending to
# it, then drains what is in flight within the grace period. The pod's grace period covers both.
SHUTDOWN_WAIT_SECONDS = ENDPOINT_PROPAGATION_SECONDS
SHUTDOWN_GRACE_SECONDS = 10
TERMINATION_GRACE_SECONDS = SHUTDOWN_WAIT_SECONDS + SHUTDOWN_GRACE_SECONDS + 5


def _meta(inputs: OpaAdmissionInputs, name: str, extra_labels: dict | None = None) -> dict:
    return {"name": name, "namespace": inputs.admission.namespace,
            "labels": {**manifests.labels(OPA_SERVICE, ADMISSION_COMPONENT),
                       **(extra_labels or {})}}


def service_account(inputs: OpaAdmissionInputs) -> dict:
    """OPA's own identity: it reads nothing from the API server, so it is granted nothing and
    its pods mount no token."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(inputs, OPA_SERVICE),
            "automountServiceAccountToken": False}


def policy_config_maps(inputs: OpaAdmissionInputs) -> list[dict]:
    """The generation's ConfigMaps: what its pods load when they start."""
    return [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": _meta(inputs, generation_name(inputs, base)), "data": data}
            for base, data in loaded_files(inputs).items()]


def tls_secret(inputs: OpaAdmissionInputs, *, tls_cert: Any, tls_key: Any, ca_cert: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(inputs, TLS_SECRET),
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": tls_cert, "tls.key": tls_key, "ca.crt": ca_cert}}


def service_dns_names(inputs: OpaAdmissionInputs) -> list[str]:
    """The names the API server may use for OPA's Services: every generation's Service in
    OPA's namespace (`opa-<generation>.<namespace>.svc`, which the webhooks call), which the
    serving certificate covers, so that a new generation needs no new certificate."""
    ns = inputs.admission.namespace
    return [OPA_SERVICE, f"{OPA_SERVICE}.{ns}", f"*.{ns}.svc", f"{OPA_SERVICE}.{ns}.svc"]


def generation(inputs: OpaAdmissionInputs) -> str:
    """A digest of everything an OPA pod runs with: the files it loads, its arguments, its
    image. A change is a new generation: its own ConfigMaps, Deployment and Service, named
    after it, which the webhooks call once it is ready, while the old generation, called no
    more, is removed (OpaAdmission)."""
    # A letter first: a label value of digits and one `e` would read as a number in YAML.
    return "g" + manifests.content_hash(loaded_files(inputs), opa_args(inputs),
                                        inputs.image(inputs.admission.opa))[:9]


def generation_name(inputs: OpaAdmissionInputs, base: str) -> str:
    """The name of a generation's ConfigMap, Deployment or Service."""
    return f"{base}-{generation(inputs)}"


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
    return {**manifests.selector_labels(OPA_SERVICE, ADMISSION_COMPONENT),
            GENERATION_LABEL: generation(inputs)}


def deployment(inputs: OpaAdmissionInputs) -> dict:
    adm = inputs.admission
    probe_port = {"port": DIAGNOSTIC_PORT, "scheme": "HTTP"}
    names = {base: generation_name(inputs, base) for base in loaded_files(inputs)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(inputs, generation_name(inputs, OPA_SERVICE)),
        "spec": {
            "replicas": adm.replicas,
            "minReadySeconds": MIN_READY_SECONDS,
            "selector": {"matchLabels": generation_selector(inputs)},
            # Never fewer ready replicas than asked for while rolling (a change of replicas,
            # or of anything else that is not a new generation): the webhook stays served.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {
                    "labels": {**manifests.labels(OPA_SERVICE, ADMISSION_COMPONENT),
                               GENERATION_LABEL: generation(inputs)},
                },
                "spec": {
                    "serviceAccountName": OPA_SERVICE,
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                    "priorityClassName": manifests.CRITICAL_PRIORITY,
                    "securityContext": manifests.RESTRICTED_POD_SECURITY,
                    "affinity": manifests.spread_by_node(OPA_SERVICE, ADMISSION_COMPONENT),
                    "containers": [
                        {
                            "name": "opa",
                            "image": inputs.image(adm.opa),
                            "args": opa_args(inputs),
                            "ports": [{"name": "https", "containerPort": adm.webhook_port},
                                      {"name": OPA_DIAGNOSTIC_PORT_NAME,
                                       "containerPort": DIAGNOSTIC_PORT}],
                            # Ready exactly when it can decide (policy/opa/health.rego).
                            "readinessProbe": {"httpGet": {"path": "/health/ready", **probe_port},
                                               "periodSeconds": 2},
                            "livenessProbe": {"httpGet": {"path": "/health", **probe_port},
                                              "initialDelaySeconds": 10, "periodSeconds": 10},
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                          "limits": {"memory": "512Mi"}},
                            "securityContext": manifests.RESTRICTED_CONTAINER_SECURITY,
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
        "metadata": _meta(inputs, generation_name(inputs, OPA_SERVICE)),
        "spec": {
            "selector": generation_selector(inputs),
            "ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": "https",
                       "protocol": "TCP"}],
        },
    }
