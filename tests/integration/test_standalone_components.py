"""Components declared alone (tests/unit/test_components_alone.py) on a real kube-apiserver: what
the binpack scheduler's program and admission's program declare is server-side applied, as the
platform's objects are, and the scheduler runs from what its program declared and packs GPU
pods."""

import pytest

from components import opa_admission
from components.binpack_scheduler.inputs import BinpackSchedulerInputs
from components.opa_admission.inputs import OpaAdmissionInputs
from tests.kit import harness
from tests.kit.cluster.declared_objects import TestCertificates, apply_declared, declared
from tests.kit.cluster.kube_components import start_binpack_scheduler
from tests.kit.cluster.nodes_and_pods import create_gpu_node, ensure_namespace, placement, pod
from tests.unit.test_components_alone import (
    ADMISSION_ALONE,
    ADMISSION_ARGS,
    SCHEDULER_ALONE,
    SCHEDULER_ARGS,
)

WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
NAMESPACE = "team-a"


@pytest.fixture(scope="module")
def objects() -> dict[str, list[dict]]:
    """What each program declares, as `pulumi up` would send it."""
    certificates = TestCertificates(OpaAdmissionInputs.model_validate(ADMISSION_ARGS))
    return {name: declared(harness.run_program({}, source=source), certificates).objects
            for name, source in (("scheduler", SCHEDULER_ALONE),
                                 ("admission", ADMISSION_ALONE))}


@pytest.fixture(scope="module")
def applied(control_plane, objects):
    return {name: apply_declared(control_plane.admin, declared_objects)
            for name, declared_objects in objects.items()}


def test_everything_each_program_declares_is_accepted(applied, objects):
    scheduler, scheduler_skipped = applied["scheduler"]
    assert not scheduler_skipped and len(scheduler) == len(objects["scheduler"])
    admission, admission_skipped = applied["admission"]
    # No OPA runs here: the reachability probe is refused, naming its webhook (the way
    # `pulumi up` stops when the API server cannot reach OPA), and nothing else.
    (probe,) = admission_skipped
    assert probe == f"ConfigMap team-admission/{opa_admission.REACHABILITY_PROBE}"
    assert len(admission) == len(objects["admission"]) - 1
    assert {o["kind"] for o in admission} >= {"ValidatingWebhookConfiguration", "Deployment",
                                              "ConfigMap", "Secret", "Service"}


def test_the_scheduler_declared_alone_packs_gpu_pods(control_plane, applied, objects):
    cp = control_plane
    # GPU pods here have no OPA to ask: the webhooks go (admission is proven with OPA running
    # in admission/).
    for obj in objects["admission"]:
        if obj["kind"] in WEBHOOK_KINDS:
            cp.admin.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
    scheduler = BinpackSchedulerInputs.model_validate(SCHEDULER_ARGS).scheduler
    start_binpack_scheduler(cp, scheduler, objects["scheduler"])
    settings = harness.example_settings()
    for node in ("gpu-a", "gpu-b"):
        create_gpu_node(cp.admin, settings, node, gpus=8)
    ensure_namespace(cp.admin, NAMESPACE)
    cp.admin.create(pod("first", NAMESPACE, gpus=2, settings=settings, scheduler=scheduler.name))
    first = placement(cp.admin, NAMESPACE, "first")
    assert first in ("gpu-a", "gpu-b")
    for index in range(3):
        cp.admin.create(pod(f"next-{index}", NAMESPACE, gpus=1, settings=settings,
                            scheduler=scheduler.name))
        assert placement(cp.admin, NAMESPACE, f"next-{index}") == first
