"""Idle reclaim's monitoring: an alert when its runs have stopped succeeding (as when
Prometheus does not answer), and, where it evicts, an alert to the owner of each idle pod it has
given a deadline, routed by team: the warning before the GPUs are taken back."""

from __future__ import annotations

from itertools import groupby

from ..base.ksm import ksm_label
from ..base.mixin import AlertSettings, Mixin, alert, stale_run_alert
from .inputs import GpuReclaimInputs
from .manifests import DEADLINE_ANNOTATION, KEEP_ALIVE_ANNOTATION, REPORTED_ANNOTATION
from .settings import NamespacePolicy

EVICTION_ALERT = "GpuIdlePodEvictionScheduled"
REPORTED, DEADLINE = (ksm_label(name, "annotation")
                      for name in (REPORTED_ANNOTATION, DEADLINE_ANNOTATION))


def mixin(inputs: GpuReclaimInputs, alerts: AlertSettings, _component: object = None) -> Mixin:
    reclaim = inputs.reclaim
    if not reclaim.enabled:
        return Mixin()
    eviction_alerts = eviction_scheduled_alerts(inputs)
    return Mixin(
        alerts=[stale_run_alert(
            "GpuReclaimNotRunning", "Idle GPU reclaim has not run", reclaim.namespace,
            reclaim.name, alerts.reclaim_stale_hours,
            "idle GPU pods are neither reported nor reclaimed. A run fails when Prometheus does "
            "not answer its query; see the last Job's pod log."), *eviction_alerts],
        pod_annotations=[REPORTED_ANNOTATION, DEADLINE_ANNOTATION] if eviction_alerts else [])


def eviction_scheduled_alerts(inputs: GpuReclaimInputs) -> list[dict]:
    """For the namespaces reclaim evicts in, one rule per team (and policy): each idle pod that
    a run gave a deadline, with the GPUs it holds idle, when it was reported and when it may go,
    and how its owner keeps it; labelled with the team, so that the team's receivers get it."""
    def key(item: tuple[str, NamespacePolicy]) -> tuple[str, int, bool]:
        namespace, policy = item
        return (inputs.team_namespaces.get(namespace, ""), policy.keep_alives,
                policy.allow_keep)
    evicting = sorted(((namespace, policy) for namespace, policy in inputs.policies.items()
                       if policy.action == "evict"), key=key)
    return [eviction_alert(inputs, [namespace for namespace, _ in group], team, keep_alives,
                           allow_keep)
            for (team, keep_alives, allow_keep), group in groupby(evicting, key=key)]


def eviction_alert(inputs: GpuReclaimInputs, namespaces: list[str], team: str,
                   keep_alives: int, allow_keep: bool) -> dict:
    scheduled = (f"max by (namespace, pod, {REPORTED}, {DEADLINE}) (kube_pod_annotations"
                 f"{{namespace=~\"{'|'.join(namespaces)}\", {DEADLINE}!=\"\"}})")
    keep = ["use its GPUs"]
    if keep_alives:
        keep.append(f"annotate it {KEEP_ALIVE_ANNOTATION}=true to restart the grace period "
                    f"(at most {keep_alives} times)")
    if allow_keep:
        keep.append(f"annotate it (in its pod template) {inputs.reclaim.keep_annotation}=true")
    rule = alert(
        EVICTION_ALERT,
        f"({inputs.idle_query}) * on (namespace, pod) group_left ({REPORTED}, {DEADLINE}) "
        f"{scheduled}",
        "0s", "warning", "An idle GPU pod will be evicted",
        f"Pod {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} has held {{{{ $value }}}} "
        f"GPUs without using them for {inputs.reclaim.idle_for} or more (reported idle at "
        f"{{{{ $labels.{REPORTED} }}}}). Idle reclaim evicts it after "
        f"{{{{ $labels.{DEADLINE} }}}} if it is still idle then. To keep it, "
        f"{', or '.join(keep)}; done with it, delete it to free the GPUs.")
    if team:
        rule["labels"]["team"] = team
    return rule
