"""What the GpuCompaction component takes."""

from __future__ import annotations

from pydantic import Field

from ..base.model import PulledImages, section
from ..base.scoring import (
    MigResources,
    ResourceWeight,
    ScoringStrategy,
    mig_resources_field,
    scored_resources,
)
from ..base.validation import DnsLabel
from .settings import CompactionSettings


class GpuCompactionInputs(PulledImages):
    """Compaction with the descheduler, with the binpack scheduler that places every run and
    the evicted pods, and its scoring."""

    compaction: CompactionSettings = section(CompactionSettings, switched=True)
    scheduler_name: DnsLabel = Field(
        description="The binpack scheduler's name (the BinpackScheduler component's "
                    "`schedulerName` output): it places every run, and the pods a run evicts.")
    scoring_strategy: ScoringStrategy = Field(
        default_factory=ScoringStrategy,
        description="The binpack scheduler's scoring (`scheduler.scoringStrategy`), with which "
                    "a run predicts where evicted pods land.")
    mig_resources: MigResources = mig_resources_field()


    @property
    def scored_resources(self) -> list[ResourceWeight]:
        return scored_resources(self.scoring_strategy, self.mig_resources)
