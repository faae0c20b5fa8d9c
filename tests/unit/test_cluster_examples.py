"""The example stacks per kind of cluster (docs/operators/examples/Pulumi.<kind>.yaml), each as
docs/operators/managed-clusters.md presents it: read by Pulumi's own loader, deployed under the
mocks, and with the GPU Operator's parts on or off as that kind of cluster needs."""

from pathlib import Path

import pytest

from tests.kit import harness

K8S = "kubernetes:"
EXAMPLES = harness.ROOT / "docs" / "operators" / "examples"
MANAGED_CLUSTERS = harness.ROOT / "docs" / "operators" / "managed-clusters.md"
# What each kind of cluster already runs on its GPU nodes decides what the operator installs:
# (driver, toolkit, device plugin).
OPERATOR_PARTS = {
    "eks-al2023": (False, False, True),          # the AMI has the driver and the toolkit
    "eks-bottlerocket": (False, False, False),   # the host has those and its device plugin
    "gke": (False, True, True),                  # GKE installs the driver; its plugin is off
    "aks": (True, True, True),                   # node pools made with --gpu-driver none
    "on-prem": (True, True, True),
}


def example_stacks() -> list[str]:
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                  for p in EXAMPLES.glob("Pulumi.*.yaml") if p.name != "Pulumi.minimal.yaml")


def test_every_kind_of_cluster_has_an_example_and_the_page_names_it():
    assert example_stacks() == sorted(OPERATOR_PARTS)
    page = MANAGED_CLUSTERS.read_text()
    for kind in OPERATOR_PARTS:
        assert f"(examples/Pulumi.{kind}.yaml)" in page, f"managed-clusters.md names no {kind}"


@pytest.mark.parametrize("kind", sorted(OPERATOR_PARTS))
def test_the_example_loads_and_deploys_with_the_operator_parts_the_cluster_needs(
        kind: str, tmp_path: Path):
    (tmp_path / "Pulumi.yaml").write_text((harness.ROOT / "Pulumi.yaml").read_text())
    (tmp_path / f"Pulumi.{kind}.yaml").write_text((EXAMPLES / f"Pulumi.{kind}.yaml").read_text())
    stack = harness.pulumi_stacks(tmp_path)[kind]
    assert not stack.warnings and not stack.secret_keys
    recording = harness.run_program(stack.config)
    values = recording.one(f"{K8S}helm.sh/v3:Release", "gpu-operator").inputs["values"]
    assert (values["driver"]["enabled"], values["toolkit"]["enabled"],
            values["devicePlugin"]["enabled"]) == OPERATOR_PARTS[kind]
