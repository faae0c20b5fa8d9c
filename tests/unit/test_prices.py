"""Showback's price keys against the GPU models GPU Feature Discovery labels nodes with (the
preview's check, tests/integration/test_cluster_survey.py, reads them from a real API server)."""

from components.monitoring.prices import price_findings


def node(product: str | None) -> dict:
    labels = {"nvidia.com/gpu.product": product} if product else {}
    return {"metadata": {"name": "n", "labels": labels}}


def test_a_key_is_the_exporters_model_name_whatever_the_gpus_sharing():
    nodes = [node("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"), node("NVIDIA-H100-80GB-HBM3-SHARED"),
             node("NVIDIA-L4"), node(None)]
    found = price_findings({"NVIDIA A100-SXM4-80GB": 2.0, "NVIDIA H100 80GB HBM3": 3.0,
                            "NVIDIA L4": 0.5}, nodes)
    assert found.problems == found.warnings == []


def test_a_key_that_names_no_gpu_of_the_nodes_is_a_problem_naming_theirs():
    found = price_findings({"H100": 3.0, "NVIDIA L4": 0.5}, [node("NVIDIA-L4"),
                                                             node("NVIDIA-H100-80GB-HBM3")])
    [problem] = found.problems
    assert problem.startswith("gpu-platform:monitoring.usage.pricePerGpuHour.H100 = 3.0: names "
                              "no GPU model of the cluster's nodes")
    assert problem.endswith("(the nodes': NVIDIA-H100-80GB-HBM3, NVIDIA-L4)")


def test_nodes_not_labelled_yet_leave_the_keys_unchecked_with_a_warning():
    found = price_findings({"H100": 3.0}, [node(None)])
    assert found.problems == []
    assert "were not checked" in found.warnings[0]
    assert price_findings({}, [node("NVIDIA-L4")]).warnings == []
