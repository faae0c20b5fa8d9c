"""The simulated GPU nodes of a playground: their names and the labels a topology needs."""

from __future__ import annotations

from dataclasses import dataclass

from components.platform.settings import StackSettings


@dataclass(frozen=True)
class SimulatedNode:
    name: str
    labels: dict[str, str]


def simulated_nodes(settings: StackSettings, count: int,
                    nodes_per_domain: int) -> list[SimulatedNode]:
    """`count` GPU nodes: the stack's own node names first (those it taints by name), then
    gpu-node-<n>. Under a topology (`teams.topology`), every node carries each level's label:
    `nodes_per_domain` nodes share a domain of the lowest level above the node, and each level
    above groups two domains of the one below, so a gang has racks to fit into and racks it
    cannot span."""
    names = list(settings.gpu_nodes.names[:count])
    number = 1
    while len(names) < count:
        if f"gpu-node-{number}" not in names:
            names.append(f"gpu-node-{number}")
        number += 1
    levels = settings.teams.topology.node_levels[:-1] if settings.teams.enabled else []
    nodes = []
    for index, name in enumerate(names):
        labels, size = {}, nodes_per_domain
        for level in reversed(levels):
            labels[level] = f"{level.rsplit('/', 1)[-1]}-{index // size}"
            size *= 2
        nodes.append(SimulatedNode(name, labels))
    return nodes
