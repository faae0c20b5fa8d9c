"""Admission's package, as the platform assembles it: its component and OPA's image, on every
stack."""

from ..base.descriptor import Deployable, Descriptor
from .component import OpaAdmission
from .inputs import OpaAdmissionInputs
from .mixin import mixin


def images(inputs: OpaAdmissionInputs) -> list[Deployable]:
    return [Deployable(inputs.image(inputs.admission.opa), (), True)]


DESCRIPTOR = Descriptor(OpaAdmission, images=images, mixin=mixin)
