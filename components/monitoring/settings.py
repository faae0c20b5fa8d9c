"""The `monitoring` section of the stack settings."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from ..base.facts import DEFAULT_ACTIVE_THRESHOLD
from ..base.mixin import AlertSettings
from ..base.model import Labels, Model, ReleaseProtection, refuse_chart_settings, to_snake
from ..base.validation import (
    ChartPath,
    DnsLabel,
    Duration,
    Invalid,
    OwnNamespace,
    Repository,
    chart_path_field,
    chart_repository_field,
    chart_version_field,
    duration_seconds,
    extra_values_field,
    is_dns_subdomain,
    release_name_field,
)


class GrafanaSettings(Model):
    """Grafana's admin account."""

    admin_user: str = Field(default="admin", description="Grafana admin user.")
    admin_password: str | None = Field(
        default=None,
        description="Grafana admin password (set with `pulumi config set --secret --path`); "
                    "unset: generated and kept as a Pulumi secret.")


# The usage rules sample every GPU once a minute (their group's interval): a shorter window
# would judge a pod on a handful of samples.
USAGE_MIN_WINDOW = "10m"


def check_prices(prices: dict[str, float]) -> dict[str, float]:
    for model, price in prices.items():
        if not model.strip():
            raise Invalid("a price for no GPU model", "the exporter's modelName of a GPU, such "
                          "as NVIDIA H100 80GB HBM3", value=prices, has_value=True)
        if not math.isfinite(price) or price < 0:
            raise Invalid("not a price", "a number, 0 or more", at=(model,), value=price,
                          has_value=True)
    return prices


# Prices per GPU-hour keyed by the model name the DCGM exporter reports.
ModelPrices = Annotated[dict[str, float], AfterValidator(check_prices)]
PRICE_KEYS = ("keyed by the model name the DCGM exporter reports (its `modelName` label, e.g. "
              "`NVIDIA H100 80GB HBM3`); a key that names no GPU model of the cluster's nodes "
              "stops the preview")


class NodeGroupPrice(Model):
    """What a GPU-hour costs on the nodes a selector matches: a node group, a capacity type
    (on-demand, spot, reserved, a capacity block) or any set of node labels."""

    node_selector: Labels = Field(
        min_length=1,
        description="The node labels (all of them) that pick the nodes these prices hold for, "
                    "e.g. `karpenter.sh/capacity-type: spot` or `eks.amazonaws.com/nodegroup: "
                    "h100-reserved`.")
    price_per_gpu_hour: ModelPrices = Field(
        min_length=1,
        description=f"A price per GPU-hour (0 or more) per GPU model on those nodes, "
                    f"{PRICE_KEYS}.")


class UsageSettings(Model):
    """GPU use next to allocation: when a GPU counts as active, the window use is recorded over,
    and the prices the dashboard's showback row multiplies GPU-hours by."""

    window: Duration = Field(
        default="1h",
        description=f"GPU-hours allocated, used and idle per pod, namespace and team are "
                    f"recorded over this trailing window (a duration, {USAGE_MIN_WINDOW} or "
                    f"more, at most `retention`); a pod that held its GPUs for all of it, none "
                    f"of them active at any sample, is idle.")
    active_threshold: float = Field(
        default=DEFAULT_ACTIVE_THRESHOLD,
        description="A GPU counts as active while its engine activity, the fraction of time its "
                    "graphics/compute engine is busy (0..1, both exclusive), is above this. "
                    "Read from DCGM_FI_PROF_GR_ENGINE_ACTIVE, or, for a GPU whose exporter "
                    "does not report it, from DCGM_FI_DEV_GPU_UTIL / 100.")
    price_per_gpu_hour: ModelPrices = Field(
        default_factory=dict,
        description=f"Showback: a price per GPU-hour (0 or more) per GPU model, {PRICE_KEYS}. "
                    f"Costs are shown for the GPUs priced here or in `nodeGroupPrices` only; "
                    f"neither set: no costs.")
    node_group_prices: list[NodeGroupPrice] = Field(
        default_factory=list,
        description="Showback: prices for the GPUs of some nodes only (a node group, a capacity "
                    "type), over `pricePerGpuHour`: a GPU costs what the first entry whose "
                    "`nodeSelector` its node matches and that prices its model says, else its "
                    "model's price. Costs count from the minute a price applies (a change of "
                    "price or of a node's labels counts from then on). The selectors' labels "
                    "are exported by kube-state-metrics (`kube_node_labels`).")
    currency: str | None = Field(
        default=None, max_length=8,
        description="The prices' currency, as the dashboard writes it after a cost (e.g. "
                    "`EUR`; at most 8 characters); unset: costs are plain numbers.")

    @field_validator("window")
    @classmethod
    def window_holds_samples(cls, value: str) -> str:
        if duration_seconds(value) < duration_seconds(USAGE_MIN_WINDOW):
            raise Invalid("too short to judge a GPU idle on", f"{USAGE_MIN_WINDOW} or more "
                          "(the rules sample once a minute)")
        return value

    @field_validator("active_threshold")
    @classmethod
    def threshold_is_a_fraction(cls, value: float) -> float:
        if not 0 < value < 1:
            raise Invalid("not a fraction of time", "a number between 0 and 1, both exclusive "
                          "(0.05 is 5%)")
        return value

    def node_labels(self) -> list[str]:
        """The node labels the prices select by, which kube-state-metrics must export."""
        return sorted({key for group in self.node_group_prices for key in group.node_selector})

    def priced(self) -> bool:
        return bool(self.price_per_gpu_hour or self.node_group_prices)


class StorageSettings(Model):
    """Persistent volumes for Prometheus and Alertmanager."""

    enabled: bool = Field(
        default=True,
        description="Persistent volumes for Prometheus and Alertmanager, so samples, `for:` "
                    "timers and silences survive a restart. Off only by choice (then all of it "
                    "is lost whenever a pod moves).")
    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the volumes; unset: the cluster's default.")
    prometheus_size_gib: int = Field(
        default=50, ge=1, le=65536,
        description="Prometheus volume, GiB; Prometheus also deletes the oldest samples once "
                    "they take 90% of it, whatever `retention` says.")
    alertmanager_size_gib: int = Field(default=1, ge=1, le=1024,
                                       description="Alertmanager volume (silences), GiB.")

    @field_validator("storage_class_name")
    @classmethod
    def class_is_a_name(cls, value: str | None) -> str | None:
        if value is not None and not is_dns_subdomain(value):
            raise Invalid("not a StorageClass name", "a DNS-1123 subdomain, or unset for the "
                                                     "cluster's default")
        return value


Severity = Literal["critical", "warning", "info"]


class Receiver(Model):
    """Where Alertmanager sends alerts of some severities."""

    name: DnsLabel = Field(description="Receiver name (a DNS-1123 label).")
    severities: list[Severity] = Field(
        min_length=1, description="Alerts of these severities are sent here.")
    webhook_url: str | None = Field(default=None, description="Generic webhook URL.")
    slack_api_url: str | None = Field(default=None,
                                      description="Slack incoming-webhook URL (a secret).")
    slack_channel: str | None = Field(default=None, description="Slack channel, e.g. #gpu.")
    pagerduty_routing_key: str | None = Field(
        default=None, description="PagerDuty Events v2 routing key (a secret).")
    teams: list[str] = Field(
        default_factory=list,
        description="Only the alerts about these teams' namespaces (names in `teams.teams`; "
                    "alerts about a team's pods, such as GpuAllocatedIdle, carry its `team` "
                    "label). Empty: alerts of every team and of no team.")


    @field_validator("webhook_url", "slack_api_url")
    @classmethod
    def url_is_https(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise Invalid("not a URL", "an http(s) URL")
        return value

    @model_validator(mode="after")
    def one_destination(self) -> Receiver:
        given = [key for key in ("webhookUrl", "slackApiUrl", "pagerdutyRoutingKey")
                 if getattr(self, to_snake(key))]
        if len(given) != 1:
            raise Invalid("a receiver sends to exactly one destination",
                          "one of webhookUrl, slackApiUrl (with slackChannel) or "
                          "pagerdutyRoutingKey", value=given, has_value=True)
        if self.slack_api_url and not self.slack_channel:
            raise Invalid("a Slack receiver needs a channel", "slackChannel such as #gpu-alerts",
                          at=("slackChannel",), value=None, has_value=True)
        return self


class AlertmanagerSettings(Model):
    """Where alerts go, and how often."""

    receivers: list[Receiver] = Field(
        default_factory=list,
        description="Where alerts go, by severity: each `{name, severities, and one of "
                    "webhookUrl, slackApiUrl with slackChannel, pagerdutyRoutingKey}` (set URLs "
                    "and keys with `pulumi config set --secret --path`). Empty: alerts are only "
                    "shown in Alertmanager. See docs/operators/monitoring.md#where-alerts-go.")
    group_wait: Duration = Field(default="30s", description="Wait before the first notification of "
                                                            "a group.")
    repeat_interval: Duration = Field(default="4h", description="Resend a firing alert this often.")


    @field_validator("receivers")
    @classmethod
    def names_unique(cls, receivers: list[Receiver]) -> list[Receiver]:
        names = [r.name for r in receivers]
        for index, name in enumerate(names):
            if name in names[:index] or name == "null":
                raise Invalid("receiver name used twice or reserved", "unique names, not null",
                              at=(index, "name"), value=name, has_value=True)
        return receivers


class ExistingStackSettings(Model):
    """The Prometheus Operator stack the cluster already runs, which the platform's scrape
    configuration, rules and dashboard join (`monitoring.stack: existing`)."""

    prometheus: DnsLabel = Field(
        default="kube-prometheus-stack-prometheus",
        description="The `Prometheus` object in `monitoring.namespace` that is to scrape the "
                    "GPUs and evaluate the platform's rules (the chart's is "
                    "`<release>-prometheus`). `pulumi preview` reads its selectors and refuses "
                    "to go on when they would not select what the platform declares.")
    labels: Labels = Field(
        default_factory=lambda: {"release": "kube-prometheus-stack"},
        description="Labels given to the platform's ServiceMonitors, PodMonitor and "
                    "PrometheusRule so that the Prometheus' selectors select them (the "
                    "chart's default selectors match `release: <release>`).")
    dashboard_label: Labels = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="The label Grafana's dashboard sidecar loads ConfigMaps by (the chart's "
                    "default), given to the platform's dashboard in `monitoring.namespace`.")
    grafana_service: DnsLabel = Field(
        default="kube-prometheus-stack-grafana",
        description="Grafana's Service in `monitoring.namespace`, for `grafanaUrl` and "
                    "`grafanaPortForward`.")
    grafana_port: int = Field(default=80, ge=1, le=65535,
                              description="The port of that Service.")

    @field_validator("dashboard_label")
    @classmethod
    def one_label(cls, labels: dict[str, str]) -> dict[str, str]:
        if len(labels) != 1:
            raise Invalid("not one label", "exactly one key and value, the sidecar's `label` "
                          "and `labelValue`", value=labels, has_value=True)
        return labels


# Settings of the chart the program installs, which say nothing with `stack: existing`.
CHART_ONLY = ("releaseName", "repository", "chartVersion", "chartPath", "retention", "grafana",
              "storage", "alertmanager", "protection", "extraValues")


class MonitoringSettings(Model):
    """kube-prometheus-stack, the GPU dashboard, recording rules and alerts."""

    stack: Literal["install", "existing"] = Field(
        default="install",
        description="`install`: the program installs kube-prometheus-stack (pinned) in "
                    "`monitoring.namespace`. `existing`: the cluster already runs a Prometheus "
                    "Operator stack there; the program installs no chart, operator, "
                    "node-exporter or CRDs, and adds only the platform's scrape "
                    "configuration, recording rules and alerts, and dashboard, labelled for "
                    "it (`monitoring.existing`). Alert routing stays the existing "
                    "Alertmanager's. See docs/operators/monitoring.md#an-existing-stack.")
    existing: ExistingStackSettings = Field(
        default_factory=ExistingStackSettings,
        description="With `stack: existing`: the stack the platform joins.")

    release_name: DnsLabel = release_name_field("kube-prometheus-stack")
    namespace: OwnNamespace = Field(default="monitoring", description="Namespace of the stack.")
    repository: Repository = chart_repository_field(
        "https://prometheus-community.github.io/helm-charts")
    chart_version: str = chart_version_field("88.5.3")
    chart_path: ChartPath = chart_path_field()
    scrape_interval: Duration = Field(default="15s", description="Prometheus scrape interval of "
                                                                 "the DCGM exporter.")
    retention: Duration = Field(default="15d", description="How long Prometheus keeps samples.")
    grafana: GrafanaSettings = Field(default_factory=GrafanaSettings, description="Grafana.")
    largest_common_request: int = Field(
        default=8, ge=1, le=16,
        description="GPUs of the largest pod the platform should be able to place (GPUs): free "
                    "GPUs on a busy node that cannot take one count as stranded.")
    alerts: AlertSettings = Field(default_factory=AlertSettings, description="Alert thresholds.")
    usage: UsageSettings = Field(
        default_factory=UsageSettings,
        description="GPU use next to allocation, and showback (see "
                    "docs/operators/monitoring.md#gpu-use-and-showback).")
    storage: StorageSettings = Field(default_factory=StorageSettings,
                                     description="Persistent storage.")
    alertmanager: AlertmanagerSettings = Field(default_factory=AlertmanagerSettings,
                                               description="Alert routing.")
    protection: ReleaseProtection = Field(
        default_factory=lambda: ReleaseProtection(protect=False),
        description="As for the operator (`gpuOperator.protection`); not protected by "
                    "default: replacing the release loses no workload (with storage on, its "
                    "volumes are claims of their own).")
    extra_values: dict[str, Any] = extra_values_field()

    @model_validator(mode="after")
    def chart_settings_need_the_chart(self) -> MonitoringSettings:
        if self.stack == "existing":
            refuse_chart_settings(self, CHART_ONLY, "kube-prometheus-stack", "stack: existing",
                                  "alert routes, Grafana and storage stay the existing stack's")
        return self

    @model_validator(mode="after")
    def usage_window_within_retention(self) -> MonitoringSettings:
        # Past the retention the window would read fewer samples than it names.
        if (self.stack == "install"
                and duration_seconds(self.usage.window) > duration_seconds(self.retention)):
            raise Invalid("longer than Prometheus keeps samples (`retention`, "
                          f"{self.retention})", f"{self.retention} or less",
                          at=("usage", "window"), value=self.usage.window, has_value=True)
        return self

    @property
    def prometheus_labels(self) -> dict[str, str]:
        """The labels that have the stack's Prometheus select the platform's monitors and rules:
        the release's (the installed chart's selectors are open; these keep them selected should
        they be narrowed to the release), or those the existing stack selects by."""
        return (dict(self.existing.labels) if self.stack == "existing"
                else {"release": self.release_name})
