"""In a preview, with teams on: the Kueue the cluster runs (`teams.kueue.mode: existing`: its
API, its Deployment's image, the Configuration it mounts, the team namespaces' labels, its
metrics Service, and the queues, flavors, Topologies and team workloads it already has) and,
with a topology, the GPU nodes' labels of its levels, read as the context's user and checked by
components/teams/existing_kueue.py; existing_stacks.py reports what it finds before anything is
declared."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from ..base.facts import KUEUE_API
from ..base.model import ClusterReads, Read
from ..platform.settings import StackSettings
from ..platform.wiring import component_inputs
from ..teams.existing_kueue import (
    CONFIGURATION_KEY,
    MANAGER_CONTAINER,
    Findings,
    FoundKueue,
    FoundQueues,
    findings,
    topology_findings,
)
from .cluster import ClusterError, ClusterReader, ClusterUnreachable, NotAllowed
from .conflicts import NODES


class KueueReads:
    """What a preview reads for the teams, each a Read (the preview identity's RBAC is made of
    them)."""

    def __init__(self, settings: StackSettings):
        teams = settings.teams
        namespace = teams.kueue.namespace
        self.team_namespaces = list(teams.team_namespaces)
        self.deployments = Read("apps/v1", "deployments", namespace=namespace)
        # The ConfigMap Kueue's Deployment mounts, whose name the Deployment tells.
        self.config_maps = Read("v1", "configmaps", namespace=namespace, verb="get")
        self.services = Read("v1", "services", namespace=namespace)
        self.namespaces = [Read("v1", "namespaces", name=n) for n in self.team_namespaces]
        self.cluster_queues = Read(KUEUE_API, "clusterqueues")
        self.flavors = Read(KUEUE_API, "resourceflavors")
        self.topologies = Read(KUEUE_API, "topologies")
        self.local_queues = [Read(KUEUE_API, "localqueues", namespace=n)
                             for n in self.team_namespaces]
        self.workloads = [Read(KUEUE_API, "workloads", namespace=n)
                          for n in self.team_namespaces]
        self.existing = not teams.kueue.installs_chart
        self.topology = bool(teams.topology.node_levels)

    def all(self) -> list[Read]:
        """The reads this stack's preview makes."""
        reads = [NODES] if self.topology else []
        if self.existing:
            reads += [self.deployments, self.config_maps, self.services, *self.namespaces,
                      self.cluster_queues, self.flavors, *self.local_queues, *self.workloads,
                      *([self.topologies] if self.topology else [])]
        return reads


def _manager_image(deployment: dict) -> str | None:
    containers = deployment["spec"]["template"]["spec"].get("containers") or []
    manager = next((c for c in containers if c.get("name") == MANAGER_CONTAINER),
                   containers[0] if containers else {})
    return manager.get("image")


class _Reading:
    """Reads through `reader`, noting each read the identity may not make, with what it left
    unchecked."""

    def __init__(self, reader: ClusterReads):
        self.reader, self.unread = reader, []

    def __call__(self, read: Read, unchecked: str, name: str | None = None) -> Any:
        try:
            if read.rbac_verb == "get":
                return self.reader.get(read.path(name))
            return self.reader.items(read.path())
        except NotAllowed as refused:
            self.unread.append(f"not checked: {unchecked} ({refused}); the preview's "
                               f"identity needs to {read.rule}")
            return None

    def each(self, reads: list[Read], unchecked: str,
             keep: Callable[[Any], Any] = lambda found: found) -> list | None:
        """Every read's items (or object), or None if one was refused."""
        found = [self(read, unchecked) for read in reads]
        if any(f is None and r.rbac_verb == "list" for f, r in zip(found, reads, strict=True)):
            return None
        return [keep(f) for f in found]


def read_queues(read: _Reading, reads: KueueReads) -> FoundQueues:
    def items(many: list | None) -> list[dict] | None:
        return None if many is None else [item for batch in many for item in batch]
    return FoundQueues(
        cluster_queues=read(reads.cluster_queues, "whether the cluster's ClusterQueues clash "
                            "with the teams' or share their cohort"),
        flavors=read(reads.flavors, "whether the cluster's ResourceFlavors clash with the "
                     "teams'"),
        topologies=(read(reads.topologies, "whether the cluster's Topologies clash with the "
                         "teams'") if reads.topology else None),
        local_queues=items(read.each(reads.local_queues, "whether the team namespaces have "
                                     "LocalQueues of their own")),
        workloads=items(read.each(reads.workloads, "which queues the team namespaces' "
                                  "workloads name")))


def read_kueue(reader: ClusterReads, reads: KueueReads, service_account: str) -> FoundKueue:
    """What the cluster shows of the Kueue of `reads`' namespace that runs as
    `service_account`."""
    read = _Reading(reader)
    try:
        api_served: bool | None = reader.get(f"/apis/{KUEUE_API}") is not None
    except NotAllowed as refused:
        api_served = None
        read.unread.append(f"not checked: whether the cluster serves {KUEUE_API} ({refused})")
    labels = {name: (found.get("metadata") or {}).get("labels") or {}
              for name, found in zip(reads.team_namespaces, read.each(
                  reads.namespaces, "managedJobsNamespaceSelector against the team namespaces' "
                  "own labels (matched against the labels the program gives them only)")
                  or [], strict=False) if found}
    queues = read_queues(read, reads) if api_served is not False else None
    services = read(reads.services, "whether the platform's scrape finds Kueue's metrics")
    deployments = read(reads.deployments, "Kueue's version and Configuration")
    if deployments is None:
        return FoundKueue(api_served, deployments_read=False, namespace_labels=labels,
                          unread=read.unread, queues=queues, services=services)
    kueue = next((d for d in deployments if service_account in (
        d["spec"]["template"]["spec"].get("serviceAccountName"),
        d["spec"]["template"]["spec"].get("serviceAccount"))), None)
    if kueue is None:
        return FoundKueue(api_served, namespace_labels=labels, unread=read.unread,
                          queues=queues, services=services)
    deployment = f"Deployment {reads.deployments.namespace}/{kueue['metadata']['name']}"
    # Its Configuration: the ConfigMap it mounts that holds Kueue's file, or none (defaults).
    configuration: dict | None = {}
    source = f"{deployment} mounts none: Kueue's defaults"
    for volume in kueue["spec"]["template"]["spec"].get("volumes") or []:
        name = (volume.get("configMap") or {}).get("name")
        if not name:
            continue
        unread = len(read.unread)
        config_map = read(reads.config_maps, f"Kueue's Configuration (ConfigMap "
                          f"{reads.config_maps.namespace}/{name}): none of what the teams need "
                          f"of it", name=name)
        if len(read.unread) > unread:
            configuration = None
            break
        text = ((config_map or {}).get("data") or {}).get(CONFIGURATION_KEY)
        if text is not None:
            configuration = yaml.safe_load(text) or {}
            source = f"ConfigMap {reads.config_maps.namespace}/{name}, {CONFIGURATION_KEY}"
            break
    return FoundKueue(api_served, deployment=deployment, image=_manager_image(kueue),
                      configuration=configuration, configuration_source=source,
                      namespace_labels=labels, unread=read.unread, queues=queues,
                      services=services)


def existing_kueue_findings(settings: StackSettings) -> Findings:
    """What the preview says of the cluster's Kueue (with `teams.kueue.mode: existing`) and,
    with a topology, of the GPU nodes' labels. An unreachable cluster raises ClusterError."""
    teams = settings.teams
    reads = KueueReads(settings)
    if not teams.enabled or not reads.all():
        return Findings()
    inputs = component_inputs(settings).teams
    try:
        with ClusterReader(settings.cluster) as reader:
            found = (read_kueue(reader, reads, teams.kueue.existing.service_account)
                     if reads.existing else None)
            nodes_read = _Reading(reader)
            nodes = (nodes_read(NODES, "whether the GPU nodes carry teams.topology's labels")
                     if reads.topology else None)
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    result = findings(inputs, found) if found else Findings()
    result.warnings += [f"teams.topology: {unread}" for unread in nodes_read.unread]
    return result.add(topology_findings(inputs, found.configuration if found else None, nodes))
