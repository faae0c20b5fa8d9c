"""Idle reclaim's monitoring: an alert when its runs have stopped succeeding (as when
Prometheus does not answer)."""

from ..base.mixin import AlertSettings, Mixin, stale_run_alert
from .inputs import GpuReclaimInputs


def mixin(inputs: GpuReclaimInputs, alerts: AlertSettings, _component: object = None) -> Mixin:
    reclaim = inputs.reclaim
    if not reclaim.enabled:
        return Mixin()
    return Mixin(alerts=[stale_run_alert(
        "GpuReclaimNotRunning", "Idle GPU reclaim has not run", reclaim.namespace, reclaim.name,
        alerts.reclaim_stale_hours,
        "idle GPU pods are neither reported nor reclaimed. A run fails when Prometheus does not "
        "answer its query; see the last Job's pod log.")])
