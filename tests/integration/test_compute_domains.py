"""Pods that join a ComputeDomain (multi-node NVLink) on the DRA path, decided by the API server
itself: kube-apiserver 1.37.2 with the ValidatingAdmissionPolicy and binding the program declares
for a stack with teams on the DRA path. The claim templates are shaped as NVIDIA's
compute-domain controller makes them (kubernetes-sigs/dra-driver-nvidia-gpu: its label with the
domain's UID, a channel request, the ComputeDomainChannelConfig); no OPA, Kueue or driver runs,
as the policy reads only the pod and the namespace's templates."""

from collections.abc import Iterator

import pytest

from components.base.facts import (
    COMPUTE_DOMAIN_LABEL,
    COMPUTE_DOMAIN_TARGET_LABEL,
    GFD_CLIQUE_LABEL,
    GPU_RESOURCE,
    REQUIRED_TOPOLOGY,
)
from components.opa_admission.compute_domains import POLICY_NAME
from tests.kit import harness, tools
from tests.kit.cluster.controlplane import ApiError, Kube, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, TestCertificates, declared
from tests.kit.cluster.nodes_and_pods import ensure_namespace
from tests.kit.stacks import with_changes

KUBERNETES = tools.DRA_KUBERNETES_VERSION
TEAM, NO_TEAM = "research", "team-a"
TEMPLATE = "imex-channel"


STACK_FILE = with_changes(
    kubernetesVersion=KUBERNETES, gpuOperator={"gpuPath": "dra"},
    teams={"enabled": True, "gpuPodsOutsideTeams": "admit",
           "teams": [{"name": TEAM, "namespaces": [TEAM], "quota": {"gpu": {GPU_RESOURCE: 8}}}]})


def policy_objects(settings_file: dict) -> list[dict]:
    config = harness.stack_file_config(settings_file)
    inputs = harness.inputs_of(harness.settings_of(config))
    objects = declared(harness.run_program(config), TestCertificates(inputs.admission)).objects
    return [o for o in objects if o["metadata"]["name"] == POLICY_NAME]


@pytest.fixture(scope="module")
def kube(control_plane) -> Iterator[Kube]:
    kube = control_plane.admin
    for namespace in (TEAM, NO_TEAM):
        ensure_namespace(kube, namespace)
        kube.create(channel_template(namespace))
    apply_policy(kube, STACK_FILE, f"nodeSelector on {GFD_CLIQUE_LABEL}")
    yield kube


def apply_policy(kube: Kube, settings_file: dict, says: str) -> None:
    """Applies the policy `settings_file` declares; returns once its refusals say `says`."""
    objects = policy_objects(settings_file)
    assert [o["kind"] for o in objects] == ["ValidatingAdmissionPolicy",
                                            "ValidatingAdmissionPolicyBinding"]
    for obj in objects:
        kube.apply(obj, TEST_MANAGER, force=True)
    # The API server compiles the policy and starts enforcing it a moment after the binding.
    wait_until(lambda: says in refused_or_empty(kube, pod("probe", NO_TEAM)),
               "the policy to be in force", timeout=30)


def channel_template(namespace: str) -> dict:
    """A ComputeDomain's workload claim template, as its controller makes it."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": namespace,
                         "labels": {COMPUTE_DOMAIN_LABEL: "5f1c0d2e-domain-uid",
                                    COMPUTE_DOMAIN_TARGET_LABEL: "Workload"}},
            "spec": {"spec": {"devices": {
                "requests": [{"name": "channel", "exactly": {
                    "deviceClassName": "compute-domain-default-channel.nvidia.com"}}],
                "config": [{"requests": ["channel"], "opaque": {
                    "driver": "compute-domain.nvidia.com",
                    "parameters": {"apiVersion": "resource.nvidia.com/v1beta1",
                                   "kind": "ComputeDomainChannelConfig",
                                   "domainID": "5f1c0d2e-domain-uid",
                                   "allocationMode": "Single"}}}]}}}}


def pod(name: str, namespace: str, template: str = TEMPLATE, annotations: dict | None = None,
        node_selector: dict | None = None) -> dict:
    """A training pod with a claim from `template` and a GPU."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "gpu-binpack-scheduler",
                     "nodeSelector": node_selector or {},
                     "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "train", "image": "registry.example.com/train:1",
                                     "resources": {"limits": {GPU_RESOURCE: "4"},
                                                   "claims": [{"name": "channel"}]}}]}}


def refused_or_empty(kube: Kube, manifest: dict) -> str:
    """The API server's refusal of a dry-run create, or '' if it admits it."""
    try:
        kube.create(manifest, dry_run=True)
        return ""
    except ApiError as error:
        return str(error)


def test_a_pod_that_joins_a_compute_domain_without_a_domain_of_its_own_is_refused(kube):
    refusal = refused_or_empty(kube, pod("train-0", NO_TEAM))
    assert "joins the ComputeDomain of claim template imex-channel" in refusal
    assert f"nodeSelector on {GFD_CLIQUE_LABEL}" in refusal
    # A team's pod too, whatever it asks Kueue for: on the DRA path Kueue places no GPU pod.
    assert refused_or_empty(kube, pod("train-0", TEAM, annotations={
        REQUIRED_TOPOLOGY: GFD_CLIQUE_LABEL}))


def test_a_pod_in_one_nvlink_clique_is_admitted(kube):
    assert refused_or_empty(kube, pod("train-0", NO_TEAM,
                                      node_selector={GFD_CLIQUE_LABEL: "9a7c.1"})) == ""


def test_a_team_pod_in_one_nvlink_clique_is_admitted(kube):
    assert refused_or_empty(kube, pod("train-0", TEAM,
                                      node_selector={GFD_CLIQUE_LABEL: "9a7c.1"})) == ""


def test_claims_on_other_templates_are_not_its_business(kube):
    plain = {**channel_template(NO_TEAM), "metadata": {"name": "one-gpu",
                                                        "namespace": NO_TEAM}}
    kube.create(plain)
    assert refused_or_empty(kube, pod("single", NO_TEAM, template="one-gpu")) == ""


