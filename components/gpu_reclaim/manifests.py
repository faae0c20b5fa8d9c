"""Reclaim's objects: its namespace and ServiceAccount, a Role in each opted-in namespace, the
ConfigMap with the run's settings and script, and the CronJob."""


from ..base import kube_api, kueue_requeue, manifests
from ..base.facts import KUEUE_API
from .actor import gpu_reclaim
from .actor.gpu_reclaim import Config, Policy
from .inputs import GpuReclaimInputs

COMPONENT = "reclaim"
CONFIG_DIR = "/reclaim"
MODULES = (gpu_reclaim, kube_api, kueue_requeue)
# When a pod was first reported idle (RFC 3339), written by the run on the pod.
REPORTED_ANNOTATION = "gpu-platform.io/idle-reported-at"
# Where the action is evict, when the reported pod may be evicted if still idle (RFC 3339),
# written by the run: what its owner reads on the pod.
DEADLINE_ANNOTATION = "gpu-platform.io/idle-evict-after"
# Set by a pod's owner to restart its grace period; the run removes it and counts it in
# KEEP_ALIVES_ANNOTATION, up to the policy's keepAlives.
KEEP_ALIVE_ANNOTATION = "gpu-platform.io/keep-alive"
KEEP_ALIVES_ANNOTATION = "gpu-platform.io/idle-keep-alives-used"
# On a team's Kueue Workload the run took off its queue to hand its GPUs back, until it puts
# it back: when (RFC 3339).
REQUEUED_ANNOTATION = "gpu-platform.io/idle-requeued-at"
# How long a run waits for Kueue to release a deactivated Workload's quota before it puts the
# Workload back in the queue (the next run does it otherwise).
REQUEUE_WAIT_SECONDS = 60
# The events' reportingController.
CONTROLLER = "gpu-platform.io/reclaim"
# A run that has not ended by then is stopped (the Job fails); the next one starts over.
RUN_DEADLINE_SECONDS = 600
CONFIG_HASH_ANNOTATION = "gpu-platform.io/reclaim-config-sha256"


def actor_config(inputs: GpuReclaimInputs) -> Config:
    """What a run reads: the query, the policy and where it applies."""
    reclaim = inputs.reclaim
    return Config(
        prometheusUrl=inputs.prometheus_url,
        query=inputs.idle_query,
        idleBelow=inputs.idle_below,
        idleFor=reclaim.idle_for,
        idleForSeconds=reclaim.idle_for_seconds,
        policies={namespace: Policy(action=policy.action, gracePeriod=policy.grace_period,
                                    gracePeriodSeconds=policy.grace_period_seconds,
                                    allowKeep=policy.allow_keep,
                                    keepAlives=policy.keep_alives)
                  for namespace, policy in inputs.policies.items()},
        exemptNamespaces=sorted(inputs.exempt_namespaces),
        keepAnnotation=reclaim.keep_annotation,
        maxEvictionsPerRun=reclaim.max_evictions_per_run,
        reportedAnnotation=REPORTED_ANNOTATION,
        deadlineAnnotation=DEADLINE_ANNOTATION,
        keepAliveAnnotation=KEEP_ALIVE_ANNOTATION,
        keepAlivesAnnotation=KEEP_ALIVES_ANNOTATION,
        controller=CONTROLLER,
        # In a team namespace on evict, a pod Kueue admitted goes back to its queue with its
        # workload (and only there may a run read and write Workloads).
        teamNamespaces=[namespace for namespace, policy in inputs.policies.items()
                        if namespace in inputs.team_namespaces and policy.action == "evict"],
        workloadsApi=f"/apis/{KUEUE_API}",
        ownerResources=inputs.workload_owners,
        requeuedAnnotation=REQUEUED_ANNOTATION,
        requeueWaitSeconds=REQUEUE_WAIT_SECONDS)


def reclaim_rules(action: str) -> list[dict]:
    """What a run does in an opted-in namespace whose action is `action`, and no more: read its
    pods, write the report annotation on them (patch; evict needs it too, to time the grace
    period), evict (never delete: evictions are what PodDisruptionBudgets govern) only where the
    action is `evict`, and create events."""
    rules = [manifests.rule([""], ["pods"], ["get", "list", "patch"]),
             manifests.rule(["events.k8s.io"], ["events"], ["create"])]
    if action == "evict":
        rules.append(manifests.rule([""], ["pods/eviction"], ["create"]))
    return rules


def team_rules(inputs: GpuReclaimInputs, action: str) -> list[dict]:
    """Where the action is `evict`, in an opted-in team namespace, also what putting a
    workload back in its queue takes."""
    if action != "evict":
        return []
    return manifests.requeue_rules(inputs.workload_owners)


def rbac_objects(inputs: GpuReclaimInputs) -> list[dict]:
    """The ServiceAccount, and a Role with its RoleBinding in each opted-in namespace: no
    cluster-wide rights."""
    reclaim = inputs.reclaim
    meta_labels = manifests.labels(reclaim.name, COMPONENT)
    account = {"kind": "ServiceAccount", "name": reclaim.name, "namespace": reclaim.namespace}
    objects: list[dict] = [{"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": reclaim.name, "namespace": reclaim.namespace,
                                         "labels": meta_labels}}]
    for namespace, policy in inputs.policies.items():
        objects += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": reclaim.name, "namespace": namespace, "labels": meta_labels},
             "rules": reclaim_rules(policy.action) + (
                 team_rules(inputs, policy.action) if namespace in inputs.team_namespaces
                 else [])},
            manifests.role_binding("RoleBinding", reclaim.name, "Role", reclaim.name, account,
                                   meta_labels, namespace_=namespace),
        ]
    return objects


def module_run(inputs: GpuReclaimInputs) -> manifests.ModuleRun:
    reclaim = inputs.reclaim
    return manifests.module_run(reclaim.name, reclaim.namespace, COMPONENT,
                                inputs.image(reclaim.image), CONFIG_DIR, actor_config(inputs),
                                gpu_reclaim, MODULES, reclaim.resources)


def cron_job(inputs: GpuReclaimInputs) -> dict:
    reclaim = inputs.reclaim
    run = module_run(inputs)
    # Its runs never overlap: two would report, or evict, the same pods.
    return manifests.cron_job(
        reclaim.name, reclaim.namespace, COMPONENT, reclaim.schedule, RUN_DEADLINE_SECONDS,
        {CONFIG_HASH_ANNOTATION: run.content_hash},
        {"containers": [run.container], "volumes": [run.volume]})


def reclaim_objects(inputs: GpuReclaimInputs) -> list[dict]:
    """Everything reclaim needs, its namespace first."""
    return [manifests.namespace(inputs.reclaim.namespace, "restricted", COMPONENT),
            *rbac_objects(inputs), module_run(inputs).config_map, cron_job(inputs)]
