"""Reservation's package, as the platform assembles it: its component and the image its
CronJob runs."""

from ..base.descriptor import Deployable, Descriptor
from .component import GpuReservation
from .inputs import GpuReservationInputs


def images(inputs: GpuReservationInputs) -> list[Deployable]:
    reservation = inputs.reservation
    return [Deployable(inputs.image(reservation.image), ("reservation.enabled",),
                       reservation.enabled)]


DESCRIPTOR = Descriptor(GpuReservation, images=images)
