"""A component's monitoring, as kube-prometheus gives each component its mixin: the alerts on it
and the endpoints Prometheus scrapes of it, made in the component's package (its `mixin.py`)
and collected by Monitoring, which knows no other component. The alerts' thresholds are the
stack's (`monitoring.alerts`), one section for every component's alerts."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .gpu_faults import DEFAULT_FATAL_XID_CODES
from .model import Model, PulumiInput
from .validation import Duration

# Where Prometheus' pods hold their ServiceAccount token (the kubelet mounts it there).
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class AlertSettings(Model):
    """Thresholds of the GPU alerts."""

    gpu_temperature_celsius: int = Field(
        default=85, ge=50, le=110,
        description="GpuTemperatureHigh fires above this GPU temperature, degrees Celsius.")
    gpu_temperature_for: Duration = Field(
        default="10m", description="...for this long (a duration), so a short burst under load "
                                   "does not page.")
    fatal_xid_codes: list[int] = Field(
        default_factory=lambda: list(DEFAULT_FATAL_XID_CODES),
        description="XID codes that mean the GPU needs draining and a reset (48 double-bit ECC, "
                    "79 fallen off the bus, 94/95 contained/uncontained ECC): GpuFatalXidError, "
                    "critical, and fault remediation takes the node out of service "
                    "(`remediation.mode`); any other XID is GpuXidError, a warning.")
    idle_for: Duration = Field(
        default="1h",
        description="GpuAllocatedIdle: a pod that held its GPUs this long (a duration) without "
                    "any of them active at any sample (`monitoring.usage.activeThreshold`); "
                    "the same default as `reclaim.idleFor`, so that the alert names the pods "
                    "reclaim acts on.")
    pending_for: Duration = Field(
        default="15m",
        description="GpuPodFragmentationPending: a GPU pod unschedulable this long although "
                    "enough GPUs are free in total (a duration).")
    exporter_down_for: Duration = Field(
        default="10m",
        description="GpuExporterDown: a GPU node without a healthy DCGM exporter this long "
                    "(a duration).")
    unavailable_for: Duration = Field(
        default="5m",
        description="BinpackSchedulerUnavailable, GpuAdmissionUnavailable: no available pod "
                    "this long (a duration).")
    admission_rejections_per_hour: int = Field(
        default=60, ge=1,
        description="GpuAdmissionRejectionsHigh: more requests than this refused by the policy "
                    "in an hour (someone's chart or pipeline keeps breaking the rules).")
    compaction_stale_hours: int = Field(
        default=2, ge=1, le=168,
        description="GpuCompactionNotRunning: no compaction run has succeeded for this many "
                    "hours (with compaction enabled; a run waits for the binpack scheduler).")
    reclaim_stale_hours: int = Field(
        default=1, ge=1, le=168,
        description="GpuReclaimNotRunning: no idle reclaim run has succeeded for this many "
                    "hours (with reclaim on; a run fails when Prometheus does not answer).")
    pending_growth_for: Duration = Field(
        default="30m",
        description="GpuPodsPendingGrowing: pending GPU pods more numerous than this long ago "
                    "(a duration), and not fewer since.")


class Scrape(Model):
    """An endpoint Prometheus scrapes: a ServiceMonitor or PodMonitor (in the monitoring
    namespace) for one port of the Services or pods `selector` picks in `namespace`."""

    kind: Literal["ServiceMonitor", "PodMonitor"] = Field(description="The monitor's kind.")
    name: str = Field(description="The monitor's name.")
    namespace: str = Field(description="Where the Services or pods are.")
    selector: dict[str, str] = Field(description="Their labels.")
    endpoint: dict[str, Any] = Field(
        description="The endpoint: its port and how to reach it (scheme, credentials), "
                    "without its path (/metrics) or interval.")
    at_stack_interval: bool = Field(
        default=True,
        description="Scrape it at the stack's interval (`monitoring.scrapeInterval`); else at "
                    "Prometheus' own.")


class Mixin(Model):
    """What a component adds to the stack's monitoring: its alerts, evaluated in the platform's
    rule group after its recording rules, and its scrapes."""

    alerts: list[Annotated[Any, PulumiInput(dict[str, Any])]] = Field(
        default_factory=list,
        description="Its alerting rules, as a PrometheusRule holds them (an expression may be "
                    "an output, known once a resource exists).")
    scrapes: list[Scrape] = Field(default_factory=list, description="Its scraped endpoints.")
    pod_annotations: list[str] = Field(
        default_factory=list,
        description="The pod annotations its alerts read (`kube_pod_annotations`), which "
                    "kube-state-metrics must export.")
    critical_pods_namespaces: list[str] = Field(
        default_factory=list,
        description="Its namespaces that hold a critical-pods quota: one alert covers them "
                    "all when one is nearly full.")


def alert(name: str, expr: Any, duration: str, severity: str, summary: str,
          description: Any) -> dict[str, Any]:
    """An alerting rule; its severity is the label Alertmanager routes on."""
    return {"alert": name, "expr": expr, "for": duration, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def deployment_unavailable(namespace: str, deployment: str) -> str:
    """No pod of the Deployment available."""
    return (f'kube_deployment_status_replicas_available{{namespace="{namespace}", '
            f'deployment="{deployment}"}} < 1')


def cron_job_stale(namespace: str, name: str, hours: int) -> str:
    """No run of the CronJob has succeeded for `hours` (or none ever, `hours` after it was
    created)."""
    cron_job = f'namespace="{namespace}", cronjob="{name}"'
    return (f"(time() - kube_cronjob_status_last_successful_time{{{cron_job}}} > "
            f"{hours * 3600}) or (time() - kube_cronjob_created{{{cron_job}}} > "
            f"{hours * 3600} unless kube_cronjob_status_last_successful_time{{{cron_job}}})")


def stale_run_alert(alert_name: str, summary: str, namespace: str, cron_job: str, hours: int,
                    consequence: str) -> dict[str, Any]:
    """A warning that no run of an in-cluster CronJob has succeeded for `hours`: what stops
    happening (`consequence`, a sentence) and where to look."""
    return alert(alert_name, cron_job_stale(namespace, cron_job, hours), "0s", "warning", summary,
                 f"No run of CronJob {namespace}/{cron_job} has succeeded for {hours} hours, "
                 f"so {consequence}")


def secure_endpoint(port: str) -> dict[str, Any]:
    """A port served over TLS with a certificate the server makes itself, which checks
    Prometheus' ServiceAccount token through the API server (as the chart scrapes the cluster's
    own kube-scheduler)."""
    return {"port": port, "scheme": "https", "bearerTokenFile": SERVICE_ACCOUNT_TOKEN,
            "tlsConfig": {"insecureSkipVerify": True}}
