"""The binpack scheduler: a second kube-scheduler whose scoring prefers nodes that are already
busy, so that GPU pods fill nodes up instead of leaving a few free GPUs stranded on every node."""

from typing import Any

import pulumi

from . import kube
from .args import BinpackSchedulerArgs
from .inputs import BinpackSchedulerInputs
from .settings import ResourceWeight, ScoringStrategy

COMPONENT = "scheduler"
CONFIG_DIR = "/etc/kubernetes/gpu-binpack-scheduler"
CONFIG_FILE = "config.yaml"
SECURE_PORT = 10259
METRICS_PORT_NAME = "https-metrics"
# Pod annotation holding a digest of the configuration: a changed configuration changes the pod
# template, so the Deployment rolls the scheduler pods onto it.
CONFIG_HASH_ANNOTATION = "gpu-platform.io/scheduler-config-sha256"


def leader_elect(inputs: BinpackSchedulerInputs) -> bool:
    return inputs.scheduler.replicas > 1


def score_plugins(inputs: BinpackSchedulerInputs) -> dict:
    """The profile's `plugins.score`: the configured weights over kube-scheduler's defaults (a
    plugin listed here overrides the default profile's multiPoint entry at the score point)."""
    weights = inputs.scheduler.score_plugin_weights
    plugins = {}
    if enabled := [{"name": n, "weight": w} for n, w in weights.items() if w]:
        plugins["enabled"] = enabled
    if disabled := [{"name": n} for n, w in weights.items() if not w]:
        plugins["disabled"] = disabled
    return plugins


def scoring_strategy(strategy: ScoringStrategy, scored: list[ResourceWeight]) -> dict:
    """NodeResourcesFit's scoring strategy: how full a node is, weighted by resource, for the
    `scored` resources (compaction predicts placements with it too)."""
    return {
        "type": "RequestedToCapacityRatio",
        "resources": [{"name": r.name, "weight": r.weight} for r in scored],
        "requestedToCapacityRatio": {
            "shape": [{"utilization": p.utilization, "score": p.score}
                      for p in strategy.requested_to_capacity_ratio.shape],
        },
    }


def plugin_config(inputs: BinpackSchedulerInputs) -> list[dict]:
    sched = inputs.scheduler
    config = [{"name": "NodeResourcesFit",
               "args": {"scoringStrategy": scoring_strategy(sched.scoring_strategy,
                                                            inputs.scored_resources)}}]
    if not sched.system_default_spread:
        # `List` with no constraints of its own: only what a pod declares is spread.
        config.append({"name": "PodTopologySpread", "args": {"defaultingType": "List"}})
    return config


def scheduler_configuration(inputs: BinpackSchedulerInputs) -> dict:
    """KubeSchedulerConfiguration (v1) with one profile: the binpack scheduler."""
    sched = inputs.scheduler
    profile: dict[str, Any] = {"schedulerName": sched.name}
    if plugins := score_plugins(inputs):
        profile["plugins"] = {"score": plugins}
    profile["pluginConfig"] = plugin_config(inputs)
    election = sched.leader_election
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"qps": sched.client_connection.qps,
                             "burst": sched.client_connection.burst},
        "leaderElection": {
            "leaderElect": leader_elect(inputs),
            "leaseDuration": election.lease_duration,
            "renewDeadline": election.renew_deadline,
            "retryPeriod": election.retry_period,
            "resourceLock": "leases",
            "resourceName": sched.name,
            "resourceNamespace": sched.namespace,
        },
        "percentageOfNodesToScore": sched.percentage_of_nodes_to_score,
        "profiles": [profile],
    }


def scheduler_rules() -> list[dict]:
    """What kube-scheduler needs to place pods, and no more: the rules of the cluster's
    `system:kube-scheduler` role (v1.36) without its leases (kube-system/kube-scheduler and the
    coordinated-election candidates), so the binpack scheduler can never take the cluster
    scheduler's leadership."""
    return [
        kube.rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
        kube.rule([""], ["nodes", "namespaces", "services", "replicationcontrollers",
                     "persistentvolumeclaims", "persistentvolumes"], kube.READ),
        # Preemption deletes lower-priority pods.
        kube.rule([""], ["pods"], ["delete", *kube.READ]),
        kube.rule([""], ["bindings", "pods/binding"], ["create"]),
        kube.rule([""], ["pods/status"], ["patch", "update"]),
        kube.rule([""], ["pods/finalizers"], ["update"]),
        kube.rule(["apps"], ["replicasets", "statefulsets"], kube.READ),
        kube.rule(["policy"], ["poddisruptionbudgets"], kube.READ),
        kube.rule(["storage.k8s.io"], ["csinodes", "csidrivers", "csistoragecapacities",
                                   "volumeattachments"], kube.READ),
        # Dynamic Resource Allocation, which the scheduler serves for claims it places.
        kube.rule(["resource.k8s.io"], ["deviceclasses", "resourceslices", "devicetaintrules"],
                  kube.READ),
        kube.rule(["resource.k8s.io"], ["resourceclaims"], ["create", "delete", "patch", "update",
                                                        *kube.READ]),
        kube.rule(["resource.k8s.io"], ["resourceclaims/status"], ["patch", "update", *kube.READ]),
        kube.rule(["resource.k8s.io"], ["resourceclaims/binding"], ["patch", "update"]),
        # Delegated authentication and authorization of callers of its secure port.
        kube.rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        kube.rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    ]


def rbac_objects(inputs: BinpackSchedulerInputs) -> list[dict]:
    sched = inputs.scheduler
    account = {"kind": "ServiceAccount", "name": sched.name, "namespace": sched.namespace}
    meta_labels = kube.labels(sched.name, COMPONENT)

    def binding(kind: str, name: str, role_kind: str, role: str, namespace: str | None = None):
        return kube.role_binding(kind, name, role_kind, role, account, meta_labels, namespace)

    cluster_role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": sched.name, "labels": meta_labels},
                    "rules": scheduler_rules()}
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": sched.name, "namespace": sched.namespace, "labels": meta_labels}},
        cluster_role,
        binding("ClusterRoleBinding", sched.name, "ClusterRole", sched.name),
        # Binding pods that use PersistentVolumeClaims.
        binding("ClusterRoleBinding", f"{sched.name}:volume-scheduler", "ClusterRole",
                "system:volume-scheduler"),
        # Delegated authentication of callers of the secure port reads this ConfigMap.
        binding("RoleBinding", f"{sched.name}:extension-apiserver-authentication-reader",
                "Role", "extension-apiserver-authentication-reader", "kube-system"),
    ]
    if leader_elect(inputs):
        # Its own lease only, never the cluster scheduler's (kube-system/kube-scheduler).
        role_name = f"{sched.name}:leader-election"
        objects += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": role_name, "namespace": sched.namespace, "labels": meta_labels},
             "rules": [
                 {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                  "verbs": ["create"]},
                 {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                  "resourceNames": [sched.name], "verbs": ["get", "update"]},
             ]},
            binding("RoleBinding", role_name, "Role", role_name, sched.namespace),
        ]
    return objects


def config_map(inputs: BinpackSchedulerInputs) -> dict:
    sched = inputs.scheduler
    return kube.yaml_config_map(f"{sched.name}-config", sched.namespace, COMPONENT, sched.name,
                                CONFIG_FILE, scheduler_configuration(inputs))


def deployment(inputs: BinpackSchedulerInputs) -> dict:
    sched = inputs.scheduler
    probe = {"httpGet": {"path": "/healthz", "port": SECURE_PORT, "scheme": "HTTPS"},
             "periodSeconds": 10, "failureThreshold": 3}
    mount, volume = kube.config_map_mount("config", CONFIG_DIR, f"{sched.name}-config")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": sched.name, "namespace": sched.namespace,
                     "labels": kube.labels(sched.name, COMPONENT)},
        "spec": {
            "replicas": sched.replicas,
            "selector": {"matchLabels": kube.selector_labels(sched.name, COMPONENT)},
            "template": {
                "metadata": {
                    "labels": kube.labels(sched.name, COMPONENT),
                    "annotations": {CONFIG_HASH_ANNOTATION:
                                    kube.content_hash(scheduler_configuration(inputs))},
                },
                "spec": {
                    # In-cluster credentials of this ServiceAccount; no kubeconfig from the host.
                    "serviceAccountName": sched.name,
                    "priorityClassName": kube.CRITICAL_PRIORITY,
                    "securityContext": kube.RESTRICTED_POD_SECURITY,
                    "affinity": kube.spread_by_node(sched.name, COMPONENT),
                    "containers": [{
                        "name": "kube-scheduler",
                        "image": inputs.scheduler_image,
                        "command": [
                            "kube-scheduler",
                            f"--config={CONFIG_DIR}/{CONFIG_FILE}",
                            f"--secure-port={SECURE_PORT}",
                            f"--v={sched.log_level}",
                        ],
                        "ports": [{"name": "https", "containerPort": SECURE_PORT}],
                        "livenessProbe": {**probe, "initialDelaySeconds": 15},
                        "readinessProbe": {**probe, "httpGet": {**probe["httpGet"],
                                                                "path": "/readyz"}},
                        "resources": kube.container_resources(sched.resources),
                        "securityContext": kube.RESTRICTED_CONTAINER_SECURITY,
                        "volumeMounts": [mount],
                    }],
                    "volumes": [volume],
                },
            },
        },
    }


def metrics_service(inputs: BinpackSchedulerInputs) -> dict:
    """A headless Service of the scheduler pods' secure port, for Prometheus to find them by
    (Monitoring's ServiceMonitor): the scheduler's own metrics count its preemptions."""
    sched = inputs.scheduler
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": sched.name, "namespace": sched.namespace,
                     "labels": kube.labels(sched.name, COMPONENT)},
        "spec": {
            "clusterIP": "None",
            "selector": kube.selector_labels(sched.name, COMPONENT),
            "ports": [{"name": METRICS_PORT_NAME, "port": SECURE_PORT, "targetPort": "https",
                       "protocol": "TCP"}],
        },
    }


def preemptible_priority_class(inputs: BinpackSchedulerInputs) -> dict:
    """The class GPU pods opt in to preemption with. Its priority is below that of pods naming no
    class, so a GPU pod that does not fit preempts only such pods (kube-scheduler's
    DefaultPreemption, on the node where the fewest have to go), and they never preempt."""
    preemptible = inputs.scheduler.preemptible_class
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": preemptible.name,
                     "labels": kube.labels(inputs.scheduler.name, COMPONENT)},
        "value": preemptible.value,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "GPU pods that other GPU pods may preempt (Jobs that resume from a "
                       "checkpoint, replicas that can be replaced), so that a job needing a "
                       "whole node does not wait for one to drain.",
    }


def scheduler_objects(inputs: BinpackSchedulerInputs) -> list[dict]:
    """Everything the binpack scheduler needs, namespace first."""
    sched = inputs.scheduler
    objects = [kube.namespace(sched.namespace, "restricted", COMPONENT),
               kube.critical_pods_quota(sched.namespace, COMPONENT,
                                        kube.replicas_quota(sched.replicas)),
               *rbac_objects(inputs), config_map(inputs), deployment(inputs),
               metrics_service(inputs)]
    if sched.replicas > 1:
        objects.append(kube.pod_disruption_budget(sched.name, sched.namespace, COMPONENT))
    if sched.preemptible_class.enabled:
        objects.append(preemptible_priority_class(inputs))
    return objects


class BinpackScheduler(kube.Component):
    """The binpack scheduler: a second kube-scheduler whose scoring packs GPU pods onto busy
    nodes, its RBAC, configuration and Deployment, and the PriorityClass of preemptible GPU
    pods."""

    scheduler_name: str
    "The schedulerName GPU pods name to be placed by it."
    namespace: str
    "Its namespace."
    preemptible_class: str | None
    "The PriorityClass of preemptible GPU pods, when one is declared."

    def __init__(self, name: str, args: BinpackSchedulerArgs,
                 opts: pulumi.ResourceOptions | None = None):
        inputs = self.inputs(BinpackSchedulerInputs, args)
        super().__init__(name, opts)
        objects = scheduler_objects(inputs)
        namespace = kube.declare(objects[0], self)
        # The quota first: where critical-priority pods need one, they are refused without it.
        quota = kube.declare(objects[1], self, depends_on=[namespace])
        self.resources = kube.declare_all(objects[2:], self, depends_on=[namespace, quota])
        sched = inputs.scheduler
        self.scheduler_name = sched.name
        self.namespace = sched.namespace
        self.preemptible_class = (sched.preemptible_class.name
                                  if sched.preemptible_class.enabled else None)
        self.register_outputs({"schedulerName": self.scheduler_name, "namespace": self.namespace,
                               "preemptibleClass": self.preemptible_class})
