"""`teams.topology`: the network levels of the GPU nodes, declared as Kueue's Topology, which the
GPU flavors name so that Kueue places a job's pods in one domain (tests/integration/
test_topology.py shows where they land). Here: what is declared, and the settings refused."""

import pytest

from components.base.facts import KUEUE_API
from components.base.validation import SettingsError
from components.platform.config import load_settings
from components.teams.settings import POD_FLAVOR
from tests.kit.harness import run_program, stack_file_config
from tests.kit.stacks import TEAMS, raw, with_changes

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


def levels_of(run, name: str = "gpu-network") -> list[str]:
    [topology] = [t for t in run.of_type(TOPOLOGY) if t.inputs["metadata"]["name"] == name]
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


def test_every_flavor_is_counted_by_a_topology_once_it_exists():
    run = declared({"levels": ["example.com/rack"]}, TWO_FLAVORS)
    topologies = {t.inputs["metadata"]["name"]: t for t in run.of_type(TOPOLOGY)}
    assert levels_of(run, "node") == ["kubernetes.io/hostname"]
    flavors = {f.name: f for f in run.of_type(FLAVOR)}
    assert set(flavors) == {"h100", "a100", POD_FLAVOR}
    # Kueue places a queue's pod sets by topology only where every flavor names one: the GPU
    # flavors the network's, the flavor of the pods that ask for no GPU the node's alone, over
    # every node (a flavor with a topology must select by a label).
    for name, flavor in flavors.items():
        named = flavor.inputs["spec"]["topologyName"]
        assert named == ("node" if name == POD_FLAVOR else "gpu-network")
        assert topologies[named].urn in flavor.dependencies
    assert flavors[POD_FLAVOR].inputs["spec"]["nodeLabels"] == {"kubernetes.io/os": "linux"}
    # Kueue refuses changed levels: a change replaces the Topology.
    for topology in topologies.values():
        assert topology.replace_on_changes == ("spec",) and topology.delete_before_replace


def test_with_a_topology_a_pod_set_without_gpus_takes_the_pod_flavor_in_the_gpu_group():
    run = declared({"levels": ["example.com/rack"]}, TWO_FLAVORS)
    for queue in run.of_type(f"kubernetes:{KUEUE_API}:ClusterQueue"):
        # Kueue gives a pod set one flavor of a group, the first that fits: no GPU fits the pod
        # flavor, every pod does.
        assert queue.inputs["spec"]["resourceGroups"] == [{
            "coveredResources": ["nvidia.com/gpu", "pods"],
            "flavors": [
                {"name": POD_FLAVOR, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "0"},
                                                   {"name": "pods", "nominalQuota": "1M"}]},
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4"},
                                               {"name": "pods", "nominalQuota": "1M"}]}]}]


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
