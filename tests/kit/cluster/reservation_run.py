"""Reservation as the declared CronJob runs it: its objects applied (but the CronJob, whose
runs the tests start themselves, so that none overlaps a step), and one run of the CronJob's
pod as the kubelet would run it: the modules at the ConfigMap's paths, the container's command
and environment, the ServiceAccount's token."""

from __future__ import annotations

import subprocess
import sys

from components import gpu_reservation
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster.controlplane import ControlPlane
from tests.kit.cluster.declared_objects import apply_declared, find
from tests.kit.cluster.descheduler import LocalContainer


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
    cron_job = find(objects, "CronJob", reservation.name)
    job_spec = {"metadata": cron_job["metadata"], "spec": cron_job["spec"]["jobTemplate"]["spec"]}
    container = LocalContainer(cp, objects, job_spec, "reservation", ports={})
    token = cp.write(f"volumes/{reservation.name}/token",
                     cp.service_account_token(reservation.namespace, reservation.name))
    args = container.args()
    assert args[0] == "python3"
    env = container.env()
    # Only what the ConfigMap ships: no site-packages, started where the modules are.
    run = subprocess.run([sys.executable, "-S", *args[1:], f"--server={cp.server}",
                          f"--token-file={token}", f"--ca-file={cp.ca_file}"],
                         cwd=env["PYTHONPATH"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, f"the reservation run failed\n{run.stdout}\n{run.stderr}"
    assert not run.stderr, run.stderr
    return run.stdout
