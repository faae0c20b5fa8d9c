"""Monitoring: kube-prometheus-stack, the DCGM exporter's ServiceMonitor and the GPU dashboard."""

import json
from typing import Any

import pulumi
import pulumi_random as random

from . import binpack_scheduler, charts, dashboard, gpu_rules, kube, opa_admission
from .args import MonitoringArgs
from .facts import AUDIT_LABEL
from .gpu_operator import DCGM_METRICS_PORT, DCGM_SERVICE_LABELS
from .inputs import MonitoringInputs
from .settings import STACK, Receiver
from .teams import METRICS_PORT_NAME as TEAMS_METRICS_PORT
from .teams import metrics_service_labels
from .validation import Subject

CHART = "kube-prometheus-stack"
COMPONENT = "monitoring"
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_USER_KEY = "admin-user"
GRAFANA_PASSWORD_KEY = "admin-password"
# The chart's Grafana sidecar loads ConfigMaps with this label as dashboards.
DASHBOARD_LABEL = ("grafana_dashboard", "1")
GRAFANA_PORT = 80
# Where Prometheus' pods hold their ServiceAccount token (the kubelet mounts it there).
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

# Facts of the pinned chart (kube-prometheus-stack 88.5.3, appVersion v0.93.1, with the
# subcharts it pins: grafana 12.11.1, kube-state-metrics 8.4.0, prometheus-node-exporter
# 4.56.1), read from their values.yaml and templates: the images the values below deploy, as
# registry, repository and tag. Every one of them takes its registry from `global.imageRegistry`
# when that is set, keeping the repository path. A None tag is set below (the chart would take
# the cluster's exact version, which a mirror cannot know in advance).
CRD_UPGRADE_BUSYBOX_TAG = "1.37.0"      # the chart's default is busybox:latest: pinned here
CHART_IMAGES = (
    ("quay.io", "prometheus-operator/prometheus-operator", "v0.93.1"),
    ("quay.io", "prometheus-operator/prometheus-config-reloader", "v0.93.1"),
    ("ghcr.io", "jkroepke/kube-webhook-certgen", "1.8.7"),
    ("quay.io", "prometheus/prometheus", "v3.14.0-distroless"),
    ("quay.io", "prometheus/alertmanager", "v0.34.0"),
    ("registry.k8s.io", "kube-state-metrics/kube-state-metrics", "v2.20.0"),
    ("quay.io", "prometheus/node-exporter", "v1.12.1-distroless"),
    ("docker.io", "grafana/grafana", "13.2.0"),
    ("quay.io", "kiwigrid/k8s-sidecar", "2.10.1"),
    ("docker.io", "busybox", CRD_UPGRADE_BUSYBOX_TAG),     # crds.upgradeJob
    ("registry.k8s.io", "kubectl", None),                  # crds.upgradeJob: v<kubernetesVersion>
)


def chart_images(inputs: MonitoringInputs) -> list[str]:
    """The chart's images as the nodes pull them (from the mirror, when set)."""
    return [f"{inputs.mirrored(f'{registry}/{repository}')}:"
            f"{tag or 'v' + inputs.kubernetes_version}"
            for registry, repository, tag in CHART_IMAGES]


def grafana_service(inputs: MonitoringInputs) -> str:
    """The Grafana Service the chart creates: <release>-grafana."""
    return f"{inputs.monitoring.release_name}-grafana"


def stack_values(inputs: MonitoringInputs) -> dict:
    """Chart values generated from the settings (before the stack's extra values)."""
    mon = inputs.monitoring
    # Selectors opened: ServiceMonitors, PodMonitors and rules of every namespace are used,
    # not only those labelled with this release.
    selectors_everywhere = {f"{kind}SelectorNilUsesHelmValues": False
                            for kind in ("serviceMonitor", "podMonitor", "rule", "probe")}
    prometheus_spec: dict = {**selectors_everywhere, "retention": mon.retention}
    alertmanager_spec: dict = {}
    if mon.storage.enabled:
        prometheus_spec["storageSpec"] = volume_claim(inputs, mon.storage.prometheus_size_gib)
        # Prometheus deletes the oldest blocks before the volume fills up.
        prometheus_spec["retentionSize"] = f"{int(mon.storage.prometheus_size_gib * 0.9)}GiB"
        alertmanager_spec["storage"] = volume_claim(inputs, mon.storage.alertmanager_size_gib)
    mirror = {"global": {"imageRegistry": inputs.image_registry_mirror}} \
        if inputs.image_registry_mirror else {}
    return {
        **mirror,
        # Helm installs CRDs but never upgrades them: the chart's pre-install/pre-upgrade Job
        # applies the CRDs of the new prometheus-operator (server-side) before it starts. Its
        # images get fixed tags, so a mirror can hold them.
        "crds": {"upgradeJob": {"enabled": True, "image": {
            "busybox": {"tag": CRD_UPGRADE_BUSYBOX_TAG},
            "kubectl": {"tag": f"v{inputs.kubernetes_version}"}}}},
        "prometheus": {"prometheusSpec": prometheus_spec},
        "alertmanager": {"alertmanagerSpec": alertmanager_spec,
                         "config": alertmanager_config(inputs)},
        # kube_pod_labels carries only allowlisted labels: the audit mode's, for the dashboard.
        "kube-state-metrics": {"metricLabelsAllowlist": [f"pods=[{AUDIT_LABEL}]"]},
        "grafana": {
            "admin": {"existingSecret": GRAFANA_ADMIN_SECRET, "userKey": GRAFANA_USER_KEY,
                      "passwordKey": GRAFANA_PASSWORD_KEY},
            "sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL[0],
                                       "labelValue": DASHBOARD_LABEL[1]}},
        },
    }


def volume_claim(inputs: MonitoringInputs, size_gib: int) -> dict:
    """A storage spec as the Prometheus operator takes it: one ReadWriteOnce claim per pod."""
    spec: dict = {"accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": f"{size_gib}Gi"}}}
    if inputs.monitoring.storage.storage_class_name:
        spec["storageClassName"] = inputs.monitoring.storage.storage_class_name
    return {"volumeClaimTemplate": {"spec": spec}}


def receiver_config(receiver: Receiver) -> dict:
    config: dict = {"name": receiver.name}
    if receiver.webhook_url:
        config["webhook_configs"] = [{"url": receiver.webhook_url, "send_resolved": True}]
    elif receiver.slack_api_url:
        config["slack_configs"] = [{"api_url": receiver.slack_api_url,
                                    "channel": receiver.slack_channel, "send_resolved": True}]
    else:
        config["pagerduty_configs"] = [{"routing_key": receiver.pagerduty_routing_key,
                                        "send_resolved": True}]
    return config


def alertmanager_config(inputs: MonitoringInputs) -> dict:
    """Alertmanager's configuration: each receiver gets the alerts of its severities (the rules
    label every alert with one), everything else goes nowhere but the Alertmanager UI."""
    am = inputs.monitoring.alertmanager
    return {
        "route": {
            "receiver": "null",
            "group_by": ["alertname", "namespace", "node"],
            "group_wait": am.group_wait,
            "repeat_interval": am.repeat_interval,
            "routes": [{"receiver": r.name,
                        "matchers": [f"severity=~\"{'|'.join(r.severities)}\""],
                        "continue": True} for r in am.receivers],
        },
        "receivers": [{"name": "null"}, *(receiver_config(r) for r in am.receivers)],
    }


def chart_values(inputs: MonitoringInputs, subject: Subject = STACK) -> dict:
    return charts.merge_values(stack_values(inputs), inputs.monitoring.extra_values,
                               "monitoring.extraValues", subject)


def scrape_monitor(inputs: MonitoringInputs, kind: str, name: str, target_namespace: str,
                   selector: dict, endpoint: dict) -> dict:
    """A ServiceMonitor or PodMonitor in the monitoring namespace for one endpoint of the
    Services or pods `selector` picks in `target_namespace`."""
    endpoints = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": inputs.monitoring.namespace,
                     "labels": kube.labels(name, COMPONENT)},
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
    same_job = ([{"targetLabel": "job", "replacement": gpu_rules.DCGM_JOB, "action": "replace"}]
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
                          kube.selector_labels(opa_admission.SERVICE, opa_admission.COMPONENT),
                          {"port": opa_admission.DIAGNOSTIC_PORT_NAME})


def scheduler_service_monitor(inputs: MonitoringInputs) -> dict:
    """Scrapes the binpack scheduler's secure port, as the chart scrapes the cluster's own
    kube-scheduler: with Prometheus' ServiceAccount token, which the scheduler checks through
    the API server (the chart's Prometheus role may get /metrics), and without verifying the
    certificate the scheduler makes itself at start."""
    sched = inputs.scheduler
    return scrape_monitor(inputs, "ServiceMonitor", sched.name, sched.namespace,
                          kube.selector_labels(sched.name, binpack_scheduler.COMPONENT), {
        "port": binpack_scheduler.METRICS_PORT_NAME,
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
                          metrics_service_labels(teams.release_name), {
        "port": TEAMS_METRICS_PORT,
        "scheme": "https",
        "interval": inputs.monitoring.scrape_interval,
        "bearerTokenFile": SERVICE_ACCOUNT_TOKEN,
        "tlsConfig": {"insecureSkipVerify": True},
    })


def dashboard_config_map(inputs: MonitoringInputs) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpu-platform-dashboard", "namespace": inputs.monitoring.namespace,
                     "labels": {**kube.labels("gpu-platform-dashboard", COMPONENT),
                                DASHBOARD_LABEL[0]: DASHBOARD_LABEL[1]}},
        "data": {"gpu-platform.json": json.dumps(dashboard.dashboard(inputs), indent=1)},
    }


def grafana_admin_secret(inputs: MonitoringInputs, password: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": GRAFANA_ADMIN_SECRET, "namespace": inputs.monitoring.namespace,
                     "labels": kube.labels("grafana", COMPONENT)},
        "type": "Opaque",
        "stringData": {GRAFANA_USER_KEY: inputs.monitoring.grafana.admin_user,
                       GRAFANA_PASSWORD_KEY: password},
    }


class Monitoring(kube.Component):
    """kube-prometheus-stack first; then, as its CRDs and Grafana's sidecar come from the chart,
    the scrape configuration of the DCGM exporter, OPA and the binpack scheduler, the GPU
    dashboard, and the GPU recording rules and alerts."""

    grafana_url: str
    "Grafana's address inside the cluster."
    grafana_port_forward: str
    "The kubectl command that opens Grafana on localhost:3000."
    grafana_admin_password: pulumi.Output[str]
    "Grafana's admin password (a secret)."

    def __init__(self, name: str, args: MonitoringArgs,
                 opts: pulumi.ResourceOptions | None = None):
        inputs = self.inputs(MonitoringInputs, args)
        values = chart_values(inputs, self.args_subject())
        super().__init__(name, opts)
        mon = inputs.monitoring
        namespace = kube.declare(kube.namespace(mon.namespace, "privileged", COMPONENT), self)
        if mon.grafana.admin_password:
            password = pulumi.Output.secret(mon.grafana.admin_password)
        else:
            password = random.RandomPassword(
                self.child_name("grafana-admin"), length=32, special=False,
                opts=pulumi.ResourceOptions(parent=self)).result
        admin = kube.declare(grafana_admin_secret(inputs, password), self, [namespace])
        self.release = charts.release(
            mon.release_name, chart=CHART, version=mon.chart_version, repository=mon.repository,
            namespace=mon.namespace, values=charts.values_input(values, inputs.secret_values),
            parent=self, protection=mon.protection, chart_path=mon.chart_path,
            depends_on=[namespace, admin])
        self.service_monitor = kube.declare(dcgm_service_monitor(inputs), self, [self.release])
        self.dashboard = kube.declare(dashboard_config_map(inputs), self, [self.release])
        rule = gpu_rules.prometheus_rule(inputs)
        if inputs.admission.certificate_not_after is not None:
            # The certificate alerts need its expiry, known once the certificate exists.
            rule["spec"] = pulumi.Output.from_input(inputs.admission.certificate_not_after).apply(
                lambda end: gpu_rules.prometheus_rule(inputs, gpu_rules.unix_time(end))["spec"])
        self.rules = kube.declare(rule, self, [self.release])
        self.opa_monitor = kube.declare(opa_pod_monitor(inputs), self, [self.release])
        self.scheduler_monitor = kube.declare(scheduler_service_monitor(inputs), self,
                                              [self.release])
        if kueue := kueue_service_monitor(inputs):
            self.kueue_monitor = kube.declare(kueue, self, [self.release])

        self.grafana_url = f"http://{grafana_service(inputs)}.{mon.namespace}.svc:{GRAFANA_PORT}"
        self.grafana_port_forward = (f"kubectl -n {mon.namespace} port-forward "
                                     f"svc/{grafana_service(inputs)} 3000:{GRAFANA_PORT}")
        self.grafana_admin_password = password
        self.register_outputs({"grafanaUrl": self.grafana_url,
                               "grafanaPortForward": self.grafana_port_forward,
                               "grafanaAdminPassword": self.grafana_admin_password})
