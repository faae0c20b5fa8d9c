"""The benchmark's figures (docs/benchmarks) were measured with the shipped scheduler
configuration: this fails if it drops or changes a setting they depend on, so that the pages are
measured again before they are believed."""

from components.binpack_scheduler.manifests import scheduler_configuration
from tests.kit import harness
from tests.kit.harness import scheduler_of


def shipped() -> dict:
    return scheduler_configuration(scheduler_of(harness.example_settings()))


def test_the_shipped_configuration_is_the_one_the_figures_were_measured_with():
    config = shipped()
    # Every feasible node scored: the packing figures and the cost of scoring every node.
    assert config["percentageOfNodesToScore"] == 100
    # The client rates the bursts were placed at (docs/benchmarks/scheduling.md).
    assert config["clientConnection"] == {"qps": 200, "burst": 400}
    [profile] = config["profiles"]
    assert profile["plugins"]["score"]["disabled"] == [
        {"name": "NodeResourcesBalancedAllocation"}, {"name": "ImageLocality"}]
    fit = next(c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit")
    assert fit["scoringStrategy"] == {
        "type": "RequestedToCapacityRatio",
        "resources": [{"name": "nvidia.com/gpu", "weight": 10}, {"name": "cpu", "weight": 1},
                      {"name": "memory", "weight": 1}],
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                               {"utilization": 100, "score": 10}]}}
