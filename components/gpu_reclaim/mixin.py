"""Idle reclaim's monitoring: an alert when its runs have stopped succeeding (as when
Prometheus does not answer)."""

from ..base.mixin import AlertSettings, Mixin, alert, cron_job_stale
from .inputs import GpuReclaimInputs


def mixin(inputs: GpuReclaimInputs, alerts: AlertSettings, _component: object = None) -> Mixin:
    reclaim = inputs.reclaim
    if not reclaim.enabled:
        return Mixin()
    namespace, hours = reclaim.namespace, alerts.reclaim_stale_hours
    return Mixin(alerts=[alert(
        "GpuReclaimNotRunning", cron_job_stale(namespace, reclaim.name, hours),
        "0s", "warning", "Idle GPU reclaim has not run",
        f"No run of CronJob {namespace}/{reclaim.name} has succeeded for {hours} hours, so idle "
        "GPU pods are neither reported nor reclaimed. A run fails when Prometheus does not "
        "answer its query; see the last Job's pod log.")])
