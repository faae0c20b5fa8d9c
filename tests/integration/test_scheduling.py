"""The binpack scheduler packs: the real kube-scheduler running exactly the configuration the
program renders (from its ServiceAccount, with its RBAC), next to a kube-scheduler with the
default profile, placing GPU pods on fake GPU nodes one at a time."""

from collections import Counter

import pytest

from tests.kit.cluster.kube_components import DEFAULT_SCHEDULER as DEFAULT
from tests.kit.cluster.nodes_and_pods import create_gpu_node, ensure_namespace, placement, pod

NAMESPACE = "training"


@pytest.fixture(scope="module")
def cluster(control_plane_with_schedulers):
    ensure_namespace(control_plane_with_schedulers.admin, NAMESPACE)
    return control_plane_with_schedulers


class Scenario:
    """Fake GPU nodes, then GPU pods submitted one by one to one scheduler; records where each
    landed. Removes its pods and nodes afterwards, so scenarios do not see each other."""

    def __init__(self, cp, settings, nodes: dict[str, int]):
        self.kube, self.settings, self.nodes = cp.admin, settings, nodes
        self.pods: list[str] = []

    def __enter__(self):
        for name, gpus in self.nodes.items():
            create_gpu_node(self.kube, self.settings, name, gpus)
        return self

    def submit(self, scheduler: str, gpus: list[int], prefix: str) -> list[str | None]:
        placed = []
        for i, n in enumerate(gpus):
            name = f"{prefix}-{i}-{n}gpu"
            self.kube.create(pod(name, NAMESPACE, gpus=n, scheduler=scheduler,
                                 settings=self.settings))
            self.pods.append(name)
            placed.append(placement(self.kube, NAMESPACE, name))
        return placed

    def preload(self, node: str, gpus: int) -> None:
        """A pod already running on `node` (bound directly, as if scheduled earlier)."""
        name = f"running-on-{node}"
        self.kube.create(pod(name, NAMESPACE, gpus=gpus, settings=self.settings, node_name=node))
        self.pods.append(name)

    def clear(self) -> None:
        for name in self.pods:
            self.kube.delete("v1", "Pod", name, NAMESPACE)
        self.pods.clear()

    def __exit__(self, *exc):
        self.clear()
        for name in self.nodes:
            self.kube.delete("v1", "Node", name)


def gpus_per_node(placed: list[str | None], gpus: list[int]) -> dict[str, int]:
    used: Counter = Counter()
    for node, n in zip(placed, gpus, strict=True):
        used[node] += n
    return dict(used)


def test_binpack_stacks_pods_on_one_node_while_the_default_profile_spreads(cluster,
                                                                           example_settings):
    name = example_settings.scheduler.name
    gpus = [1] * 6
    with Scenario(cluster, example_settings, {"node-a": 8, "node-b": 8, "node-c": 8}) as s:
        binpack = s.submit(name, gpus, "binpack")
        s.clear()
        spread = s.submit(DEFAULT, gpus, "default")
    print(f"\nsix 1-GPU pods on three empty 8-GPU nodes:\n  {name}: {binpack}\n"
          f"  {DEFAULT}: {spread}")
    assert len(set(binpack)) == 1, "the binpack scheduler used more than one node"
    assert sorted(gpus_per_node(spread, gpus).values()) == [2, 2, 2]


def test_binpack_prefers_the_busiest_node_that_fits(cluster, example_settings):
    name = example_settings.scheduler.name
    gpus = [1, 1, 1, 1]
    with Scenario(cluster, example_settings,
                  {"node-quiet": 8, "node-half": 8, "node-busy": 8}) as s:
        s.preload("node-half", 4)
        s.preload("node-busy", 6)
        binpack = s.submit(name, gpus, "binpack")
        s.clear()
        s.preload("node-half", 4)
        s.preload("node-busy", 6)
        spread = s.submit(DEFAULT, gpus, "default")
    print(f"\nfour 1-GPU pods on nodes with 0, 4 and 6 of 8 GPUs busy:\n"
          f"  {name}: {binpack}\n  {DEFAULT}: {spread}")
    # node-busy fills up (6 -> 8), then the next busiest, never the idle node.
    assert binpack == ["node-busy", "node-busy", "node-half", "node-half"]
    assert spread[0] == "node-quiet"
    assert "node-busy" not in spread


def test_fragmentation_example(cluster, example_settings):
    """Two 4-GPU nodes; 2-, 2-, 1- and 1-GPU pods, then a 2-GPU pod. Spreading leaves one free
    GPU on each node, and the 2-GPU pod cannot be placed although two GPUs are free; binpacking
    fills one node and keeps two GPUs together for it."""
    name = example_settings.scheduler.name
    gpus = [2, 2, 1, 1, 2]
    with Scenario(cluster, example_settings, {"node-1": 4, "node-2": 4}) as s:
        binpack = s.submit(name, gpus, "binpack")
        s.clear()
        spread = s.submit(DEFAULT, gpus, "default")
    print(f"\nfragmentation example (pods of {gpus} GPUs on two 4-GPU nodes):\n"
          f"  {name}: {binpack}\n  {DEFAULT}: {spread}")
    assert None not in binpack
    assert sorted(gpus_per_node(binpack, gpus).values()) == [4, 4]
    assert spread[-1] is None, "the default profile placed the last 2-GPU pod"
    assert sorted(gpus_per_node(spread[:-1], gpus[:-1]).values()) == [3, 3]
