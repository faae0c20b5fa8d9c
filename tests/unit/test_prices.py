"""Showback's price keys against the GPU models GPU Feature Discovery labels nodes with, and node
group prices' selectors against the nodes' labels (the preview's check,
tests/integration/test_cluster_survey.py, reads them from a real API server)."""

from components.monitoring.prices import price_findings
from components.monitoring.settings import UsageSettings

SPOT = {"karpenter.sh/capacity-type": "spot"}


def node(product: str | None, **labels: str) -> dict:
    if product:
        labels["nvidia.com/gpu.product"] = product
    return {"metadata": {"name": "n", "labels": labels}}


def usage(prices: dict[str, float], groups: list[dict] | None = None) -> UsageSettings:
    return UsageSettings.model_validate({"pricePerGpuHour": prices,
                                         "nodeGroupPrices": groups or []})


def test_a_key_is_the_exporters_model_name_whatever_the_gpus_sharing():
    nodes = [node("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"), node("NVIDIA-H100-80GB-HBM3-SHARED"),
             node("NVIDIA-L4"), node(None)]
    found = price_findings(usage({"NVIDIA A100-SXM4-80GB": 2.0, "NVIDIA H100 80GB HBM3": 3.0,
                                  "NVIDIA L4": 0.5}), nodes)
    assert found.problems == found.warnings == []


def test_a_key_that_names_no_gpu_of_the_nodes_is_a_problem_naming_theirs():
    found = price_findings(usage({"H100": 3.0, "NVIDIA L4": 0.5}),
                           [node("NVIDIA-L4"), node("NVIDIA-H100-80GB-HBM3")])
    [problem] = found.problems
    assert problem.startswith("gpu-platform:monitoring.usage.pricePerGpuHour.H100 = 3.0: names "
                              "no GPU model of the cluster's nodes")
    assert problem.endswith("(the nodes': NVIDIA-H100-80GB-HBM3, NVIDIA-L4)")


def test_a_node_groups_keys_are_checked_and_a_selector_matching_no_node_is_warned_of():
    """A spot group priced under a model name the nodes do not report stops the preview; a
    reserved group that has no node now (scaled to nothing) is only a warning."""
    found = price_findings(usage({}, [
        {"nodeSelector": SPOT, "pricePerGpuHour": {"H100 80GB": 1.2}},
        {"nodeSelector": {"eks.amazonaws.com/nodegroup": "h100-reserved"},
         "pricePerGpuHour": {"NVIDIA H100 80GB HBM3": 2.9}}]),
        [node("NVIDIA-H100-80GB-HBM3", **SPOT)])
    [problem] = found.problems
    assert problem.startswith("gpu-platform:monitoring.usage.nodeGroupPrices[0].pricePerGpuHour."
                              "H100 80GB = 1.2: names no GPU model of the cluster's nodes")
    assert found.warnings == [
        "gpu-platform:monitoring.usage.nodeGroupPrices[1].nodeSelector = "
        "{'eks.amazonaws.com/nodegroup': 'h100-reserved'}: matches no node of the cluster now; "
        "its prices apply once such nodes join"]


def test_nodes_not_labelled_yet_leave_the_keys_unchecked_with_a_warning():
    found = price_findings(usage({"H100": 3.0}), [node(None)])
    assert found.problems == []
    assert "were not checked" in found.warnings[0]
    assert price_findings(usage({}), [node("NVIDIA-L4")]).warnings == []
