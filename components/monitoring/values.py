"""kube-prometheus-stack's values: the images it runs, storage, Grafana and Alertmanager's
routing."""

from ..base import charts
from ..base.facts import AUDIT_LABEL, GPU_PRESENT_LABEL
from ..base.validation import STACK, Subject
from .inputs import MonitoringInputs
from .settings import Receiver

CHART = "kube-prometheus-stack"
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_USER_KEY = "admin-user"
GRAFANA_PASSWORD_KEY = "admin-password"
GRAFANA_PORT = 80
# The chart's Grafana sidecar loads ConfigMaps with this label as dashboards.
DASHBOARD_LABEL = ("grafana_dashboard", "1")


def ksm_annotations(inputs: MonitoringInputs) -> dict[str, list[str]]:
    """The annotations kube-state-metrics must export, by kind: those the mixins' alerts read."""
    pods = sorted({name for mixin in inputs.mixins for name in mixin.pod_annotations})
    return {"pods": pods} if pods else {}


def kube_state_metrics_values(inputs: MonitoringInputs) -> dict:
    """The labels and annotations kube-state-metrics exports, as its chart takes them."""
    def allowlist(by_kind: dict[str, list[str]]) -> list[str]:
        return [f"{kind}=[{','.join(names)}]" for kind, names in by_kind.items()]
    values = {"metricLabelsAllowlist": allowlist(ksm_labels(inputs))}
    if annotations := ksm_annotations(inputs):
        values["metricAnnotationsAllowList"] = allowlist(annotations)
    return values


def ksm_labels(inputs: MonitoringInputs) -> dict[str, list[str]]:
    """The labels kube-state-metrics must export (kube_pod_labels and kube_node_labels carry
    only allow-listed ones), by kind: the audit mode's, for the dashboard; the one that marks GPU
    nodes, for the rules; the teams' network levels, for the free GPUs per domain; those
    showback's node group prices select by."""
    levels = inputs.teams.topology_levels if inputs.teams else []
    nodes = [GPU_PRESENT_LABEL[0], *levels]
    prices = [label for label in inputs.monitoring.usage.node_labels() if label not in nodes]
    return {"pods": [AUDIT_LABEL], "nodes": [*nodes, *prices]}
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


def grafana_service(inputs: MonitoringInputs) -> tuple[str, int]:
    """Grafana's Service and port: the chart's (<release>-grafana), or the existing stack's."""
    mon = inputs.monitoring
    if mon.stack == "existing":
        return mon.existing.grafana_service, mon.existing.grafana_port
    return f"{mon.release_name}-grafana", GRAFANA_PORT


# The chart's Prometheus Service port (prometheus.service.port).
PROMETHEUS_PORT = 9090


def chart_fullname(inputs: MonitoringInputs) -> str:
    """The chart's fullname, as its helpers make it: the release name if it holds the chart's
    name, else `<release>-<chart>`, at most 26 characters (or `fullnameOverride`)."""
    mon = inputs.monitoring
    override = mon.extra_values.get("fullnameOverride")
    name = str(override) if override else (
        mon.release_name if CHART in mon.release_name else f"{mon.release_name}-{CHART}")
    return name[:26].removesuffix("-")


def prometheus_url(inputs: MonitoringInputs) -> str | None:
    """The installed chart's Prometheus HTTP API inside the cluster; none for an existing
    stack, whose Prometheus only its operator knows the address of."""
    mon = inputs.monitoring
    if mon.stack == "existing":
        return None
    return f"http://{chart_fullname(inputs)}-prometheus.{mon.namespace}.svc:{PROMETHEUS_PORT}"


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
        "kube-state-metrics": kube_state_metrics_values(inputs),
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


def receiver_matchers(receiver: Receiver) -> list[str]:
    """The alerts a receiver gets: those of its severities, and of its teams if it names any
    (the `team` label the rules give alerts about a team's pods)."""
    matchers = [f"severity=~\"{'|'.join(receiver.severities)}\""]
    if receiver.teams:
        matchers.append(f"team=~\"{'|'.join(receiver.teams)}\"")
    return matchers


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
            "routes": [{"receiver": r.name, "matchers": receiver_matchers(r), "continue": True}
                       for r in am.receivers],
        },
        "receivers": [{"name": "null"}, *(receiver_config(r) for r in am.receivers)],
    }


def chart_values(inputs: MonitoringInputs) -> dict:
    """The values the release is installed with: generated values plus the stack's extras
    (which check_chart_values has checked)."""
    return charts.deep_merge(stack_values(inputs), inputs.monitoring.extra_values)


def check_chart_values(inputs: MonitoringInputs, subject: Subject = STACK) -> None:
    """The stack's extra values may be merged over the generated ones (SettingsError naming
    each key that may not)."""
    charts.check_extra_values(stack_values(inputs), inputs.monitoring.extra_values,
                              "monitoring.extraValues", subject)
