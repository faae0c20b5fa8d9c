"""`teams.topology`: the network levels of the GPU nodes, declared as Kueue's Topology, which the
GPU flavors name so that Kueue places a job's pods in one domain (tests/integration/
test_topology.py shows where they land). Here: what is declared, and the settings refused."""

import pytest
from test_settings import TEAMS, raw, with_changes

from components.base.facts import KUEUE_API
from components.base.validation import SettingsError
from components.platform.config import load_settings
from components.teams.settings import POD_FLAVOR
from harness import run_program, stack_file_config

TOPOLOGY = f"kubernetes:{KUEUE_API}:Topology"
FLAVOR = f"kubernetes:{KUEUE_API}:ResourceFlavor"
TWO_FLAVORS = [{"name": "h100", "nodeLabels": {"nvidia.com/gpu.product": "H100"}},
               {"name": "a100", "nodeLabels": {"nvidia.com/gpu.product": "A100"}}]


def declared(topology: dict | None, flavors: list[dict] | None = None):
    teams = {**TEAMS, **({"topology": topology} if topology is not None else {})}
    if flavors:
        teams["flavors"] = flavors
        teams["teams"] = [{**team, "quota": {"h100": {"nvidia.com/gpu": 4}}}
                          for team in TEAMS["teams"]]
    return run_program(stack_file_config(with_changes(teams=teams)))


def levels_of(run) -> list[str]:
    [topology] = run.of_type(TOPOLOGY)
    return [level["nodeLabel"] for level in topology.inputs["spec"]["levels"]]


def test_listed_levels_become_kueues_topology_down_to_the_node():
    run = declared({"levels": ["example.com/block", "example.com/rack"]})
    assert levels_of(run) == ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]


@pytest.mark.parametrize("preset, levels", [
    ("gke", ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
             "cloud.google.com/gce-topology-host"]),
    ("eks", ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
             "topology.k8s.aws/network-node-layer-3"]),
    ("topograph", ["network.topology.nvidia.com/core", "network.topology.nvidia.com/spine",
                   "network.topology.nvidia.com/leaf",
                   "network.topology.nvidia.com/accelerator"]),
    ("nvlink-clique", ["nvidia.com/gpu.clique"]),
])
def test_a_preset_names_the_labels_its_tool_puts_on_the_nodes(preset, levels):
    assert levels_of(declared({"preset": preset})) == [*levels, "kubernetes.io/hostname"]


def test_every_gpu_flavor_is_counted_by_the_topology_once_it_exists():
    run = declared({"levels": ["example.com/rack"]}, TWO_FLAVORS)
    [topology] = run.of_type(TOPOLOGY)
    flavors = run.of_type(FLAVOR)
    # Only the GPU flavors: with a flavor of no topology in the queues, Kueue would admit no
    # pod set on a GPU flavor that asks for no domain.
    assert {f.name for f in flavors} == {"h100", "a100"}
    for flavor in flavors:
        assert flavor.inputs["spec"]["topologyName"] == topology.inputs["metadata"]["name"]
        assert topology.urn in flavor.dependencies
    # Kueue refuses changed levels: a change replaces the Topology.
    assert topology.replace_on_changes == ("spec",) and topology.delete_before_replace


def test_without_a_topology_kueue_chooses_no_nodes():
    run = declared(None)
    assert run.of_type(TOPOLOGY) == []
    assert all("topologyName" not in f.inputs["spec"] for f in run.of_type(FLAVOR))
    # Every pod counts on a flavor of every node, so that a pod set without GPUs has a flavor.
    pods = next(f for f in run.of_type(FLAVOR) if f.name == POD_FLAVOR)
    assert pods.inputs["spec"] == {}
    for queue in run.of_type(f"kubernetes:{KUEUE_API}:ClusterQueue"):
        assert {"coveredResources": ["pods"], "flavors": [{"name": POD_FLAVOR, "resources": [
            {"name": "pods", "nominalQuota": "1M"}]}]} in queue.inputs["spec"]["resourceGroups"]


MISTAKES = [
    ("a preset and levels", {"preset": "gke", "levels": ["example.com/rack"]},
     "gpu-platform:teams.topology.levels", "example.com/rack", "a preset, or levels"),
    ("an unknown preset", {"preset": "azure"},
     "gpu-platform:teams.topology.preset", "azure", "topograph"),
    ("a level twice", {"levels": ["example.com/rack", "example.com/rack"]},
     "gpu-platform:teams.topology.levels[1]", "example.com/rack", "each node label once"),
    ("the node above a rack", {"levels": ["kubernetes.io/hostname", "example.com/rack"]},
     "gpu-platform:teams.topology.levels[0]", "kubernetes.io/hostname", "only last"),
    ("not a label key", {"levels": ["racks of example.com"]},
     "gpu-platform:teams.topology.levels[0]", "racks of example.com", "DNS-subdomain prefix"),
    ("more levels than Kueue takes", {"levels": [f"example.com/level-{n}" for n in range(16)]},
     "gpu-platform:teams.topology.levels", "example.com/level-15", "at most 15"),
]


@pytest.mark.parametrize("topology, setting, value, allowed",
                         [case[1:] for case in MISTAKES], ids=[case[0] for case in MISTAKES])
def test_a_bad_topology_is_named_with_its_value_and_what_is_allowed(topology, setting, value,
                                                                    allowed):
    with pytest.raises(SettingsError) as raised:
        load_settings(raw(with_changes(teams={**TEAMS, "topology": topology})))
    lines = [p for p in raised.value.problems if p.startswith(setting + " ")
             or p.startswith(setting + ":")]
    assert lines, f"no problem names {setting}: {raised.value.problems}"
    assert value in lines[0] and allowed in lines[0], lines[0]
