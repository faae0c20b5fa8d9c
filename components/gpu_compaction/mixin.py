"""Compaction's monitoring: an alert when its runs have stopped succeeding (its pod never
placed, because the binpack scheduler is down, or its runs failing)."""

from ..base.mixin import AlertSettings, Mixin, alert, cron_job_stale
from .inputs import GpuCompactionInputs


def mixin(inputs: GpuCompactionInputs, alerts: AlertSettings, _component: object = None
          ) -> Mixin:
    compaction = inputs.compaction
    if not compaction.enabled:
        return Mixin()
    namespace, hours = compaction.namespace, alerts.compaction_stale_hours
    return Mixin(alerts=[alert(
        "GpuCompactionNotRunning", cron_job_stale(namespace, compaction.name, hours),
        "0s", "warning", "GPU compaction has not run",
        f"No run of CronJob {namespace}/{compaction.name} has succeeded for {hours} hours, so "
        "half-used GPU nodes are not being emptied. A run waits for the binpack scheduler (is "
        "it up?); see the CronJob's Jobs and their pods.")])
