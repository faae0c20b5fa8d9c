"""The playground's pure parts: which nodes it simulates, what `status` prints, and how bad input
on its command line is answered (its run is tests/integration/test_playground.py)."""

from __future__ import annotations

import pytest

from components.base.gpu_count import DeviceView
from playground import command
from playground.nodes import simulated_nodes
from playground.summary import render
from tests.kit import harness
from tests.kit.stacks import MINIMAL, TEAMS, with_changes

EKS_LEVELS = ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
              "topology.k8s.aws/network-node-layer-3"]


def settings(**sections):
    return harness.settings_of(harness.stack_file_config(with_changes(**sections)))


def test_the_stacks_own_node_names_come_first():
    nodes = simulated_nodes(settings(), 3, nodes_per_domain=2)
    assert [n.name for n in nodes] == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert [n.name for n in simulated_nodes(settings(gpuNodes={"names": ["a100-7"]}), 2, 2)] == \
        ["a100-7", "gpu-node-1"]
    assert all(n.labels == {} for n in nodes), "no topology, no level labels"


def test_under_a_topology_each_level_groups_two_domains_of_the_one_below():
    stack = settings(teams={**TEAMS, "topology": {"preset": "eks"}})
    nodes = simulated_nodes(stack, 5, nodes_per_domain=2)
    lowest, middle, top = reversed(EKS_LEVELS)
    assert [n.labels[lowest] for n in nodes] == [
        "network-node-layer-3-0", "network-node-layer-3-0", "network-node-layer-3-1",
        "network-node-layer-3-1", "network-node-layer-3-2"]
    assert [n.labels[middle] for n in nodes] == ["network-node-layer-2-0"] * 4 + [
        "network-node-layer-2-1"]
    assert {n.labels[top] for n in nodes} == {"network-node-layer-1-0"}


def node(name: str, gpus: int | None, labels: dict[str, str] | None = None) -> dict:
    gpu_labels = {"nvidia.com/gpu.present": "true"} if gpus is not None else {}
    return {"metadata": {"name": name, "labels": {**gpu_labels, **(labels or {})}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}


def pod(name: str, gpus: int, node_name: str | None = None, phase: str = "Running",
        **more) -> dict:
    namespace, _, name = name.partition("/")
    return {"metadata": {"name": name, "namespace": namespace,
                         **({"ownerReferences": [{"kind": "Job", "name": more["job"]}]}
                            if "job" in more else {})},
            "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}
                                     if gpus else {}}],
                     **({"nodeName": node_name} if node_name else {}),
                     **({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}
                        if more.get("gated") else {})},
            "status": {"phase": phase, "conditions": more.get("conditions", [])}}


def test_status_lists_each_gpu_nodes_holders_and_what_waits_with_its_reason():
    nodes = [node("gpu-node-2", 8, {"rack": "rack-1"}), node("gpu-node-1", 8, {"rack": "rack-0"}),
             node("cpu-node-1", None)]
    pods = [pod("team-a/train-0", 2, "gpu-node-1"),
            pod("team-a/finetune-x", 4, "gpu-node-1", job="finetune"),
            pod("team-a/done", 8, "gpu-node-2", phase="Succeeded"),
            pod("team-a/web", 0, "gpu-node-2"),
            pod("vision/notebook-1", 1, gated=True),
            pod("team-a/huge", 16, phase="Pending", conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 2 Insufficient nvidia.com/gpu."}])]
    workloads = [
        {"metadata": {"name": "job-train-2", "namespace": "research",
                      "ownerReferences": [{"kind": "Job", "name": "train-2"}]},
         "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                    "message": "insufficient unused quota, 1 more needed"}]}},
        {"metadata": {"name": "job-old", "namespace": "research"},
         "status": {"conditions": [{"type": "Finished", "status": "True"}]}}]
    assert render(nodes, pods, workloads, ["rack"]) == """\
GPU nodes:
  gpu-node-1           6/8 GPUs in use, 2 free  [rack-0]
    team-a/finetune-x: 4 GPUs (Job finetune)
    team-a/train-0: 2 GPUs
  gpu-node-2           0/8 GPUs in use, 8 free  [rack-1]
Waiting:
  research/job-train-2 (Job train-2): waits for quota: insufficient unused quota, 1 more needed
  team-a/huge: not placed: 0/3 nodes are available: 2 Insufficient nvidia.com/gpu."""


def test_status_of_an_idle_playground():
    assert render([node("gpu-node-1", 8)], [], [], []) == (
        "GPU nodes:\n  gpu-node-1           0/8 GPUs in use, 8 free\nWaiting:\n  nothing")


def test_on_the_dra_path_gpus_are_counted_from_slices_and_the_claims_reserved_for_pods():
    nodes = [node("gpu-node-1", None) | {"metadata": {"name": "gpu-node-1", "labels": {
        "nvidia.com/gpu.present": "true"}}}]
    slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1",
                        "devices": [{"name": f"gpu-{i}"} for i in range(8)]}},
              {"spec": {"driver": "example.com/nic", "nodeName": "gpu-node-1",
                        "devices": [{"name": "nic-0"}]}}]

    def claim(pod_name: str, *drivers: str) -> dict:
        return {"metadata": {"namespace": "team-a"}, "status": {
            "allocation": {"devices": {"results": [{"driver": d} for d in drivers]}},
            "reservedFor": [{"resource": "pods", "name": pod_name}]}}
    claims = [claim("train-0", "gpu.nvidia.com", "gpu.nvidia.com"),
              claim("own-claim", "gpu.nvidia.com", "example.com/nic")]
    pods = [pod("team-a/train-0", 2, "gpu-node-1"), pod("team-a/own-claim", 0, "gpu-node-1")]
    assert render(nodes, pods, [], [], DeviceView(slices, claims, "gpu.nvidia.com")) == """\
GPU nodes:
  gpu-node-1           3/8 GPUs in use, 5 free
    team-a/own-claim: 1 GPU
    team-a/train-0: 2 GPUs
Waiting:
  nothing"""


def test_an_unknown_stack_is_refused_naming_the_stacks_there_are():
    with pytest.raises(SystemExit, match=r"--stack 'prod': no such stack file; allowed: a "
                                         r"stack of the project \(dev\) or the path"):
        command.stack_file("prod")


def test_a_stack_with_a_bad_setting_starts_nothing(tmp_path, capsys):
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(f"config:\n  gpu-platform:cluster: {{context: c}}\n"
                     f"  gpu-platform:kubernetesVersion: '{MINIMAL['kubernetesVersion']}'\n"
                     f"  gpu-platform:gpuNodes: {{names: [n1], gpusPerNode: -8}}\n")
    with pytest.raises(SystemExit, match=r"Pulumi.bad.yaml: invalid stack settings .*\n.*"
                                         r"gpuNodes.gpusPerNode.*-8"):
        command.main(["--stack", str(stack), "--dir", str(tmp_path / "state")])
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("flag", ["--nodes", "--gpus-per-node", "--nodes-per-domain"])
def test_counts_below_one_are_refused(flag, capsys):
    with pytest.raises(SystemExit):
        command.main([flag, "0"])
    assert f"argument {flag}: '0' is not a whole number of at least 1" in \
        capsys.readouterr().err
