"""Compaction: the descheduler's HighNodeUtilization on GPU nodes, run by a CronJob the binpack
scheduler places, so that whole nodes come free."""

from .component import GpuCompaction
from .inputs import GpuCompactionInputs
from .manifests import POLICY_DIR, POLICY_FILE, cron_job, descheduler_policy

__all__ = ["GpuCompaction", "GpuCompactionInputs", "POLICY_DIR", "POLICY_FILE", "cron_job",
           "descheduler_policy"]
