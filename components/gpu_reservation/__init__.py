"""Reservation by attrition: a CronJob that reserves, for a GPU pod needing a whole node that
has waited, the node that will free soonest, so that it empties as its pods end."""

from .component import GpuReservation
from .inputs import GpuReservationInputs
from .manifests import (
    ENDED_ANNOTATION,
    POD_ANNOTATION,
    TAINT_KEY,
    UNTIL_ANNOTATION,
    actor_config,
    reservation_objects,
)

__all__ = ["ENDED_ANNOTATION", "POD_ANNOTATION", "TAINT_KEY", "UNTIL_ANNOTATION",
           "GpuReservation", "GpuReservationInputs", "actor_config", "reservation_objects"]
