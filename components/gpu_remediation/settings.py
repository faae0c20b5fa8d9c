"""The `remediation` section of the stack settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..base.gpu_faults import FAULTS
from ..base.model import (
    ContainerResources,
    ImageSettings,
    Model,
    python_image_field,
    script_resources_field,
)
from ..base.validation import (
    DnsLabel,
    Duration,
    Invalid,
    OwnNamespace,
    PrometheusUrl,
    duration_seconds,
    prometheus_url_field,
)

Mode = Literal["off", "report", "quarantine", "drain"]
Detector = Literal["platform", "nvsentinel"]
# Prometheus scrapes every 30 s by default: looking more often finds nothing new.
MIN_INTERVAL = "5s"


class RemediationSettings(Model):
    """Fault remediation: a GPU node whose GPU shows a fault that takes it out of service (a
    fatal XID, failed row remapping, uncorrectable ECC errors: base/gpu_faults.py) is
    quarantined (a taint nothing but the GPU node's own DaemonSets tolerates) and, with `drain`,
    its GPU pods evicted and its teams' workloads put back in their queues whole; it returns
    to service when an operator labels it repaired. Never on missing data, and never more
    than `maxNodes` or `maxShare` of the GPU nodes within `window`. Off by default; see
    docs/concepts/fault-remediation.md."""

    mode: Mode = Field(
        default="off",
        description="What a fault does to its node: `off` (nothing runs), `report` (events "
                    "and the log say what would be done; the alerts fire either way), "
                    "`quarantine` (nothing new lands on the node), `drain` (quarantine, and "
                    "its GPU pods leave through the eviction API, a team's Kueue workload "
                    "back to its queue whole).")
    detector: Detector = Field(
        default="platform",
        description="Who finds faults and takes nodes out of service: `platform` (this "
                    "Deployment, from the DCGM exporter's series in Prometheus) or "
                    "`nvsentinel` (NVIDIA's NVSentinel, installed on its own: it cordons the "
                    "node and labels it dgxc.nvidia.com/nvsentinel-state; with `drain` this "
                    "Deployment then moves the node's GPU pods, a team's Kueue workload back "
                    "to its queue whole, which NVSentinel's drainer does not; it returns "
                    "nodes itself). With `nvsentinel`, `mode` is `drain` or `report`.")
    name: DnsLabel = Field(default="gpu-remediation",
                           description="Names the Deployment, its ServiceAccount, ClusterRole "
                                       "and ConfigMap.")
    namespace: OwnNamespace = Field(default="gpu-remediation",
                                    description="Namespace of the Deployment.")
    max_nodes: int = Field(
        default=2, ge=1, le=1000,
        description="GPU nodes taken out of service within `window`, at most: a fault beyond "
                    "it is reported (GpuFaultNotQuarantined), not acted on, so that a bad "
                    "signal, which shows on many nodes at once, cannot take the fleet down.")
    max_share: float = Field(
        default=0.1, gt=0, le=1,
        description="Share of the GPU nodes taken out of service within `window`, at most "
                    "(one node at least).")
    window: Duration = Field(
        default="1h",
        description="The time `maxNodes` and `maxShare` count over (a duration): a node out "
                    "of service longer (under repair) no longer counts, as failures that come "
                    "apart are not one bad signal.")
    interval: Duration = Field(
        default="10s",
        description=f"How often it looks at the faults Prometheus reports (a duration, "
                    f"{MIN_INTERVAL} or more): a fault is acted on within the exporter's "
                    f"collection interval (30 s), a scrape (`monitoring.scrapeInterval`, 15 s) "
                    f"and this.")
    prometheus_url: PrometheusUrl = prometheus_url_field("it queries for the faults")
    image: ImageSettings = python_image_field("fault remediation")
    resources: ContainerResources = script_resources_field(
        "the container that quarantines and drains nodes")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @field_validator("interval")
    @classmethod
    def not_too_often(cls, value: str) -> str:
        if duration_seconds(value) < duration_seconds(MIN_INTERVAL):
            raise Invalid("shorter than Prometheus can have news", f"{MIN_INTERVAL} or more")
        return value

    @model_validator(mode="after")
    def nvsentinel_quarantines_itself(self) -> RemediationSettings:
        if self.detector == "nvsentinel" and self.mode == "quarantine":
            raise Invalid("NVSentinel takes nodes out of service itself, so quarantine would "
                          "do nothing", "drain (move their GPU pods the platform's way), report, "
                          "or off", at=("mode",), value=self.mode, has_value=True)
        return self

    @field_validator("window")
    @classmethod
    def window_not_zero(cls, value: str) -> str:
        if duration_seconds(value) <= 0:
            raise Invalid("a window that counts nothing", "a duration above 0, e.g. 1h")
        return value

    @property
    def window_seconds(self) -> float:
        return duration_seconds(self.window)

    @property
    def interval_seconds(self) -> float:
        return duration_seconds(self.interval)


def unscraped_faults_warning(remediation: RemediationSettings, exporter_counters_set: bool
                             ) -> str | None:
    """Where remediation watches faults whose fields the DCGM exporter's default counters leave
    out and the stack names no counters of its own: those faults are never seen."""
    if not remediation.enabled or remediation.detector != "platform" or exporter_counters_set:
        return None
    unseen = [f"{fault.name} ({fault.metric})" for fault in FAULTS if not fault.default_counter]
    return (f"remediation.mode is {remediation.mode}, but the DCGM exporter's default counters "
            f"leave out {', '.join(unseen)}: those faults are never seen (their alerts never "
            f"fire) unless gpuOperator.extraValues.dcgmExporter.config.name names a ConfigMap "
            f"of counters that lists them (docs/concepts/fault-remediation.md)")
