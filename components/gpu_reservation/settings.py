"""The `reservation` section of the stack settings."""

from __future__ import annotations

from pydantic import Field, field_validator

from ..base.model import (
    ContainerResources,
    ImageSettings,
    Model,
    python_image_field,
    script_resources_field,
)
from ..base.validation import (
    CronSchedule,
    DnsLabel,
    Duration,
    Invalid,
    OwnNamespace,
    cron_job_namespace_field,
    cron_schedule_field,
    duration_seconds,
)

# A run looks once a minute at most (cron): a shorter wait would only be rounded up to it.
MIN_WAIT_BEFORE = "1m"


class ReservationSettings(Model):
    """Reservation by attrition: a GPU pod that needs a whole node and has waited gets the node
    that will free soonest reserved for it (a taint only it tolerates), so that small pods stop
    landing there and the node empties as its pods end. Nothing is evicted. Opt-in; see
    docs/concepts/reservation.md."""

    enabled: bool = Field(
        default=False,
        description="Run the reservation CronJob. Off by default.")
    name: DnsLabel = Field(default="gpu-reservation",
                           description="Names the CronJob, its ServiceAccount, ClusterRole and "
                                       "ConfigMap.")
    namespace: OwnNamespace = cron_job_namespace_field("gpu-reservation")
    min_gpus: int = Field(
        default=8, ge=1, le=64,
        description="A waiting GPU pod that asks for at least this many GPUs gets a "
                    "reservation: the GPUs of a whole node (of the smallest GPU nodes).")
    wait_before: Duration = Field(
        default="15m",
        description=f"How long such a pod waits before its node is reserved (a duration, "
                    f"{MIN_WAIT_BEFORE} or more): pods that land soon on their own cost no "
                    f"reservation.")
    expire_after: Duration = Field(
        default="3h",
        description="How long a reservation lasts at most (a duration): the node is released "
                    "then although the pod has not landed, and the pod waits `waitBefore` "
                    "again before its next one.")
    max_nodes: int = Field(
        default=2, ge=1, le=1000,
        description="Nodes reserved at once, at most.")
    max_share: float = Field(
        default=0.25, gt=0, le=1,
        description="Share of the GPU nodes reserved at once, at most (one node at least).")
    backfill: bool = Field(
        default=True,
        description="Where every GPU pod on a reserved node declares a run time limit "
                    "(activeDeadlineSeconds), let a waiting pod whose own limit ends before "
                    "they do use the node's free GPUs meanwhile: the pod the node is kept for "
                    "starts no later.")
    schedule: CronSchedule = cron_schedule_field("* * * * *", "a run")
    image: ImageSettings = python_image_field("the reservation script")
    resources: ContainerResources = script_resources_field(
        "the container that reserves and releases nodes", memory_limit="512Mi",
        why="A run holds the fields it reads of every node and running pod: about 260 MiB at "
            "5,000 nodes and 35,000 pods, 90 MiB at 1,024 nodes and 7,200 pods.")

    @field_validator("wait_before")
    @classmethod
    def at_least_a_run_apart(cls, value: str) -> str:
        if duration_seconds(value) < duration_seconds(MIN_WAIT_BEFORE):
            raise Invalid("shorter than the time between two runs",
                          f"{MIN_WAIT_BEFORE} or more (runs start once a minute at most)")
        return value

    @field_validator("expire_after")
    @classmethod
    def not_zero(cls, value: str) -> str:
        if duration_seconds(value) <= 0:
            raise Invalid("a reservation that ends at once", "a duration above 0, e.g. 3h")
        return value

    @property
    def wait_before_seconds(self) -> float:
        return duration_seconds(self.wait_before)

    @property
    def expire_after_seconds(self) -> float:
        return duration_seconds(self.expire_after)
