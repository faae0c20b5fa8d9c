"""The teams' monitoring: alerts when Kueue is down (then no pod can be created in a team
namespace) and when a team's GPU workloads wait although they would fit in its own quota; and
the scrape of Kueue's metrics Service."""

from ..base.facts import (
    KUEUE_METRICS_PORT_NAME,
    kueue_deployment_name,
    kueue_metrics_service_labels,
    kueue_series,
)
from ..base.mixin import (
    AlertSettings,
    Mixin,
    Scrape,
    alert,
    deployment_unavailable,
    secure_endpoint,
)
from .inputs import TeamsInputs


def mixin(inputs: TeamsInputs, alerts: AlertSettings, _component: object = None) -> Mixin:
    """With teams on: Kueue down, and a team whose GPU workloads wait although they would fit
    in its own quota (the GPUs it lent are not being reclaimed, or its quota is more than the
    nodes hold)."""
    if not inputs.teams.enabled:
        return Mixin()
    kueue = inputs.teams.kueue
    deployment = kueue_deployment_name(kueue.release_name)
    pending = kueue_series("cluster_queue_resource_pending")
    usage = kueue_series("cluster_queue_resource_usage")
    nominal = kueue_series("cluster_queue_nominal_quota")
    return Mixin(
        alerts=[
            alert("KueueUnavailable",
                  deployment_unavailable(kueue.namespace, deployment),
                  alerts.unavailable_for, "critical", "Kueue is down",
                  f"No Kueue pod in {kueue.namespace} has been available for "
                  f"{alerts.unavailable_for}: no pod can be created in a team namespace (Kueue's "
                  "webhooks fail closed), and no queued workload is admitted."),
            alert("GpuTeamWaitsWithQuotaUnused",
                  f"({pending} > 0) and on (cluster_queue, resource) "
                  f"({usage} + {pending} <= {nominal})",
                  alerts.pending_for, "warning", "A team waits for GPUs within its own quota",
                  "Team {{ $labels.cluster_queue }} has had {{ $value }} "
                  f"{{{{ $labels.resource }}}} pending for {alerts.pending_for}, within its "
                  "nominal quota: the GPUs it lent are not being reclaimed, or its quota is more "
                  "than the GPU nodes hold. See `kubectl get workloads -A` and the Teams rows of "
                  "the dashboard."),
        ],
        scrapes=[Scrape(kind="ServiceMonitor", name="kueue", namespace=kueue.namespace,
                        selector=kueue_metrics_service_labels(kueue.release_name),
                        endpoint=secure_endpoint(KUEUE_METRICS_PORT_NAME))])
