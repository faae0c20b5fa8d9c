"""Every Kubernetes object the program declares directly validates, strictly, against the
official OpenAPI schema of the stack's Kubernetes version."""

import re

import kubernetes_validate
import pytest

from components.base.facts import KUEUE_API
from tests.kit import harness
from tests.kit.stacks import with_changes

# Kinds whose CRDs the charts install: the official schemas do not cover them. Kueue's are
# applied with Kueue running by the integration suite (test_teams.py).
NOT_COVERED = {("monitoring.coreos.com/v1", "ServiceMonitor"),
               ("monitoring.coreos.com/v1", "PodMonitor"),
               ("monitoring.coreos.com/v1", "PrometheusRule"),
               *((KUEUE_API, kind) for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue",
                                                "WorkloadPriorityClass"))}


def validate(obj: dict, version: str) -> str:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return f"{obj['kind']} {obj['metadata'].get('name')}: {error.message} at " \
               f"{'/'.join(map(str, error.path))}"
    return ""


# The example stack at its own version, and the default stack at the oldest and newest minor
# the program supports.
RUNS = {
    "example": None,
    "oldest 1.30": with_changes(kubernetesVersion="1.30.0"),
    "newest 1.37": with_changes(kubernetesVersion="1.37.0",
                                gpuOperator={"timeSlicing": {"replicas": 4}},
                                scheduler={"replicas": 1}),
}


@pytest.mark.parametrize("settings", RUNS.values(), ids=RUNS.keys())
def test_declared_objects_match_the_official_schema(settings):
    config = harness.example_config() if settings is None else harness.stack_file_config(settings)
    version = config["gpu-platform:kubernetesVersion"]
    objects = harness.run_program(config).manifests()
    covered = [o for o in objects if (o["apiVersion"], o["kind"]) not in NOT_COVERED]
    not_covered = {(o["apiVersion"], o["kind"]) for o in objects} - {
        (o["apiVersion"], o["kind"]) for o in covered}
    # The example stack declares every kind that is not covered (teams on, among others).
    assert not_covered == NOT_COVERED if settings is None else not_covered <= NOT_COVERED
    problems = [p for p in (validate(o, version) for o in covered) if p]
    assert not problems, "\n".join(problems)
    kinds = {o["kind"] for o in covered}
    assert {"Node", "Deployment", "ValidatingWebhookConfiguration", "Secret",
            "ClusterRoleBinding", "PodDisruptionBudget"} <= kinds


def test_validation_catches_a_wrong_field():
    wrong = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
             "datas": {"a": "b"}}
    assert "datas" in validate(wrong, "1.35.10")


# The API server checks what the OpenAPI schema does not: each segment of a webhook's service
# path must be a lowercase RFC 1123 subdomain (so a Rego package with `_` cannot be the path).
RFC1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def test_webhook_service_path_is_one_the_api_server_accepts(example_run):
    (webhook,) = [o for o in example_run.manifests()
                  if o["kind"] == "ValidatingWebhookConfiguration"]
    path = webhook["webhooks"][0]["clientConfig"]["service"]["path"]
    bad = [s for s in path.strip("/").split("/") if not RFC1123_SUBDOMAIN.fullmatch(s)]
    assert path.startswith("/") and not bad, f"path {path}: invalid segments {bad}"
