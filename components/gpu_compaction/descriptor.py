"""Compaction's package, as the platform assembles it: its component, the descheduler's image
and, with a plan threshold, the planner's."""

from ..base.descriptor import Deployable, Descriptor
from .component import GpuCompaction
from .inputs import GpuCompactionInputs
from .mixin import mixin


def images(inputs: GpuCompactionInputs) -> list[Deployable]:
    compaction = inputs.compaction
    return [Deployable(inputs.image(compaction.image), ("compaction.enabled",),
                       compaction.enabled),
            Deployable(inputs.image(compaction.plan_image),
                       ("compaction.enabled", "compaction.planThreshold"),
                       compaction.enabled and compaction.plan_threshold)]


DESCRIPTOR = Descriptor(GpuCompaction, images=images, mixin=mixin)
