"""The binpack scheduler's objects: its KubeSchedulerConfiguration, RBAC, Deployment, metrics
Service and the preemptible PriorityClass."""

from typing import Any

from ..base import manifests
from ..base.facts import SCHEDULER_COMPONENT, SCHEDULER_METRICS_PORT_NAME
from ..base.scoring import scoring_strategy
from .inputs import BinpackSchedulerInputs

CONFIG_DIR = "/etc/kubernetes/gpu-binpack-scheduler"
CONFIG_FILE = "config.yaml"
SECURE_PORT = 10259
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
        manifests.rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
        manifests.rule([""], ["nodes", "namespaces", "services", "replicationcontrollers",
                              "persistentvolumeclaims", "persistentvolumes"], manifests.READ),
        # Preemption deletes lower-priority pods.
        manifests.rule([""], ["pods"], ["delete", *manifests.READ]),
        manifests.rule([""], ["bindings", "pods/binding"], ["create"]),
        manifests.rule([""], ["pods/status"], ["patch", "update"]),
        manifests.rule([""], ["pods/finalizers"], ["update"]),
        manifests.rule(["apps"], ["replicasets", "statefulsets"], manifests.READ),
        manifests.rule(["policy"], ["poddisruptionbudgets"], manifests.READ),
        manifests.rule(["storage.k8s.io"], ["csinodes", "csidrivers", "csistoragecapacities",
                                            "volumeattachments"], manifests.READ),
        # Dynamic Resource Allocation, which the scheduler serves for claims it places.
        manifests.rule(["resource.k8s.io"], ["deviceclasses", "resourceslices", "devicetaintrules"],
                       manifests.READ),
        manifests.rule(["resource.k8s.io"], ["resourceclaims"],
                       ["create", "delete", "patch", "update", *manifests.READ]),
        manifests.rule(["resource.k8s.io"], ["resourceclaims/status"],
                       ["patch", "update", *manifests.READ]),
        manifests.rule(["resource.k8s.io"], ["resourceclaims/binding"], ["patch", "update"]),
        # Delegated authentication and authorization of callers of its secure port.
        manifests.rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        manifests.rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    ]


def rbac_objects(inputs: BinpackSchedulerInputs) -> list[dict]:
    sched = inputs.scheduler
    account = {"kind": "ServiceAccount", "name": sched.name, "namespace": sched.namespace}
    meta_labels = manifests.labels(sched.name, SCHEDULER_COMPONENT)

    def binding(kind: str, name: str, role_kind: str, role: str, namespace: str | None = None):
        return manifests.role_binding(kind, name, role_kind, role, account, meta_labels, namespace)

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
    return manifests.yaml_config_map(f"{sched.name}-config", sched.namespace, SCHEDULER_COMPONENT,
                                     sched.name, CONFIG_FILE, scheduler_configuration(inputs))


def deployment(inputs: BinpackSchedulerInputs) -> dict:
    sched = inputs.scheduler
    probe = {"httpGet": {"path": "/healthz", "port": SECURE_PORT, "scheme": "HTTPS"},
             "periodSeconds": 10, "failureThreshold": 3}
    mount, volume = manifests.config_map_mount("config", CONFIG_DIR, f"{sched.name}-config")
    placement = {"nodeSelector": dict(sched.node_selector)} if sched.node_selector else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": sched.name, "namespace": sched.namespace,
                     "labels": manifests.labels(sched.name, SCHEDULER_COMPONENT)},
        "spec": {
            "replicas": sched.replicas,
            "selector": {"matchLabels": manifests.selector_labels(sched.name, SCHEDULER_COMPONENT)},
            "template": {
                "metadata": {
                    "labels": manifests.labels(sched.name, SCHEDULER_COMPONENT),
                    "annotations": {CONFIG_HASH_ANNOTATION:
                                    manifests.content_hash(scheduler_configuration(inputs))},
                },
                "spec": {
                    # In-cluster credentials of this ServiceAccount; no kubeconfig from the host.
                    "serviceAccountName": sched.name,
                    "priorityClassName": manifests.CRITICAL_PRIORITY,
                    "securityContext": manifests.RESTRICTED_POD_SECURITY,
                    "affinity": manifests.spread_by_node(sched.name, SCHEDULER_COMPONENT),
                    **placement,
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
                        "resources": manifests.container_resources(sched.resources),
                        "securityContext": manifests.RESTRICTED_CONTAINER_SECURITY,
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
                     "labels": manifests.labels(sched.name, SCHEDULER_COMPONENT)},
        "spec": {
            "clusterIP": "None",
            "selector": manifests.selector_labels(sched.name, SCHEDULER_COMPONENT),
            "ports": [{"name": SCHEDULER_METRICS_PORT_NAME, "port": SECURE_PORT,
                       "targetPort": "https", "protocol": "TCP"}],
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
                     "labels": manifests.labels(inputs.scheduler.name, SCHEDULER_COMPONENT)},
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
    objects = [manifests.namespace(sched.namespace, "restricted", SCHEDULER_COMPONENT),
               manifests.critical_pods_quota(sched.namespace, SCHEDULER_COMPONENT,
                                             manifests.replicas_quota(sched.replicas)),
               *rbac_objects(inputs), config_map(inputs), deployment(inputs),
               metrics_service(inputs)]
    if sched.replicas > 1:
        objects.append(manifests.pod_disruption_budget(sched.name, sched.namespace,
                                                       SCHEDULER_COMPONENT))
    if sched.preemptible_class.enabled:
        objects.append(preemptible_priority_class(inputs))
    return objects
