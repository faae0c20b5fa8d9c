"""Reservation by attrition: a CronJob that, for GPU pods needing a whole node that have waited,
reserves the node that will free soonest (a taint only the waiting pod tolerates) and releases
it once the pod has landed, is gone or the reservation expired. Nothing is evicted; its rights
are cluster-wide, as waiting pods and GPU nodes may be anywhere."""

import pulumi

from ..base.component import Component, declare, declare_all
from .inputs import GpuReservationInputs
from .manifests import TAINT_KEY, reservation_objects
from .zz_generated_args import GpuReservationArgs


class GpuReservation(Component[GpuReservationInputs]):
    """Reservation by attrition: a CronJob that reserves a node for a whole-node GPU pod that
    has waited, so that the node empties as its pods end, with the ClusterRole it needs."""

    namespace: str
    "The CronJob's namespace."
    schedule: str
    "When a run starts (cron)."
    taint_key: str
    "The taint a reserved node carries (its value: the uid of the pod it is reserved for)."

    def __init__(self, name: str, args: GpuReservationArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _declare(self, name: str, inputs: GpuReservationInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        objects = reservation_objects(inputs)
        namespace = declare(objects[0], self)
        self.resources = declare_all(objects[1:], self, depends_on=[namespace])
        self.namespace = inputs.reservation.namespace
        self.schedule = inputs.reservation.schedule
        self.taint_key = TAINT_KEY
        self.register_outputs({"namespace": self.namespace, "schedule": self.schedule,
                               "taintKey": self.taint_key})
