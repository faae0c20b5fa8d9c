"""The teams' queues: GPU flavors, a ClusterQueue per team with its quota, a LocalQueue in each
of its namespaces, and the workload priorities."""

from typing import Any

from ..base import manifests
from ..base.facts import GPU_PRESENT_LABEL, KUEUE_API, KUEUE_DEFAULT_QUEUE
from .inputs import TeamsInputs
from .kueue import namespace_selector
from .settings import POD_FLAVOR, Quota, TeamSettings

COMPONENT = "teams"
# On each team namespace: the team it belongs to.
TEAM_LABEL = "gpu-platform.io/team"


def quota_resources(quota: Quota) -> list[str]:
    return sorted({resource for resources in quota.values() for resource in resources})


# Kueue's Topology of the GPU nodes' network, which the GPU flavors name.
TOPOLOGY_NAME = "gpu-network"
# Kueue's Topology of the node alone, which the flavor of every team's pods names with a topology.
NODE_TOPOLOGY_NAME = "node"
# Every node a kubelet registers carries its OS; a flavor with a topology must select by a label.
NODE_OS_LABEL = ("kubernetes.io/os", "linux")


def _topology(name: str, levels: list[str]) -> dict:
    return {"apiVersion": KUEUE_API, "kind": "Topology",
            "metadata": {"name": name, "labels": manifests.labels(name, COMPONENT)},
            "spec": {"levels": [{"nodeLabel": label} for label in levels]}}


def topologies(inputs: TeamsInputs) -> list[dict]:
    """Kueue's Topologies with the stack's network levels: the network's, the node last, and
    the node's alone; none without levels."""
    levels = inputs.teams.topology.node_levels
    if not levels:
        return []
    return [_topology(TOPOLOGY_NAME, levels), _topology(NODE_TOPOLOGY_NAME, levels[-1:])]


# Every pod a team's workload runs counts as one `pods` on a flavor of any node, with a quota no
# team reaches: Kueue (v0.19.2, quotaCheckStrategy IgnoreUndeclared) gives a pod set no flavor
# when it asks for no resource the queue covers, and then writes an admission with fewer pod sets
# than the workload has, which the API server refuses, so a RayJob's CPU head, a launcher or a
# TrainJob's initializer would keep the whole job waiting. Counting pods gives every pod set a
# flavor. Without a topology the flavor has a resource group of its own and places nothing.
# With one, Kueue places every pod set by topology only where every flavor of the queue names
# one, and gives a pod set one flavor with a topology at most: so the flavor names the node's
# own Topology, selects every node by its OS label, and comes first in the GPU flavors' group
# with no GPUs, where the pod sets that ask for no GPU take it and those that do pass on to a
# GPU flavor. Kueue then places such pods on the fullest nodes whose taints they tolerate: off
# the GPU nodes. A million, as the API server stores it (declared otherwise, every preview would
# show it changed).
POD_QUOTA = "1M"


def pod_flavor(inputs: TeamsInputs) -> dict:
    """The flavor every team's pods count on."""
    spec: dict[str, Any] = {}
    if inputs.teams.topology.node_levels:
        spec = {"nodeLabels": dict([NODE_OS_LABEL]), "topologyName": NODE_TOPOLOGY_NAME}
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
            "metadata": {"name": POD_FLAVOR, "labels": manifests.labels(POD_FLAVOR, COMPONENT)},
            "spec": spec}


def resource_flavor(inputs: TeamsInputs, name: str, node_labels: dict[str, str]) -> dict:
    """A flavor of GPU node: its labels (every GPU node's, and the flavor's own), and the
    tolerations of the GPU taints, which Kueue gives the pods it admits on it. With a topology,
    it names it: Kueue then admits the flavor's workloads only where all their pods fit, and
    pins each pod to the node it counted it on (the binpack scheduler binds it there; Kueue
    picks the fullest node that fits, so single-node work still packs)."""
    spec: dict[str, Any] = {
        "nodeLabels": {GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1], **node_labels},
        "tolerations": [taint.toleration() for taint in inputs.gpu_nodes.taints]}
    if inputs.teams.topology.node_levels:
        spec["topologyName"] = TOPOLOGY_NAME
    return {
        "apiVersion": KUEUE_API, "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": manifests.labels(name, COMPONENT)},
        "spec": spec,
    }


def cluster_queue(inputs: TeamsInputs, team: TeamSettings) -> dict:
    """A team's ClusterQueue: its quota of each GPU resource on each flavor, with its borrowing
    and lending limits, in the cohort. Borrowed GPUs are reclaimed when their lender needs them
    (reclaimWithinCohort: Any); within the team, a workload of a higher WorkloadPriorityClass
    preempts lower ones; a team never preempts another's workloads within their quota."""
    teams = inputs.teams
    resources = quota_resources(team.quota)
    flavors = []
    for flavor in teams.flavors:
        if flavor.name not in team.quota:
            continue
        quotas = []
        for resource in resources:
            # Quantities as the API server stores them (Kueue's webhook writes them back as
            # strings): declared as numbers, every preview would show them changed.
            entry: dict[str, Any] = {
                "name": resource, "nominalQuota": str(team.quota[flavor.name].get(resource, 0))}
            for key, limits in (("borrowingLimit", team.borrowing_limit),
                                ("lendingLimit", team.lending_limit)):
                if resource in limits.get(flavor.name, {}):
                    entry[key] = str(limits[flavor.name][resource])
            quotas.append(entry)
        flavors.append({"name": flavor.name, "resources": quotas})
    pods = {"name": "pods", "nominalQuota": POD_QUOTA}
    if teams.topology.node_levels:
        # One group: the pod flavor first, with no GPUs (POD_QUOTA above).
        groups = [{"coveredResources": [*resources, "pods"], "flavors": [
            {"name": POD_FLAVOR, "resources": [
                *({"name": resource, "nominalQuota": "0"} for resource in resources), pods]},
            *({**flavor, "resources": [*flavor["resources"], pods]} for flavor in flavors)]}]
    else:
        groups = [{"coveredResources": resources, "flavors": flavors},
                  {"coveredResources": ["pods"], "flavors": [
                      {"name": POD_FLAVOR, "resources": [pods]}]}]
    return {
        "apiVersion": KUEUE_API, "kind": "ClusterQueue",
        "metadata": {"name": team.name, "labels": manifests.labels(team.name, COMPONENT)},
        "spec": {
            "cohortName": teams.cohort,
            "namespaceSelector": namespace_selector(team.namespaces),
            "queueingStrategy": team.queueing_strategy,
            "resourceGroups": groups,
            "preemption": {"reclaimWithinCohort": "Any",
                           "borrowWithinCohort": {"policy": "Never"},
                           "withinClusterQueue": "LowerPriority"},
            "fairSharing": {"weight": str(team.fair_sharing_weight)},
        },
    }


def team_namespace(team: TeamSettings, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {TEAM_LABEL: team.name}}}


def local_queue(team: TeamSettings, namespace: str) -> dict:
    """The queue of a team namespace, named as Kueue names the queue of workloads that name
    none."""
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue",
            "metadata": {"name": KUEUE_DEFAULT_QUEUE, "namespace": namespace,
                         "labels": manifests.labels(KUEUE_DEFAULT_QUEUE, COMPONENT)},
            "spec": {"clusterQueue": team.name}}


def workload_priority_classes(inputs: TeamsInputs) -> list[dict]:
    return [{"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
             "metadata": {"name": c.name, "labels": manifests.labels(c.name, COMPONENT)},
             "value": c.value, "description": c.description}
            for c in inputs.teams.workload_priority_classes]
