"""Admission's monitoring: alerts when OPA is down or degraded, answers without a decision, the
API server cannot call the webhooks or the policy refuses many requests, and before the
webhook's serving certificate (renewed only by `pulumi up`) expires; and the scrape of OPA's
diagnostic port."""

from __future__ import annotations

import datetime
from typing import Any

import pulumi

from ..base import manifests
from ..base.facts import (
    ADMISSION_COMPONENT,
    OPA_DIAGNOSTIC_PORT_NAME,
    OPA_SERVICE,
    mutating_webhook,
    refusing_webhooks,
)
from ..base.mixin import AlertSettings, Mixin, Scrape, alert
from .inputs import OpaAdmissionInputs

# The certificate alert pages this long before the certificate expires.
CERTIFICATE_CRITICAL_DAYS = 7


def unix_time(rfc3339: str) -> int:
    return int(datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp())


def certificate_alerts(inputs: OpaAdmissionInputs, not_after: int) -> list[dict]:
    """The webhook's serving certificate is renewed only by `pulumi up`: warn once it is inside
    the early-renewal window (a run would renew it), page a week before it expires (then every
    pod the policy must see is refused, or admitted unchecked)."""
    adm = inputs.admission
    renewal_hours = adm.certificate.early_renewal_hours
    renew_at = not_after - renewal_hours * 3600
    critical_at = not_after - CERTIFICATE_CRITICAL_DAYS * 86400
    expires = datetime.datetime.fromtimestamp(not_after, datetime.UTC).isoformat()
    what = (f"The admission webhook's serving certificate (OPA in {adm.namespace}) expires at "
            f"{expires}.")
    return [
        alert("GpuAdmissionCertificateRenewalDue", f"vector(time()) > {renew_at}", "0s",
              "warning", "The admission webhook's certificate is due for renewal",
              f"{what} Run `pulumi up` on the stack: it renews the certificate "
              f"({renewal_hours} h early) and OPA reloads it."),
        alert("GpuAdmissionCertificateExpiring", f"vector(time()) > {critical_at}", "0s",
              "critical", "The admission webhook's certificate expires within a week",
              f"{what} Run `pulumi up` on the stack now; once it has expired the API server "
              "cannot call the webhook."),
    ]


def _certificate(inputs: OpaAdmissionInputs, not_after: Any) -> list[Any]:
    """The certificate alerts, for an expiry known now (seconds since the epoch) or once the
    certificate exists (an output of its RFC 3339 time): each alert an output then."""
    if not_after is None:
        return []
    if isinstance(not_after, int):
        return certificate_alerts(inputs, not_after)
    return [pulumi.Output.from_input(not_after).apply(
                lambda end, index=index: certificate_alerts(inputs, unix_time(end))[index])
            for index in range(2)]


def mixin(inputs: OpaAdmissionInputs, alerts: AlertSettings, declared: Any = None) -> Mixin:
    """Its alerts and scrape; the certificate alerts once the component is `declared` (its
    `certificate_not_after`: an output, or seconds since the epoch)."""
    adm = inputs.admission
    certificate_not_after = getattr(declared, "certificate_not_after", None)
    names = (*refusing_webhooks(adm.webhook_name, inputs.teams is not None),
             mutating_webhook(adm.webhook_name))
    webhooks = f'name=~"{"|".join(names)}"'
    fails = adm.failure_policy == "Fail"
    severity = "critical" if fails else "warning"
    failure_effect = ("pods the policy must see are refused (failure policy Fail)" if fails else
                      "pods the policy must see are admitted unchecked (failure policy Ignore)")
    # OPA runs as one Deployment per generation, `opa-<generation>` (two while one replaces
    # the other): its pods count together.
    opa = f'namespace="{adm.namespace}", deployment=~"opa-g[0-9a-f]{{9}}"'
    return Mixin(
        alerts=[
            *_certificate(inputs, certificate_not_after),
            alert("GpuAdmissionUnavailable",
                  f"sum by (namespace) (kube_deployment_status_replicas_available{{{opa}}}) < 1",
                  alerts.unavailable_for, severity, "The GPU admission webhook (OPA) is down",
                  f"No OPA pod in {adm.namespace} has been available for "
                  f"{alerts.unavailable_for}: "
                  + ("new GPU pods are refused (failure policy Fail)." if fails else
                     "new GPU pods are admitted unchecked (failure policy Ignore).")),
            alert("GpuAdmissionDegraded",
                  f"sum by (namespace) (kube_deployment_status_replicas_available{{{opa}}}) "
                  f"< sum by (namespace) (kube_deployment_spec_replicas{{{opa}}})",
                  "10m", "warning", "Some OPA pods are not ready",
                  f"{{{{ $value }}}} OPA pods in {adm.namespace} are available, fewer than "
                  "asked for. An OPA pod is ready only when it can decide: check the pods' "
                  "events (scheduling, image pulls, restarts) and the OPA container's log, which "
                  "names a policy or parameter file it could not load."),
            alert("GpuAdmissionDecisionErrors",
                  f'sum by (namespace, pod) (rate(http_request_duration_seconds_count{{'
                  f'namespace="{adm.namespace}", handler="v0/data", code!="200"}}[5m])) > 0',
                  "5m", severity, "OPA answers admission requests without a decision",
                  "OPA pod {{ $labels.namespace }}/{{ $labels.pod }} answered admission "
                  "requests with an error or without a decision for 5 minutes (404: no "
                  "decision, which a pod loaded from a broken policy ConfigMap gives): "
                  f"{failure_effect}."),
            alert("GpuAdmissionWebhookFailing",
                  f'(sum by (name) (rate(apiserver_admission_webhook_rejection_count{{'
                  f'{webhooks}, error_type!="no_error"}}[5m])) or sum by (name) '
                  f'(rate(apiserver_admission_webhook_fail_open_count{{{webhooks}}}[5m]))) > 0',
                  "5m", severity, "The API server cannot call the GPU admission webhook",
                  "Calls to webhook {{ $labels.name }} fail (timeouts, TLS, no endpoints): "
                  f"{failure_effect}. Check that OPA is ready and that the API server can reach "
                  "it."),
            alert("GpuAdmissionRejectionsHigh",
                  f'sum(increase(apiserver_admission_webhook_rejection_count{{{webhooks}, '
                  f'error_type="no_error"}}[1h])) > {alerts.admission_rejections_per_hour}',
                  "15m", "warning", "Many requests refused by the GPU admission policy",
                  "{{ $value }} requests were refused by the GPU admission policy in the last "
                  f"hour (more than {alerts.admission_rejections_per_hour}): a chart or "
                  "pipeline is probably creating GPU pods outside the rules. The dashboard's "
                  "Admission row shows which operations; the API server's events name the "
                  "pods."),
        ],
        scrapes=[Scrape(kind="PodMonitor", name="gpu-admission-opa", namespace=adm.namespace,
                        selector=manifests.selector_labels(OPA_SERVICE, ADMISSION_COMPONENT),
                        endpoint={"port": OPA_DIAGNOSTIC_PORT_NAME}, at_stack_interval=False)],
        critical_pods_namespaces=[adm.namespace])
