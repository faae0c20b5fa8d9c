"""What Monitoring adds beside the chart: the DCGM exporter's ServiceMonitor and the monitors of
each component's scrapes (its mixin's), the dashboard's ConfigMap and Grafana's admin
Secret."""

import json
from typing import Any

from ..base import manifests
from ..base.facts import DCGM_METRICS_PORT, DCGM_SERVICE_LABELS
from ..base.gpu_faults import DCGM_JOB
from ..base.mixin import Scrape
from . import rules
from .dashboard import dashboard
from .inputs import MonitoringInputs
from .values import DASHBOARD_LABEL, GRAFANA_ADMIN_SECRET, GRAFANA_PASSWORD_KEY, GRAFANA_USER_KEY

COMPONENT = "monitoring"


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


def component_monitor(inputs: MonitoringInputs, scrape: Scrape) -> dict:
    """The monitor of a component's scrape (its mixin's), at the stack's interval where it asks
    for it."""
    interval = ({"interval": inputs.monitoring.scrape_interval} if scrape.at_stack_interval
                else {})
    return scrape_monitor(inputs, scrape.kind, scrape.name, scrape.namespace,
                          dict(scrape.selector), {**scrape.endpoint, **interval})


def component_monitors(inputs: MonitoringInputs) -> list[dict]:
    """Every component's scrapes, in the order of their packages."""
    return [component_monitor(inputs, scrape) for mixin in inputs.mixins
            for scrape in mixin.scrapes]


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


def prometheus_objects(inputs: MonitoringInputs) -> list[dict]:
    """What the stack's Prometheus must select: the scrape configuration of the DCGM exporter
    and of each component, and the GPU rules and alerts."""
    return [dcgm_service_monitor(inputs), *component_monitors(inputs),
            rules.prometheus_rule(inputs)]


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
