"""Idle GPU reclaim: a CronJob that reports idle GPU pods of opted-in namespaces to their
owners and, where the stack says so, evicts them after a grace period (a team's pod Kueue
admitted goes back to its queue with its workload)."""

from .component import GpuReclaim
from .inputs import GpuReclaimInputs
from .manifests import (
    CONFIG_DIR,
    DEADLINE_ANNOTATION,
    KEEP_ALIVE_ANNOTATION,
    KEEP_ALIVES_ANNOTATION,
    REPORTED_ANNOTATION,
    REQUEUED_ANNOTATION,
    actor_config,
    cron_job,
    reclaim_objects,
    reclaim_rules,
)

__all__ = ["CONFIG_DIR", "DEADLINE_ANNOTATION", "KEEP_ALIVES_ANNOTATION",
           "KEEP_ALIVE_ANNOTATION", "GpuReclaim", "GpuReclaimInputs", "REPORTED_ANNOTATION",
           "REQUEUED_ANNOTATION", "actor_config", "cron_job", "reclaim_objects", "reclaim_rules"]
