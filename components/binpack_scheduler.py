"""The binpack scheduler: a second kube-scheduler whose scoring prefers nodes that are already
busy, so that GPU pods fill nodes up instead of leaving a few free GPUs stranded on every node."""

from __future__ import annotations

from typing import Any

import pulumi

from . import kube
from .settings import StackSettings

COMPONENT = "scheduler"
CONFIG_DIR = "/etc/kubernetes/gpu-binpack-scheduler"
CONFIG_FILE = "config.yaml"
SECURE_PORT = 10259
METRICS_PORT_NAME = "https-metrics"
# Pod annotation holding a digest of the configuration: a changed configuration changes the pod
# template, so the Deployment rolls the scheduler pods onto it.
CONFIG_HASH_ANNOTATION = "gpu-platform.io/scheduler-config-sha256"


def leader_elect(settings: StackSettings) -> bool:
    return settings.scheduler.replicas > 1


def score_plugins(settings: StackSettings) -> dict:
    """The profile's `plugins.score`: the configured weights over kube-scheduler's defaults (a
    plugin listed here overrides the default profile's multiPoint entry at the score point)."""
    weights = settings.scheduler.score_plugin_weights
    plugins = {}
    if enabled := [{"name": n, "weight": w} for n, w in weights.items() if w]:
        plugins["enabled"] = enabled
    if disabled := [{"name": n} for n, w in weights.items() if not w]:
        plugins["disabled"] = disabled
    return plugins


def scoring_strategy(settings: StackSettings) -> dict:
    """NodeResourcesFit's scoring strategy: how full a node is, weighted by resource (compaction
    predicts placements with it too)."""
    return {
        "type": "RequestedToCapacityRatio",
        "resources": [{"name": r.name, "weight": r.weight} for r in settings.scored_resources],
        "requestedToCapacityRatio": {
            "shape": [{"utilization": p.utilization, "score": p.score}
                      for p in settings.scheduler.scoring_strategy.requested_to_capacity_ratio
                      .shape],
        },
    }


def plugin_config(settings: StackSettings) -> list[dict]:
    sched = settings.scheduler
    config = [{"name": "NodeResourcesFit",
               "args": {"scoringStrategy": scoring_strategy(settings)}}]
    if not sched.system_default_spread:
        # `List` with no constraints of its own: only what a pod declares is spread.
        config.append({"name": "PodTopologySpread", "args": {"defaultingType": "List"}})
    return config


def scheduler_configuration(settings: StackSettings) -> dict:
    """KubeSchedulerConfiguration (v1) with one profile: the binpack scheduler."""
    sched = settings.scheduler
    profile: dict[str, Any] = {"schedulerName": sched.name}
    if plugins := score_plugins(settings):
        profile["plugins"] = {"score": plugins}
    profile["pluginConfig"] = plugin_config(settings)
    election = sched.leader_election
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"qps": sched.client_connection.qps,
                             "burst": sched.client_connection.burst},
        "leaderElection": {
            "leaderElect": leader_elect(settings),
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
        kube.rule(["resource.k8s.io"], ["deviceclasses", "resourceslices"], kube.READ),
        kube.rule(["resource.k8s.io"], ["resourceclaims"], ["create", "delete", "patch", "update",
                                                        *kube.READ]),
        kube.rule(["resource.k8s.io"], ["resourceclaims/status"], ["patch", "update", *kube.READ]),
        kube.rule(["resource.k8s.io"], ["resourceclaims/binding"], ["patch", "update"]),
        # Delegated authentication and authorization of callers of its secure port.
        kube.rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        kube.rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    ]


def rbac_objects(settings: StackSettings) -> list[dict]:
    sched = settings.scheduler
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
    if leader_elect(settings):
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


def config_map(settings: StackSettings) -> dict:
    sched = settings.scheduler
    return kube.yaml_config_map(f"{sched.name}-config", sched.namespace, COMPONENT, sched.name,
                                CONFIG_FILE, scheduler_configuration(settings))


def deployment(settings: StackSettings) -> dict:
    sched = settings.scheduler
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
                                    kube.content_hash(scheduler_configuration(settings))},
                },
                "spec": {
                    # In-cluster credentials of this ServiceAccount; no kubeconfig from the host.
                    "serviceAccountName": sched.name,
                    "priorityClassName": kube.CRITICAL_PRIORITY,
                    "securityContext": kube.RESTRICTED_POD_SECURITY,
                    "affinity": kube.spread_by_node(sched.name, COMPONENT),
                    "containers": [{
                        "name": "kube-scheduler",
                        "image": settings.scheduler_image,
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


def metrics_service(settings: StackSettings) -> dict:
    """A headless Service of the scheduler pods' secure port, for Prometheus to find them by
    (Monitoring's ServiceMonitor): the scheduler's own metrics count its preemptions."""
    sched = settings.scheduler
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


def preemptible_priority_class(settings: StackSettings) -> dict:
    """The class GPU pods opt in to preemption with. Its priority is below that of pods naming no
    class, so a GPU pod that does not fit preempts only such pods (kube-scheduler's
    DefaultPreemption, on the node where the fewest have to go), and they never preempt."""
    preemptible = settings.scheduler.preemptible_class
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": preemptible.name,
                     "labels": kube.labels(settings.scheduler.name, COMPONENT)},
        "value": preemptible.value,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "GPU pods that other GPU pods may preempt (Jobs that resume from a "
                       "checkpoint, replicas that can be replaced), so that a job needing a "
                       "whole node does not wait for one to drain.",
    }


def scheduler_objects(settings: StackSettings) -> list[dict]:
    """Everything the binpack scheduler needs, namespace first."""
    sched = settings.scheduler
    objects = [kube.namespace(sched.namespace, "restricted", COMPONENT),
               kube.critical_pods_quota(sched.namespace, COMPONENT,
                                        kube.replicas_quota(sched.replicas)),
               *rbac_objects(settings), config_map(settings), deployment(settings),
               metrics_service(settings)]
    if sched.replicas > 1:
        objects.append(kube.pod_disruption_budget(sched.name, sched.namespace, COMPONENT))
    if sched.preemptible_class.enabled:
        objects.append(preemptible_priority_class(settings))
    return objects


class BinpackScheduler(kube.Component):
    def __init__(self, name: str, settings: StackSettings,
                 prefix: str = "",
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:BinpackScheduler", name, None, opts)
        self.child_prefix = prefix
        objects = scheduler_objects(settings)
        namespace = kube.declare(objects[0], self)
        # The quota first: where critical-priority pods need one, they are refused without it.
        quota = kube.declare(objects[1], self, depends_on=[namespace])
        self.resources = kube.declare_all(objects[2:], self, depends_on=[namespace, quota])
        self.scheduler_name = settings.scheduler.name
        preemptible = settings.scheduler.preemptible_class
        self.preemptible_class = preemptible.name if preemptible.enabled else None
        self.register_outputs({"schedulerName": self.scheduler_name,
                               "namespace": settings.scheduler.namespace,
                               "preemptibleClass": self.preemptible_class})
