"""The program's declared objects on the local control plane: the example stack's objects as
`pulumi up` would send them, with real certificates in place of the mocks' placeholders; applied
as `pulumi up` applies them; read back and compared with what was declared; and found by kind and
name."""

from __future__ import annotations

import base64
import copy
import re
import time
from dataclasses import dataclass
from typing import Any

from components import opa_admission
from components.base.manifests import base64_text
from components.opa_admission.inputs import OpaAdmissionInputs
from tests.kit import harness
from tests.kit.cluster.controlplane import ApiError, CertificateAuthority, Kube

TEST_MANAGER = "gpu-platform-integration"
# Registered only once what they call is ready, as the program orders them.
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
NODE_PATCH_TYPE = "kubernetes:core/v1:NodePatch"
# API groups whose CustomResourceDefinitions come with a chart (which cannot be fetched here).
CHART_CRD_GROUPS = {"monitoring.coreos.com": "kube-prometheus-stack (Prometheus Operator CRDs)",
                    "nvidia.com": "gpu-operator",
                    # Applied with Kueue running by test_teams.py.
                    "kueue.x-k8s.io": "kueue"}


@dataclass
class Declared:
    """The example stack's objects as `pulumi up` would send them."""
    objects: list[dict]          # created or applied as they are
    node_patches: list[dict]     # server-side-apply patches of existing Nodes
    charts: list[str]            # Helm releases: rendered by Helm at deploy time
    field_manager: str           # of the node patches
    force_node_patches: bool


class TestCertificates:
    """A CA and an OPA serving certificate made for the test, in place of pulumi-tls' outputs,
    valid for the OPA Service's names and for 127.0.0.1, where the test runs OPA."""

    __test__ = False    # not a class of tests for pytest to collect where it is imported

    def __init__(self, admission: OpaAdmissionInputs):
        self.ca = CertificateAuthority("gpu-platform admission test CA")
        self.server = self.ca.issue("opa", server=True,
                                    dns_names=tuple(opa_admission.service_dns_names(admission)),
                                    ip_addresses=("127.0.0.1",))

    def replacements(self) -> dict[str, str]:
        real = {harness.FAKE_CA_PEM: self.ca.cert_pem,
                harness.FAKE_SERVER_PEM: self.server.cert_pem,
                harness.FAKE_KEY_PEM: self.server.key_pem}
        return real | {base64_text(fake): base64_text(value) for fake, value in real.items()}


def declared(recording: harness.Recording, certs: TestCertificates) -> Declared:
    objects, patches, field_manager, force = [], [], "", False
    for registration in recording.registrations:
        if not registration.type.startswith("kubernetes:") or "helm.sh" in registration.type:
            continue
        replacements = certs.replacements()
        obj = harness.map_leaves(harness.integral_numbers(registration.inputs),
                                 lambda v, known=replacements:
                                 known.get(v, v) if isinstance(v, str) else v)
        if registration.type == NODE_PATCH_TYPE:
            annotations = obj["metadata"].pop("annotations")
            field_manager = annotations.pop("pulumi.com/patchFieldManager")
            force = annotations.pop("pulumi.com/patchForce", "false") == "true"
            if annotations:
                obj["metadata"]["annotations"] = annotations
            patches.append(obj)
        else:
            objects.append(obj)
    # Namespaces first, as the declared dependencies order them on a real `pulumi up`.
    objects.sort(key=lambda o: o["kind"] != "Namespace")
    charts = [r.name for r in recording.of_type("kubernetes:helm.sh/v3:Release")]
    return Declared(objects, patches, charts, field_manager, force)


def apply_declared(kube: Kube, objects: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """Server-side apply every object the API server serves; the rest are returned as skipped,
    with the chart whose CRDs they need (an unknown kind is an error), and so is the webhook
    reachability probe when the API server refuses it because it cannot reach OPA (with the
    refusal: where no OPA runs, that is the probe doing its job)."""
    applied, skipped = [], {}
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        name = f"{obj['kind']} {obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        if not kube.serves(obj["apiVersion"], obj["kind"]):
            if group not in CHART_CRD_GROUPS:
                raise AssertionError(f"{obj['apiVersion']} {obj['kind']} is served by no API "
                                     f"server or chart the platform installs")
            skipped[name] = (f"custom resource; its CRD comes with the "
                             f"{CHART_CRD_GROUPS[group]} chart")
            continue
        probe = (obj["kind"] == "ConfigMap"
                 and obj["metadata"]["name"] == opa_admission.REACHABILITY_PROBE)
        try:
            if probe:
                applied.append(apply_probe(kube, obj))
            else:
                applied.append(kube.apply(obj, TEST_MANAGER))
        except ApiError as error:
            if not (probe and error.status == 500 and "failed calling webhook" in error.message):
                raise
            skipped[name] = f"refused: {error.message}"
    return applied, skipped


def apply_probe(kube: Kube, probe: dict, within: float = 15.0) -> dict:
    """The reachability probe, applied as a dry run until its webhook refuses it or `within`
    seconds pass, then for real: the API server calls a webhook only once it has loaded the
    configuration just applied, which a busy one does a moment later."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        kube.apply(probe, TEST_MANAGER, dry_run=True)
        time.sleep(0.5)
    return kube.apply(probe, TEST_MANAGER)


def stored_differences(declared: dict, stored: Any, path: str = "") -> list[str]:
    """Where what the API server stores differs from what the program declares: every value
    the program sets, compared as stored (the API server, its defaulting and a webhook may add
    fields, and leave out one at its zero value, and those are not differences; a number
    stored as a string is). A Secret's
    `stringData` is compared with its `data`, where the API server keeps it, encoded."""
    if isinstance(declared, dict):
        if not isinstance(stored, dict):
            return [f"{path or '.'}: declared {declared!r}, stored {stored!r}"]
        differences = []
        for key, value in declared.items():
            if key == "stringData" and path == "":
                encoded = {k: base64.b64encode(v.encode()).decode() for k, v in value.items()}
                differences += stored_differences(encoded, stored.get("data"), ".data")
                continue
            if key not in stored:
                # The API server leaves out a field at its zero value (`omitempty`).
                if value not in (False, 0, "", [], {}, None):
                    differences.append(f"{path}.{key}: declared {value!r}, not stored")
                continue
            differences += stored_differences(value, stored[key], f"{path}.{key}")
        return differences
    if isinstance(declared, list):
        if not isinstance(stored, list) or len(stored) != len(declared):
            return [f"{path}: declared {declared!r}, stored {stored!r}"]
        return [d for index, (a, b) in enumerate(zip(declared, stored, strict=True))
                for d in stored_differences(a, b, f"{path}[{index}]")]
    if declared != stored or type(declared) is not type(stored):
        return [f"{path}: declared {declared!r} ({type(declared).__name__}), stored {stored!r} "
                f"({type(stored).__name__})"]
    return []


def read_back_differences(kube: Kube, objects: list[dict]) -> dict[str, list[str]]:
    """For each object, as the API server now stores it, where it differs from `objects`."""
    found = {}
    for obj in objects:
        meta = obj["metadata"]
        stored = kube.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        if differences := stored_differences(obj, stored):
            found[f"{obj['kind']} {meta.get('namespace')}/{meta['name']}"] = differences
    return found


def find(objects: list[dict], kind: str, name: str) -> dict:
    """The one declared object of `kind` named `name`, or of OPA's generation named after it
    (`<name>-<generation>`)."""
    def named(actual: str) -> bool:
        return actual == name or re.fullmatch(rf"{re.escape(name)}-g[0-9a-f]{{9}}",
                                               actual) is not None
    found = [o for o in objects if o["kind"] == kind and named(o["metadata"]["name"])]
    assert len(found) == 1, f"expected one declared {kind} {name}, found {len(found)}"
    return copy.deepcopy(found[0])
