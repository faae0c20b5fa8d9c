"""Fault remediation's package, as the platform assembles it: its component, the image its
Deployment runs and its alerts."""

from ..base.descriptor import Deployable, Descriptor
from .component import GpuRemediation
from .inputs import GpuRemediationInputs
from .mixin import mixin


def images(inputs: GpuRemediationInputs) -> list[Deployable]:
    remediation = inputs.remediation
    return [Deployable(inputs.image(remediation.image), ("remediation.mode",),
                       remediation.enabled)]


DESCRIPTOR = Descriptor(GpuRemediation, images=images, mixin=mixin)
