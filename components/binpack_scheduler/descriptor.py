"""The binpack scheduler's package, as the platform assembles it: its component and its
kube-scheduler image, on every stack."""

from ..base.descriptor import Deployable, Descriptor
from .component import BinpackScheduler
from .inputs import BinpackSchedulerInputs
from .mixin import mixin


def images(inputs: BinpackSchedulerInputs) -> list[Deployable]:
    return [Deployable(inputs.scheduler_image, (), True)]


DESCRIPTOR = Descriptor(BinpackScheduler, images=images, mixin=mixin)
