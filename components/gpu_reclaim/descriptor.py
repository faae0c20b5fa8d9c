"""Idle reclaim's package, as the platform assembles it: its component and the image its
CronJob runs."""

from ..base.descriptor import Deployable, Descriptor
from .component import GpuReclaim
from .inputs import GpuReclaimInputs
from .mixin import mixin


def images(inputs: GpuReclaimInputs) -> list[Deployable]:
    reclaim = inputs.reclaim
    return [Deployable(inputs.image(reclaim.image), ("reclaim.enabled",), reclaim.enabled)]


DESCRIPTOR = Descriptor(GpuReclaim, images=images, mixin=mixin)
