"""The pull-request preview identity of docs/operators/preview-access.yaml, through a real API
server: it can dry-run everything the program declares, and can change nothing."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kueue import Kueue

import harness
from components import opa_admission, teams
from controlplane import ApiError, wait_until
from declared_objects import TEST_MANAGER, apply_declared, find

ACCESS = Path(__file__).resolve().parents[2] / "docs" / "operators" / "preview-access.yaml"
# A preview applies as the field manager that `pulumi up` used.
MANAGER = TEST_MANAGER


# Kueue's webhooks are called at their Service's endpoint (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


@pytest.fixture(scope="module")
def preview(control_plane, declared, example_settings) -> Iterator:
    cp = control_plane
    # The platform as the first `pulumi up` leaves it (the reachability probe applied before
    # the webhooks, no OPA running here to answer it), with the example stack's teams: Kueue
    # running (its CRDs, and its webhooks, which decide its objects), then the access.
    kueue = Kueue(cp, teams.kueue_configuration(
        harness.inputs_of(example_settings).teams)).start()
    try:
        webhooks = [o for o in declared.objects if o["kind"].endswith("WebhookConfiguration")]
        apply_declared(cp.admin, [o for o in declared.objects if o not in webhooks])
        apply_declared(cp.admin, webhooks)
        for obj in yaml.safe_load_all(ACCESS.read_text()):
            cp.admin.apply(obj, TEST_MANAGER)
        yield preview_client(cp, declared)
    finally:
        kueue.stop()


def preview_client(cp, declared):
    """The preview identity's client, once the dry-run-only policy refuses its writes."""
    account = find(list(yaml.safe_load_all(ACCESS.read_text())), "ServiceAccount",
                   "gpu-platform-preview")
    token = cp.service_account_token(account["metadata"]["namespace"],
                                     account["metadata"]["name"])
    kube = cp.client(token)
    # The API server picks a new policy up within moments: wait until a write is refused.
    probe = next(o for o in declared.objects if o["kind"] == "ConfigMap" and
                 o["metadata"]["name"].startswith(f"{opa_admission.POLICY_CONFIGMAP}-"))

    def refused() -> bool:
        try:
            kube.apply(probe, MANAGER)
            return False
        except ApiError:
            return True
    wait_until(refused, "the dry-run-only policy to take effect", timeout=30)
    return kube


def served(kube, objects):
    return [o for o in objects if kube.serves(o["apiVersion"], o["kind"])]


def test_preview_can_dry_run_every_declared_object(preview, declared):
    objects = served(preview, declared.objects)
    assert len(objects) >= 25
    # Kueue's kinds too: its CRDs are served here.
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"} <= {
        o["kind"] for o in objects}
    for obj in objects:
        if obj["metadata"]["name"] == opa_admission.REACHABILITY_PROBE:
            # Allowed, and sent to OPA through its webhook; no OPA answers here, so the API
            # server refuses it for that (not for the identity), as such a cluster's would.
            with pytest.raises(ApiError) as unreachable:
                preview.apply(obj, MANAGER, dry_run=True)
            assert unreachable.value.status == 500, unreachable.value.message
            assert "failed calling webhook" in unreachable.value.message
            continue
        preview.apply(obj, MANAGER, dry_run=True)


@pytest.mark.parametrize("kind, name", [("ValidatingWebhookConfiguration",
                                          "gpu-platform-admission"),
                                         ("Deployment", "opa"), ("Secret", "opa-tls"),
                                         ("ClusterRole", "gpu-binpack-scheduler"),
                                         ("ClusterQueue", "research")])
def test_preview_cannot_change_anything(preview, declared, kind, name):
    obj = find(declared.objects, kind, name)
    obj["metadata"].setdefault("labels", {})["changed-by"] = "a-pull-request"
    with pytest.raises(ApiError) as refused:
        preview.apply(obj, MANAGER)
    assert refused.value.status in (403, 422), refused.value.message
    assert "may only dry-run" in refused.value.message


def test_preview_cannot_read_secrets_outside_the_platform(preview, control_plane):
    control_plane.admin.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "team-credentials", "namespace": "default"}, "stringData": {"k": "v"}},
        TEST_MANAGER)
    with pytest.raises(ApiError) as refused:
        preview.get("v1", "Secret", "team-credentials", "default")
    assert refused.value.status == 403
