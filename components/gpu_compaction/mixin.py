"""Compaction's monitoring: an alert when its runs have stopped succeeding (its pod never
placed, because the binpack scheduler is down, or its runs failing)."""

from ..base.mixin import AlertSettings, Mixin, stale_run_alert
from .inputs import GpuCompactionInputs


def mixin(inputs: GpuCompactionInputs, alerts: AlertSettings, _component: object = None
          ) -> Mixin:
    compaction = inputs.compaction
    if not compaction.enabled:
        return Mixin()
    return Mixin(alerts=[stale_run_alert(
        "GpuCompactionNotRunning", "GPU compaction has not run", compaction.namespace,
        compaction.name, alerts.compaction_stale_hours,
        "half-used GPU nodes are not being emptied. A run waits for the binpack scheduler (is "
        "it up?); see the CronJob's Jobs and their pods.")])
