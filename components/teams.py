"""Teams: Kueue, and a queue with a GPU quota for each team. Kueue admits a team's workloads
against its quota (suspending Jobs and gating pods until then), lends idle quota to the other
teams of the cohort and takes it back when needed, shares what is left by the teams' weights,
and admits a workload all or nothing. It never sets `schedulerName`: the binpack scheduler still
places every GPU pod it admits. docs/concepts/teams.md explains the choices.

The ResourceFlavors are declared first after the release, and Kueue's webhooks decide them: if
the API server cannot reach Kueue, `pulumi up` stops there, naming the webhook, before any queue
or team namespace depends on it.
"""

from typing import Any

import pulumi
import yaml

from . import charts, kube
from .args import TeamsArgs
from .facts import GPU_PRESENT_LABEL
from .inputs import TeamsInputs
from .settings import KUEUE_API, KUEUE_DEFAULT_QUEUE, STACK, Quota, TeamSettings
from .validation import Subject

CHART = "kueue"
COMPONENT = "teams"
# Facts of the pinned chart (kueue 0.19.2, charts/kueue): the names a release gives its
# Deployment and metrics Service (port `https`), after the chart's fullname.
DEPLOYMENT = "controller-manager"
METRICS_SERVICE = "controller-manager-metrics-service"
METRICS_PORT_NAME = "https"
# Kueue's lease, as the chart names it.
LEASE = "c1f6bfd2.kueue.x-k8s.io"
# The integrations GPU workloads come through. Those whose CRDs the cluster lacks (JobSet,
# LeaderWorkerSet) start when their CRDs appear.
FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset", "leaderworkerset.x-k8s.io/leaderworkerset",
              "pod", "deployment", "statefulset")
# What Kueue puts on the pods it manages, and what the Job controller's pods of a workload it
# admitted carry (the admission policy reads them; Kueue 0.19.2, pkg/controller/jobs/pod). The
# admission gate holds a pod until Kueue admits it; the topology gate (topology-aware scheduling,
# on by default) until Kueue has placed it. The managed label marks a pod Kueue's pod integration
# took over; the parent annotation one a Deployment's, StatefulSet's or LeaderWorkerSet's
# template holds for Kueue; the group key joins pods into one workload.
KUEUE_PREFIX = "kueue.x-k8s.io/"
ADMISSION_GATE = KUEUE_PREFIX + "admission"
TOPOLOGY_GATE = KUEUE_PREFIX + "topology"
MANAGED_LABEL = KUEUE_PREFIX + "managed"
PARENT_ANNOTATION = KUEUE_PREFIX + "pod-suspending-parent"
POD_GROUP_KEY = KUEUE_PREFIX + "pod-group-name"
PODSET_LABEL = KUEUE_PREFIX + "podset"
QUEUE_LABEL = KUEUE_PREFIX + "queue-name"
# On each team namespace: the team it belongs to.
TEAM_LABEL = "gpu-platform.io/team"


def chart_fullname(release: str) -> str:
    """The chart's name for a release's objects: the release's, when it contains `kueue`."""
    return release if CHART in release else f"{release}-{CHART}"


def controller_user(namespace: str, release: str) -> str:
    """Kueue's identity in the API server's requests: its controller-manager's ServiceAccount."""
    return f"system:serviceaccount:{namespace}:{deployment_name(release)}"


def deployment_name(release: str) -> str:
    return f"{chart_fullname(release)}-{DEPLOYMENT}"


def metrics_service_labels(release: str) -> dict[str, str]:
    """The labels of the chart's metrics Service (and of no other Service)."""
    return {"app.kubernetes.io/instance": release, "app.kubernetes.io/component": "metrics-service"}


def namespace_selector(namespaces: list[str]) -> dict:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": sorted(namespaces)}]}


def kueue_configuration(inputs: TeamsInputs) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2): jobs without a queue name managed
    in the team namespaces only, all-or-nothing admission, fair sharing, quotas of GPUs only."""
    teams = inputs.teams
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443",
                    # The quota, usage and borrowing gauges per ClusterQueue, for the dashboard.
                    "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": LEASE},
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": namespace_selector(list(teams.team_namespaces)),
        # A workload whose pods are not all running within the timeout gives its quota back
        # and is queued again: no job holds GPUs partly.
        "waitForPodsReady": {"timeout": teams.wait_for_pods_ready, "blockAdmission": False,
                             "requeuingStrategy": {"timestamp": "Eviction",
                                                   "backoffBaseSeconds": 60,
                                                   "backoffMaxSeconds": 3600}},
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare",
                                                 "LessThanInitialShare"]},
        # CPU and memory are not counted: only the GPU resources the queues declare are. On
        # the DRA path a claim on a GPU class counts against its resource's quota, as a request
        # of the resource does: a quota means the same GPUs on either path.
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared", **({"deviceClassMappings": [
            {"name": resource, "deviceClassNames": classes}
            for resource, classes in sorted(inputs.device_classes.items())]}
            if inputs.device_classes else {})},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


def chart_values(inputs: TeamsInputs, subject: Subject = STACK) -> dict:
    kueue = inputs.teams.kueue
    generated = {
        "controllerManager": {
            "replicas": kueue.replicas,
            "manager": {
                "image": {"repository": inputs.mirrored(kueue.image.repository),
                          "tag": kueue.image.tag, "pullPolicy": "IfNotPresent"},
                # Pods in team namespaces cannot be created while Kueue is down.
                "priorityClassName": kube.CRITICAL_PRIORITY,
            },
            "podDisruptionBudget": {"enabled": kueue.replicas > 1, "minAvailable": 1},
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(
            kueue_configuration(inputs), sort_keys=False)},
        # Monitoring declares the scrape configuration.
        "enablePrometheus": False,
    }
    return charts.merge_values(generated, kueue.extra_values, "teams.kueue.extraValues",
                               subject)


def quota_resources(quota: Quota) -> list[str]:
    return sorted({resource for resources in quota.values() for resource in resources})


def resource_flavor(inputs: TeamsInputs, name: str, node_labels: dict[str, str]) -> dict:
    """A flavor of GPU node: its labels (every GPU node's, and the flavor's own), and the
    tolerations of the GPU taints, which Kueue gives the pods it admits on it. It names no
    topology: Kueue's topology-aware scheduling, which picks nodes itself and pins pods to them
    with a nodeSelector (overriding the binpack scheduler's packing), acts only on flavors that
    do."""
    return {
        "apiVersion": KUEUE_API, "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": kube.labels(name, COMPONENT)},
        "spec": {"nodeLabels": {GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1], **node_labels},
                 "tolerations": [taint.toleration() for taint in inputs.gpu_nodes.taints]},
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
    return {
        "apiVersion": KUEUE_API, "kind": "ClusterQueue",
        "metadata": {"name": team.name, "labels": kube.labels(team.name, COMPONENT)},
        "spec": {
            "cohortName": teams.cohort,
            "namespaceSelector": namespace_selector(team.namespaces),
            # A workload that does not fit now does not hold back smaller ones behind it.
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": resources, "flavors": flavors}],
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
                         "labels": kube.labels(KUEUE_DEFAULT_QUEUE, COMPONENT)},
            "spec": {"clusterQueue": team.name}}


def workload_priority_classes(inputs: TeamsInputs) -> list[dict]:
    return [{"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
             "metadata": {"name": c.name, "labels": kube.labels(c.name, COMPONENT)},
             "value": c.value, "description": c.description}
            for c in inputs.teams.workload_priority_classes]


class Teams(kube.Component):
    """Kueue and the teams' queues: a ClusterQueue per team with its GPU quota in one cohort,
    a LocalQueue in each of its namespaces, the GPU flavors and the workload priorities."""

    namespace: str
    "Kueue's namespace."
    team_namespaces: dict[str, str]
    "Each team namespace, with its team."
    kueue_user: str
    "Kueue's identity in its requests to the API server (its ServiceAccount's user name)."

    def __init__(self, name: str, args: TeamsArgs,
                 opts: pulumi.ResourceOptions | None = None):
        inputs = self.inputs(TeamsInputs, args)
        values = chart_values(inputs, self.args_subject())
        super().__init__(name, opts)
        teams, kueue = inputs.teams, inputs.teams.kueue
        namespace = kube.declare(kube.namespace(kueue.namespace, "restricted", COMPONENT), self)
        # The quota first: where critical-priority pods need one, they are refused without it.
        quota = kube.declare(kube.critical_pods_quota(kueue.namespace, COMPONENT,
                                                      kube.replicas_quota(kueue.replicas)),
                             self, [namespace])
        self.release = charts.release(
            kueue.release_name, chart=CHART, version=kueue.chart_version,
            repository=kueue.repository, namespace=kueue.namespace, values=values,
            parent=self, protection=kueue.protection, chart_path=kueue.chart_path,
            depends_on=[namespace, quota])
        # Kueue's webhooks decide these first: `pulumi up` stops here if they cannot be
        # reached, before anything depends on Kueue.
        flavors = [kube.declare(resource_flavor(inputs, f.name, f.node_labels), self,
                                [self.release]) for f in teams.flavors]
        classes = kube.declare_all(workload_priority_classes(inputs), self, flavors)
        for team in teams.teams:
            queue = kube.declare(cluster_queue(inputs, team), self, flavors)
            for team_ns in team.namespaces:
                # Left in place when the team or the stack goes: it holds the team's work.
                created = kube.declare(team_namespace(team, team_ns), self, retain=True)
                kube.declare(local_queue(team, team_ns), self,
                             [queue, created, *classes.values()])
        self.namespace = kueue.namespace
        self.team_namespaces = teams.team_namespaces
        self.kueue_user = controller_user(kueue.namespace, kueue.release_name)
        self.register_outputs({"namespace": self.namespace,
                               "teamNamespaces": self.team_namespaces,
                               "kueueUser": self.kueue_user})
