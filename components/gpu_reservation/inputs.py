"""What the GpuReservation component takes."""

from __future__ import annotations

from pydantic import Field

from ..base.model import PulledImages, section
from .settings import ReservationSettings


class GpuReservationInputs(PulledImages):
    """Reservation by attrition, with the scheduler whose pods it serves and where the GPUs
    are counted."""

    reservation: ReservationSettings = section(ReservationSettings, switched=True)
    scheduler_name: str = Field(
        description="The binpack scheduler's name: its pods are the ones reserved for.")
    dra_driver: str | None = Field(
        default=None,
        description="On the DRA path, the driver whose ResourceSlices list the GPUs; unset on "
                    "the device plugin path.")
    gpu_device_classes: list[str] = Field(
        default_factory=list,
        description="On the DRA path, the DeviceClasses of whole GPUs that claims ask for.")
