"""Reservation as the declared CronJob runs it: its objects applied (but the CronJob, whose
runs the tests start themselves, so that none overlaps a step), and one run of the CronJob's
pod (cron_job_run)."""

from __future__ import annotations

from components import gpu_reservation
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster.controlplane import ControlPlane
from tests.kit.cluster.cron_job_run import cron_job_run
from tests.kit.cluster.declared_objects import apply_declared


def reservation_settings(settings: StackSettings, **changes) -> StackSettings:
    """`settings` with reservation on and `changes` made without validation (a wait shorter
    than the settings allow: the tests do not wait minutes)."""
    reservation = settings.reservation.model_copy(update={"enabled": True, **changes})
    return settings.model_copy(update={"reservation": reservation})


def declared_reservation(settings: StackSettings) -> list[dict]:
    return gpu_reservation.reservation_objects(component_inputs(settings).reservation)


def apply_reservation(cp: ControlPlane, objects: list[dict]) -> None:
    apply_declared(cp.admin, [o for o in objects if o["kind"] != "CronJob"])


def reservation_run(cp: ControlPlane, objects: list[dict], settings: StackSettings) -> str:
    """One run of the declared CronJob's pod; what it printed."""
    reservation = settings.reservation
    return cron_job_run(cp, objects, reservation.name, reservation.namespace, "reservation")
