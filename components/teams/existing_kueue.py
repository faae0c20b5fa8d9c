"""With `teams.kueue.mode: existing`: whether the Kueue the cluster runs can take the teams'
queues. Pure checks of what a preview read (components/preview/existing_kueue.py reads it):
Kueue's version, from its image, and its Configuration, against the one the program would give
a Kueue it installs (kueue.kueue_configuration). What the teams cannot work without is a
problem (the preview stops); what only makes a feature weaker is a warning."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..base.facts import (
    GPU_PRESENT_LABEL,
    KUEUE_API,
    KUEUE_DEFAULT_QUEUE,
    KUEUE_METRICS_PORT_NAME,
    kueue_metrics_service_labels,
)
from ..base.manifests import PART_OF
from ..base.model import Findings
from ..base.validation import go_duration_seconds
from .inputs import TeamsInputs
from .kueue import kueue_configuration
from .queues import NODE_TOPOLOGY_NAME, TEAM_LABEL, TOPOLOGY_NAME
from .settings import POD_FLAVOR, KueueSettings

# Where Kueue reads its Configuration: the key of the ConfigMap its Deployment mounts, as
# Kueue's manifests (config/components/manager) and its chart (`<fullname>-manager-config`)
# name it; and the container that runs it, in both.
CONFIGURATION_KEY = "controller_manager_config.yaml"
MANAGER_CONTAINER = "manager"
# The Kueue the program pins (teams.kueue.image), which the integration suite runs. Another
# patch release of its minor is supported: it serves the same API (kueue.x-k8s.io/v1beta2) and
# reads the same Configuration, and the admission policy's rules on Kueue's gates, labels and
# updates are written against that minor's webhooks. Another minor may change any of these.
TESTED_VERSION = KueueSettings().image.tag
SUPPORTED_MINOR = tuple(int(n) for n in TESTED_VERSION.lstrip("v").split(".")[:2])
SUPPORTED = f"v{SUPPORTED_MINOR[0]}.{SUPPORTED_MINOR[1]}.x (tested: {TESTED_VERSION})"
_VERSION_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
NAME_LABEL = "kubernetes.io/metadata.name"
MODE = "teams.kueue.mode: existing"


@dataclass(frozen=True)
class FoundKueue:
    """What a preview read of the cluster's Kueue: whether its API is served, its Deployment
    (`namespace/name`) and manager image, its Configuration and where it was read from (Kueue's
    defaults, {}, where its Deployment mounts none), and the labels of the team namespaces that
    exist. None where nothing was found or read (`deployments_read`: whether Kueue's Deployment
    was looked for); `unread` says what the preview's identity was not allowed to read, and
    what that left unchecked."""

    api_served: bool | None = None
    deployments_read: bool = True
    deployment: str | None = None
    image: str | None = None
    configuration: dict | None = None
    configuration_source: str = ""
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)
    queues: FoundQueues | None = None
    services: list[dict] | None = None


@dataclass(frozen=True)
class FoundQueues:
    """Kueue's objects a preview read beside the teams' (None: not read): ClusterQueues,
    ResourceFlavors and Topologies, and the LocalQueues and Workloads of the team namespaces."""

    cluster_queues: list[dict] | None = None
    flavors: list[dict] | None = None
    topologies: list[dict] | None = None
    local_queues: list[dict] | None = None
    workloads: list[dict] | None = None


def image_version(image: str) -> tuple[int, int, int] | None:
    """The version an image's tag names (`registry.k8s.io/kueue/kueue:v0.19.2`, with or without
    a digest), or None when the tag names none."""
    reference = image.split("@", 1)[0]
    name, _, tag = reference.rpartition(":")
    match = _VERSION_TAG.match(tag) if name and "/" not in tag else None
    if not match:
        return None
    major, minor, patch = (int(n) for n in match.groups())
    return major, minor, patch


def version_findings(deployment: str, image: str) -> Findings:
    """Kueue's version, from its manager container's image: another minor than the tested one
    is refused; a tag that names no version is warned of."""
    version = image_version(image)
    if version is None:
        return Findings(warnings=[
            f"{MODE}: Kueue's version was not checked: the image of {deployment}, {image}, "
            f"names none in its tag; supported: {SUPPORTED}"])
    if version[:2] != SUPPORTED_MINOR:
        return Findings(problems=[
            f"{MODE}: {deployment} runs Kueue v{'.'.join(map(str, version))} ({image}); "
            f"supported: {SUPPORTED}, whose API ({KUEUE_API}), Configuration and webhooks the "
            f"teams' queues and the admission policy are written for; fix: upgrade or "
            f"downgrade that Kueue to {SUPPORTED}, or remove it and set teams.kueue.mode: "
            f"install"])
    return Findings()


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects these labels."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        selected = {"In": key in labels and labels[key] in values,
                    "NotIn": key not in labels or labels[key] not in values,
                    "Exists": key in labels,
                    "DoesNotExist": key not in labels}.get(operator, False)
        if not selected:
            return False
    return True


def _setting(configuration: dict, path: str, default: Any = None) -> Any:
    """A field of a Configuration by its dotted path, or `default` (Kueue's) where unset."""
    value: Any = configuration
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return default if value is None else value


def configuration_findings(inputs: TeamsInputs, configuration: dict, source: str,
                           namespace_labels: dict[str, dict[str, str]]) -> Findings:
    """The cluster's Kueue Configuration against what the teams need of it, with Kueue's
    defaults (config.kueue.x-k8s.io/v1beta2) where it sets nothing. `namespace_labels`: the
    labels of the team namespaces that exist already."""
    teams, wanted = inputs.teams, kueue_configuration(inputs)
    found = Findings()
    where = f"Kueue's Configuration ({source})"

    def problem(setting: str, why: str, fix: str) -> None:
        found.problems.append(f"{MODE}: {where}: {setting}: {why}; fix: {fix}, and restart "
                              f"Kueue")

    def weaker(setting: str, why: str) -> None:
        found.warnings.append(f"{MODE}: {where}: {setting}: {why}")

    kueue_namespace = str(configuration.get("namespace") or teams.kueue.namespace)
    selector = _setting(configuration, "managedJobsNamespaceSelector", {"matchExpressions": [
        {"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system", kueue_namespace]}]})
    # A team namespace has the labels it has, and those the program gives it.
    unmanaged = [namespace for namespace, team in teams.team_namespaces.items()
                 if not _selects(selector, {**namespace_labels.get(namespace, {}),
                                            NAME_LABEL: namespace, TEAM_LABEL: team})]
    if unmanaged:
        problem("managedJobsNamespaceSelector",
                f"does not select the team namespaces {', '.join(unmanaged)}: Kueue would "
                f"hold none of their workloads, and the admission policy refuses every GPU pod "
                f"there",
                f"have it select them (each team namespace carries the label {TEAM_LABEL})")
    if _setting(configuration, "manageJobsWithoutQueueName") is not True:
        problem("manageJobsWithoutQueueName",
                "not true: a workload in a team namespace that names no queue is not held by "
                "Kueue, and the admission policy refuses its GPU pods",
                "set it to true, with managedJobsNamespaceSelector selecting only the "
                "namespaces Kueue is to manage (it suspends every Job there that names no "
                "queue)")
    frameworks = _setting(configuration, "integrations.frameworks", ["batch/job"])
    if missing := [f for f in wanted["integrations"]["frameworks"] if f not in frameworks]:
        problem("integrations.frameworks",
                f"lacks {', '.join(missing)}: such GPU workloads in team namespaces would be "
                f"held by no queue, and the admission policy refuses their pods",
                f"add {', '.join(missing)}")
    gates = _setting(configuration, "featureGates", {})
    strategy = _setting(configuration, "resources.quotaCheckStrategy", "BlockUndeclared")
    if strategy != wanted["resources"]["quotaCheckStrategy"] or gates.get(
            "QuotaCheckStrategy") is False:
        problem("resources.quotaCheckStrategy",
                f"{strategy}{' (its feature gate off)' if strategy == 'IgnoreUndeclared' else ''}"
                f": the teams' queues count GPUs only, so a workload that asks for CPU or "
                f"memory would never be admitted",
                "set it to IgnoreUndeclared (and leave the QuotaCheckStrategy feature gate on)")
    mapped = {m.get("name"): m.get("deviceClassNames") or []
              for m in _setting(configuration, "resources.deviceClassMappings", [])}
    for mapping in wanted["resources"].get("deviceClassMappings", []):
        if unmapped := [c for c in mapping["deviceClassNames"]
                        if c not in mapped.get(mapping["name"], [])]:
            problem("resources.deviceClassMappings",
                    f"does not map the DeviceClasses {', '.join(unmapped)} to "
                    f"{mapping['name']}: claims on them would count against no team's quota",
                    f"add {{name: {mapping['name']}, deviceClassNames: "
                    f"[{', '.join(mapping['deviceClassNames'])}]}}")
    if gates.get("DisableWaitForPodsReady") is True:
        weaker("waitForPodsReady", "off (feature gate DisableWaitForPodsReady): a workload "
               "whose pods do not all run keeps its GPUs, instead of giving them back after "
               f"teams.waitForPodsReady ({teams.wait_for_pods_ready})")
    else:
        timeout = str(_setting(configuration, "waitForPodsReady.timeout", "30m"))
        if go_duration_seconds(timeout) != go_duration_seconds(teams.wait_for_pods_ready):
            weaker("waitForPodsReady.timeout",
                   f"{timeout}: a workload whose pods do not all run gives its GPUs back after "
                   f"that, not after teams.waitForPodsReady ({teams.wait_for_pods_ready})")
    if _setting(configuration, "fairSharing") is None:
        weaker("fairSharing", "off: the teams' fairSharingWeight has no effect (GPUs beyond "
               "the quotas go to whichever team asks first)")
    if _setting(configuration, "metrics.enableClusterQueueResources") is not True:
        weaker("metrics.enableClusterQueueResources",
               "not true: the dashboard's team rows have no quota, usage or borrowing")
    return found


def findings(inputs: TeamsInputs, found: FoundKueue) -> Findings:
    """Everything the preview says of the cluster's Kueue."""
    kueue = inputs.teams.kueue
    result = Findings(warnings=[f"{MODE}: {unread}" for unread in found.unread])
    if found.api_served is False:
        result.problems.append(
            f"{MODE}: the cluster serves no {KUEUE_API} (Kueue's CRDs): no supported Kueue is "
            f"installed; fix: install Kueue {SUPPORTED}, or set teams.kueue.mode: install")
    if found.deployment is None:
        if found.deployments_read:
            result.problems.append(
                f"{MODE}: no Deployment in namespace {kueue.namespace} runs as the ServiceAccount "
                f"{kueue.existing.service_account}: no Kueue was found there; fix: set "
                f"teams.kueue.namespace and teams.kueue.existing.serviceAccount to the cluster's "
                f"Kueue's, or teams.kueue.mode: install")
        return result
    if found.image is not None:
        result.add(version_findings(found.deployment, found.image))
    if found.configuration is not None:
        result.add(configuration_findings(inputs, found.configuration,
                                          found.configuration_source, found.namespace_labels))
    if found.queues is not None:
        result.add(queue_findings(inputs, found.queues))
    if found.services is not None:
        result.add(metrics_findings(kueue, found.services))
    return result


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def _namespace(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("namespace", "")


def platforms(obj: dict) -> bool:
    """Whether the object is one the platform declared (its labels say so)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(
        "app.kubernetes.io/part-of") == PART_OF


MIGRATION = "docs/operators/teams.md#moving-a-teams-own-queues-to-the-platform"


def queue_findings(inputs: TeamsInputs, found: FoundQueues) -> Findings:
    """Kueue's objects the cluster has beside those the teams' would be: a name the platform
    would take over (a problem: `pulumi up` would fail on it or rewrite another's queue), a
    queue that shares the teams' cohort, and team workloads that name other queues."""
    teams = inputs.teams
    result = Findings()

    def clash(kind: str, name: str, setting: str, fix: str) -> None:
        result.problems.append(
            f"{MODE}: the cluster has a {kind} {name} that the platform did not declare, and the "
            f"teams' queues declare one of that name ({setting}): `pulumi up` would fail on it "
            f"or take it over; fix: {fix} ({MIGRATION})")

    teams_by_name = {t.name: i for i, t in enumerate(teams.teams)}
    for queue in found.cluster_queues or []:
        name = _name(queue)
        if name in teams_by_name and not platforms(queue):
            clash("ClusterQueue", name, f"teams.teams[{teams_by_name[name]}].name",
                  "rename the team, or move its workloads to the platform's queue and delete "
                  f"ClusterQueue {name} first")
    flavors = {f.name: f"teams.flavors[{i}].name" for i, f in enumerate(teams.flavors)}
    flavors[POD_FLAVOR] = "the flavor every team's pods count on"
    for flavor in found.flavors or []:
        if _name(flavor) in flavors and not platforms(flavor):
            clash("ResourceFlavor", _name(flavor), flavors[_name(flavor)],
                  "rename the platform's flavor, or the cluster's (its ClusterQueues name it)")
    if teams.topology.node_levels:
        for topology in found.topologies or []:
            if _name(topology) in (TOPOLOGY_NAME, NODE_TOPOLOGY_NAME) and not platforms(topology):
                clash("Topology", _name(topology), "teams.topology",
                      "delete or rename the cluster's Topology (its flavors name it)")
    for queue in found.local_queues or []:
        if _name(queue) == KUEUE_DEFAULT_QUEUE and not platforms(queue):
            clash("LocalQueue", f"{_namespace(queue)}/{_name(queue)}",
                  f"the queue of team namespace {_namespace(queue)}",
                  f"move its workloads to the platform's queue, then delete LocalQueue "
                  f"{_namespace(queue)}/{_name(queue)}")
    sharing = sorted(_name(q) for q in found.cluster_queues or []
                     if (q.get("spec") or {}).get("cohortName") == teams.cohort
                     and not platforms(q) and _name(q) not in teams_by_name)
    if sharing:
        result.warnings.append(
            f"{MODE}: ClusterQueues {', '.join(sharing)} of the cluster are in the teams' "
            f"cohort {teams.cohort}: they borrow the teams' idle GPUs and lend theirs, and "
            f"fair sharing weighs them with the teams; set teams.cohort to a cohort of its own "
            f"to keep the teams apart")
    others: dict[str, int] = {}
    for workload in found.workloads or []:
        queue = (workload.get("spec") or {}).get("queueName")
        if queue and queue != KUEUE_DEFAULT_QUEUE:
            key = f"{_namespace(workload)}/{queue}"
            others[key] = others.get(key, 0) + 1
    if others:
        named = ", ".join(f"{queue} ({count})" for queue, count in sorted(others.items()))
        result.warnings.append(
            f"{MODE}: workloads in team namespaces name queues the platform does not manage "
            f"(LocalQueue: workloads): {named}. Kueue admits them against those queues' "
            f"ClusterQueues, not the team's quota; move them: {MIGRATION}")
    return result


def topology_findings(inputs: TeamsInputs, configuration: dict | None,
                      nodes: list[dict] | None) -> Findings:
    """With a topology: Kueue's TopologyAwareScheduling gate (the cluster's Kueue's
    Configuration, when one was read) and the GPU nodes' labels of the levels (when read)."""
    levels = inputs.teams.topology.node_levels
    result = Findings()
    if not levels:
        return result
    if configuration is not None and _setting(
            configuration, "featureGates", {}).get("TopologyAwareScheduling") is False:
        result.problems.append(
            f"{MODE}: Kueue's Configuration turns the feature gate TopologyAwareScheduling off: "
            f"no workload of the teams' queues would be admitted (every flavor names a "
            f"Topology, teams.topology); fix: turn it on (the default since Kueue v0.14), or "
            f"unset teams.topology")
    missing: dict[str, list[str]] = {}
    for node in nodes or []:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(GPU_PRESENT_LABEL[0]) != GPU_PRESENT_LABEL[1]:
            continue
        # The node's own level (kubernetes.io/hostname) every kubelet sets.
        for level in levels[:-1]:
            if level not in labels:
                missing.setdefault(level, []).append(_name(node))
    for level, names in sorted(missing.items()):
        shown = ", ".join(sorted(names)[:5]) + (f" and {len(names) - 5} more"
                                                  if len(names) > 5 else "")
        result.warnings.append(
            f"teams.topology: GPU nodes without the level's label {level}: {shown}. Kueue "
            f"counts them in no domain of the topology and admits no team workload there; fix: "
            f"label them (the tool or cloud of the preset does: docs/concepts/topology.md"
            f"#presets), or choose levels the nodes carry")
    return result


def metrics_findings(kueue: KueueSettings, services: list[dict]) -> Findings:
    """Whether the platform's scrape of Kueue's metrics (the chart's Service labels, by
    `releaseName`) finds a Service in Kueue's namespace."""
    wanted = kueue_metrics_service_labels(kueue.release_name)
    if any(all(((s.get("metadata") or {}).get("labels") or {}).get(k) == v
               for k, v in wanted.items())
           and any(p.get("name") == KUEUE_METRICS_PORT_NAME
                   for p in (s.get("spec") or {}).get("ports") or [])
           for s in services):
        return Findings()
    labels = " ".join(f"{k}={v}" for k, v in wanted.items())
    return Findings(warnings=[
        f"{MODE}: no Service in namespace {kueue.namespace} has the labels the platform's "
        f"scrape of Kueue selects ({labels}, port {KUEUE_METRICS_PORT_NAME}): the dashboard's "
        f"team rows stay empty and KueueUnavailable cannot fire. A Kueue installed from its "
        f"manifests names it controller-manager-metrics-service; fix: `kubectl -n "
        f"{kueue.namespace} label service <its metrics Service> {labels}`, or set "
        f"teams.kueue.releaseName to the Helm release of a Kueue installed with its chart"])
