"""What Monitoring adds beside the chart: the ServiceMonitors and PodMonitor of the DCGM
exporter, OPA, the binpack scheduler and Kueue, the dashboard's ConfigMap and Grafana's
admin Secret."""

import json
from typing import Any

from ..base import manifests
from ..base.facts import (
    ADMISSION_COMPONENT,
    DCGM_METRICS_PORT,
    DCGM_SERVICE_LABELS,
    KUEUE_METRICS_PORT_NAME,
    OPA_DIAGNOSTIC_PORT_NAME,
    OPA_SERVICE,
    SCHEDULER_COMPONENT,
    SCHEDULER_METRICS_PORT_NAME,
    kueue_metrics_service_labels,
)
from . import rules
from .dashboard import dashboard
from .inputs import MonitoringInputs
from .rules import DCGM_JOB
from .values import DASHBOARD_LABEL, GRAFANA_ADMIN_SECRET, GRAFANA_PASSWORD_KEY, GRAFANA_USER_KEY

COMPONENT = "monitoring"
# Where Prometheus' pods hold their ServiceAccount token (the kubelet mounts it there).
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def scrape_monitor(inputs: MonitoringInputs, kind: str, name: str, target_namespace: str,
                   selector: dict, endpoint: dict) -> dict:
    """A ServiceMonitor or PodMonitor in the monitoring namespace for one endpoint of the
    Services or pods `selector` picks in `target_namespace`."""
    endpoints = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": inputs.monitoring.namespace,
                     "labels": {**manifests.labels(name, COMPONENT),
                                **inputs.monitoring.prometheus_labels}},
        "spec": {
            "namespaceSelector": {"matchNames": [target_namespace]},
            "selector": {"matchLabels": selector},
            endpoints: [{"path": "/metrics", **endpoint}],
        },
    }


def dcgm_service_monitor(inputs: MonitoringInputs) -> dict:
    """Scrapes the DCGM exporter Service that the GPU Operator creates for the stack's GPU
    path (on the DRA path the exporter's Service has a name of its own; its series keep the
    job the rules and dashboard read)."""
    same_job = ([{"targetLabel": "job", "replacement": DCGM_JOB, "action": "replace"}]
                if inputs.gpu_path == "dra" else [])
    return scrape_monitor(inputs, "ServiceMonitor", "nvidia-dcgm-exporter",
                          inputs.gpu_operator_namespace,
                          dict(DCGM_SERVICE_LABELS[inputs.gpu_path]), {
        "port": DCGM_METRICS_PORT,
        "interval": inputs.monitoring.scrape_interval,
        # The exporter labels a GPU's series with the namespace, pod and container the GPU is
        # allocated to: those must win over the exporter pod's own.
        "honorLabels": True,
        "relabelings": [
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"],
             "targetLabel": "node", "action": "replace"},
            # Without this an idle GPU's series would carry the exporter pod's own namespace and
            # pod, and show up as GPUs used by the operator.
            {"action": "labeldrop", "regex": "namespace|pod|container"},
            *same_job,
        ],
    })


def opa_pod_monitor(inputs: MonitoringInputs) -> dict:
    """Scrapes OPA's diagnostic port: its request metrics show decisions that failed."""
    return scrape_monitor(inputs, "PodMonitor", "gpu-admission-opa",
                          inputs.admission.namespace,
                          manifests.selector_labels(OPA_SERVICE, ADMISSION_COMPONENT),
                          {"port": OPA_DIAGNOSTIC_PORT_NAME})


def scheduler_service_monitor(inputs: MonitoringInputs) -> dict:
    """Scrapes the binpack scheduler's secure port, as the chart scrapes the cluster's own
    kube-scheduler: with Prometheus' ServiceAccount token, which the scheduler checks through
    the API server (the chart's Prometheus role may get /metrics), and without verifying the
    certificate the scheduler makes itself at start."""
    sched = inputs.scheduler
    return scrape_monitor(inputs, "ServiceMonitor", sched.name, sched.namespace,
                          manifests.selector_labels(sched.name, SCHEDULER_COMPONENT), {
        "port": SCHEDULER_METRICS_PORT_NAME,
        "scheme": "https",
        "interval": inputs.monitoring.scrape_interval,
        "bearerTokenFile": SERVICE_ACCOUNT_TOKEN,
        "tlsConfig": {"insecureSkipVerify": True},
    })


def kueue_service_monitor(inputs: MonitoringInputs) -> dict | None:
    """With teams on: scrapes Kueue's metrics Service as the scheduler's, with Prometheus'
    ServiceAccount token (Kueue checks it through the API server) and without verifying the
    certificate Kueue makes itself."""
    teams = inputs.teams
    if teams is None:
        return None
    return scrape_monitor(inputs, "ServiceMonitor", "kueue", teams.namespace,
                          kueue_metrics_service_labels(teams.release_name), {
        "port": KUEUE_METRICS_PORT_NAME,
        "scheme": "https",
        "interval": inputs.monitoring.scrape_interval,
        "bearerTokenFile": SERVICE_ACCOUNT_TOKEN,
        "tlsConfig": {"insecureSkipVerify": True},
    })


def dashboard_label(inputs: MonitoringInputs) -> dict[str, str]:
    """The label Grafana's dashboard sidecar loads the dashboard by: the one the program sets
    on the chart it installs, or the existing stack's."""
    mon = inputs.monitoring
    return dict(mon.existing.dashboard_label) if mon.stack == "existing" else dict(
        [DASHBOARD_LABEL])


def dashboard_config_map(inputs: MonitoringInputs) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpu-platform-dashboard", "namespace": inputs.monitoring.namespace,
                     "labels": {**manifests.labels("gpu-platform-dashboard", COMPONENT),
                                **dashboard_label(inputs)}},
        "data": {"gpu-platform.json": json.dumps(dashboard(inputs), indent=1)},
    }


def prometheus_objects(inputs: MonitoringInputs,
                       certificate_not_after: int | None = None) -> list[dict]:
    """What the stack's Prometheus must select: the scrape configuration of the DCGM exporter,
    OPA, the binpack scheduler and (with teams) Kueue, and the GPU rules and alerts."""
    kueue = kueue_service_monitor(inputs)
    return [dcgm_service_monitor(inputs), opa_pod_monitor(inputs),
            scheduler_service_monitor(inputs), *([kueue] if kueue else []),
            rules.prometheus_rule(inputs, certificate_not_after)]


def grafana_admin_secret(inputs: MonitoringInputs, password: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": GRAFANA_ADMIN_SECRET, "namespace": inputs.monitoring.namespace,
                     "labels": manifests.labels("grafana", COMPONENT)},
        "type": "Opaque",
        "stringData": {GRAFANA_USER_KEY: inputs.monitoring.grafana.admin_user,
                       GRAFANA_PASSWORD_KEY: password},
    }
