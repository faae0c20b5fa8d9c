"""Monitoring: kube-prometheus-stack, the DCGM exporter's ServiceMonitor and the GPU dashboard."""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import pulumi
import pulumi_random as random

from . import charts, dashboard, gpu_rules, kube
from .gpu_operator import DCGM_METRICS_PORT, DCGM_SERVICE_LABELS
from .settings import AUDIT_LABEL, StackSettings

CHART = "kube-prometheus-stack"
COMPONENT = "monitoring"
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_USER_KEY = "admin-user"
GRAFANA_PASSWORD_KEY = "admin-password"
# The chart's Grafana sidecar loads ConfigMaps with this label as dashboards.
DASHBOARD_LABEL = ("grafana_dashboard", "1")
GRAFANA_PORT = 80


def grafana_service(settings: StackSettings) -> str:
    """The Grafana Service the chart creates: <release>-grafana."""
    return f"{settings.monitoring.release_name}-grafana"


def stack_values(settings: StackSettings) -> dict:
    """Chart values generated from the settings (before the stack's extra values)."""
    mon = settings.monitoring
    # Selectors opened: ServiceMonitors, PodMonitors and rules of every namespace are used,
    # not only those labelled with this release.
    selectors_everywhere = {f"{kind}SelectorNilUsesHelmValues": False
                            for kind in ("serviceMonitor", "podMonitor", "rule", "probe")}
    return {
        "prometheus": {"prometheusSpec": {**selectors_everywhere, "retention": mon.retention}},
        # kube_pod_labels carries only allowlisted labels: the audit mode's, for the dashboard.
        "kube-state-metrics": {"metricLabelsAllowlist": [f"pods=[{AUDIT_LABEL}]"]},
        "grafana": {
            "admin": {"existingSecret": GRAFANA_ADMIN_SECRET, "userKey": GRAFANA_USER_KEY,
                      "passwordKey": GRAFANA_PASSWORD_KEY},
            "sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL[0],
                                       "labelValue": DASHBOARD_LABEL[1]}},
        },
    }


def chart_values(settings: StackSettings) -> dict:
    return charts.merge_values(stack_values(settings), settings.monitoring.extra_values,
                               "monitoring.extraValues")


def dcgm_service_monitor(settings: StackSettings) -> dict:
    """Scrapes the DCGM exporter Service that the GPU Operator creates."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": settings.monitoring.namespace,
                     "labels": kube.labels("nvidia-dcgm-exporter", COMPONENT)},
        "spec": {
            "namespaceSelector": {"matchNames": [settings.gpu_operator.namespace]},
            "selector": {"matchLabels": dict(DCGM_SERVICE_LABELS)},
            "endpoints": [{
                "port": DCGM_METRICS_PORT,
                "path": "/metrics",
                "interval": settings.monitoring.scrape_interval,
                # The exporter labels a GPU's series with the namespace, pod and container the
                # GPU is allocated to: those must win over the exporter pod's own.
                "honorLabels": True,
                "relabelings": [
                    {"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                     "targetLabel": "node", "action": "replace"},
                    # Without this an idle GPU's series would carry the exporter pod's own
                    # namespace and pod, and show up as GPUs used by the operator.
                    {"action": "labeldrop", "regex": "namespace|pod|container"},
                ],
            }],
        },
    }


def dashboard_config_map(settings: StackSettings) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpu-platform-dashboard", "namespace": settings.monitoring.namespace,
                     "labels": {**kube.labels("gpu-platform-dashboard", COMPONENT),
                                DASHBOARD_LABEL[0]: DASHBOARD_LABEL[1]}},
        "data": {"gpu-platform.json": json.dumps(dashboard.dashboard(settings), indent=1)},
    }


def grafana_admin_secret(settings: StackSettings, password: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": GRAFANA_ADMIN_SECRET, "namespace": settings.monitoring.namespace,
                     "labels": kube.labels("grafana", COMPONENT)},
        "type": "Opaque",
        "stringData": {GRAFANA_USER_KEY: settings.monitoring.grafana.admin_user,
                       GRAFANA_PASSWORD_KEY: password},
    }


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack (with `values` from `chart_values`) first; the ServiceMonitor and dashboard after it (their CRDs and the
    Grafana sidecar come from the chart) and after the resources in `after` (the GPU Operator,
    which creates the DCGM exporter Service)."""

    def __init__(self, name: str, settings: StackSettings, values: Any,
                 after: Optional[Sequence[pulumi.Resource]] = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:Monitoring", name, None, opts)
        mon = settings.monitoring
        namespace = kube.declare(kube.namespace(mon.namespace, "privileged", COMPONENT), self)
        if mon.grafana.admin_password:
            password = pulumi.Output.secret(mon.grafana.admin_password)
        else:
            password = random.RandomPassword(
                "grafana-admin", length=32, special=False,
                opts=pulumi.ResourceOptions(parent=self)).result
        admin = kube.declare(grafana_admin_secret(settings, password), self, [namespace])
        self.release = charts.release(
            mon.release_name, chart=CHART, version=mon.chart_version, repository=mon.repository,
            namespace=mon.namespace, values=values, parent=self,
            depends_on=[namespace, admin])
        self.service_monitor = kube.declare(dcgm_service_monitor(settings), self,
                                            [self.release, *(after or [])])
        self.dashboard = kube.declare(dashboard_config_map(settings), self, [self.release])
        self.rules = kube.declare(gpu_rules.prometheus_rule(settings), self, [self.release])

        self.grafana_url = f"http://{grafana_service(settings)}.{mon.namespace}.svc:{GRAFANA_PORT}"
        self.grafana_port_forward = (f"kubectl -n {mon.namespace} port-forward "
                                     f"svc/{grafana_service(settings)} 3000:{GRAFANA_PORT}")
        self.grafana_admin_password = password
        self.register_outputs({"grafanaUrl": self.grafana_url,
                               "grafanaPortForward": self.grafana_port_forward,
                               "grafanaAdminPassword": self.grafana_admin_password})
