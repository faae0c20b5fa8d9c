"""Compaction's objects: the descheduler's policy, its RBAC, the planner's ConfigMap and the
CronJob."""

import json
from pathlib import Path

from ..base import manifests
from ..base.facts import GPU_RESOURCE
from ..base.scoring import scoring_strategy
from .inputs import GpuCompactionInputs
from .planner import compaction_plan

COMPONENT = "compaction"
POLICY_DIR = "/policy-dir"
# JSON, which the descheduler reads as it reads YAML, so that the plan needs no YAML parser.
POLICY_FILE = "policy.json"
SCORING_FILE = "scoring.json"
PLAN_SCRIPT = Path(compaction_plan.__file__).name
RUN_POLICY_VOLUME, RUN_POLICY_DIR = "run-policy", "/run-policy"   # this run's, from the plan
PROFILE = "gpu-compaction"
# A run the binpack scheduler does not place within this time gives up (the Job fails, which
# the GpuCompactionNotRunning alert reports); the next scheduled run tries again.
RUN_DEADLINE_SECONDS = 600
POLICY_HASH_ANNOTATION = "gpu-platform.io/compaction-policy-sha256"


def thresholds(inputs: GpuCompactionInputs) -> dict[str, int]:
    """The HighNodeUtilization thresholds: a node at or below them in every listed resource is
    emptied. Whole GPUs and each MIG resource in use count alike."""
    share = inputs.compaction.underused_percent
    return {name: share for name in (GPU_RESOURCE, *inputs.mig_resources)}


def descheduler_policy(inputs: GpuCompactionInputs) -> dict:
    """DeschedulerPolicy (descheduler/v1alpha2) of one profile."""
    compaction = inputs.compaction
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "nodeSelector": compaction.node_selector,
        "maxNoOfPodsToEvictPerNode": compaction.max_evictions_per_node,
        "maxNoOfPodsToEvictTotal": compaction.max_evictions_per_run,
        # A pod that would have moved but whose budget refused it gets a Warning event saying
        # so (best effort: a run can end before the event is sent; its log always says so).
        "evictionFailureEventNotification": True,
        "profiles": [{
            "name": PROFILE,
            "pluginConfig": [
                {"name": "DefaultEvictor", "args": {
                    # The opt-in. Bare pods, DaemonSet pods, critical pods and pods with local
                    # storage stay protected (the evictor's default protections).
                    "labelSelector": {"matchLabels": compaction.opt_in},
                    "minPodAge": compaction.min_pod_age,
                    # Only a pod that fits on another GPU node is evicted.
                    "nodeFit": True,
                    "nodeSelector": compaction.node_selector,
                }},
                {"name": "HighNodeUtilization", "args": {
                    "thresholds": thresholds(inputs),
                    # Only pods that request a GPU resource: moving a CPU pod frees no GPU.
                    "evictionModes": ["OnlyThresholdingResources"],
                }},
            ],
            "plugins": {"balance": {"enabled": ["HighNodeUtilization"]}},
        }],
    }


def compaction_rules() -> list[dict]:
    """What the descheduler reads and does, and no more: no pod deletes (evictions only, which
    PodDisruptionBudgets govern) and no writes besides evictions and events."""
    return [
        manifests.rule(["events.k8s.io"], ["events"], ["create", "update"]),
        manifests.rule([""], ["nodes", "namespaces", "pods", "persistentvolumeclaims"],
                       manifests.READ),
        manifests.rule([""], ["pods/eviction"], ["create"]),
        manifests.rule(["scheduling.k8s.io"], ["priorityclasses"], manifests.READ),
        manifests.rule(["policy"], ["poddisruptionbudgets"], manifests.READ),
    ]


def rbac_objects(inputs: GpuCompactionInputs) -> list[dict]:
    compaction = inputs.compaction
    return manifests.account_with_cluster_role(compaction.name, compaction.namespace,
                                               COMPONENT, compaction_rules())


def config_map(inputs: GpuCompactionInputs) -> dict:
    """The policy; with planning, also the plan and the scheduler's scoring it predicts with."""
    compaction = inputs.compaction
    files = {POLICY_FILE: json.dumps(descheduler_policy(inputs), indent=1)}
    if compaction.plan_threshold:
        files |= {SCORING_FILE: json.dumps(scoring_strategy(inputs.scoring_strategy,
                                                            inputs.scored_resources), indent=1),
                  PLAN_SCRIPT: Path(compaction_plan.__file__).read_text()}
    return manifests.config_map(f"{compaction.name}-policy", compaction.namespace, COMPONENT,
                                compaction.name, files)


def plan_container(inputs: GpuCompactionInputs, policy_mount: dict, run_mount: dict) -> dict:
    """The init container that writes this run's policy: the nodes to empty now, as thresholds
    and a node selector (see compaction_plan.py). It reads nodes and pods, which the
    ClusterRole allows."""
    return manifests.python_script_container(
        "plan", inputs.image(inputs.compaction.plan_image), f"{POLICY_DIR}/{PLAN_SCRIPT}",
        [f"--policy={POLICY_DIR}/{POLICY_FILE}", f"--scoring={POLICY_DIR}/{SCORING_FILE}",
         f"--out={RUN_POLICY_DIR}/{POLICY_FILE}"],
        inputs.compaction.resources, [policy_mount, run_mount])


def cron_job(inputs: GpuCompactionInputs) -> dict:
    compaction = inputs.compaction
    mount, volume = manifests.config_map_mount("policy", POLICY_DIR, f"{compaction.name}-policy")
    run_mount = {"name": RUN_POLICY_VOLUME, "mountPath": RUN_POLICY_DIR}
    planned = compaction.plan_threshold
    policy_file = f"{RUN_POLICY_DIR if planned else POLICY_DIR}/{POLICY_FILE}"
    init = {"initContainers": [plan_container(inputs, mount, run_mount)]} if planned else {}
    volumes = [volume, {"name": RUN_POLICY_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}] \
        if planned else [volume]
    descheduler = {
        "name": "descheduler",
        "image": inputs.image(compaction.image),
        "command": ["/bin/descheduler"],
        "args": [f"--policy-config-file={policy_file}",
                 # One run per pod; nothing stays up to be scraped.
                 "--disable-metrics", "--v=3"],
        "resources": manifests.container_resources(compaction.resources),
        "securityContext": manifests.RESTRICTED_CONTAINER_SECURITY,
        "volumeMounts": [mount, run_mount] if planned else [mount],
    }
    # Its runs never overlap: each decides on a snapshot the other would be changing.
    return manifests.cron_job(
        compaction.name, compaction.namespace, COMPONENT, compaction.schedule,
        RUN_DEADLINE_SECONDS,
        {POLICY_HASH_ANNOTATION: manifests.content_hash(config_map(inputs)["data"])},
        {**init, "containers": [descheduler], "volumes": volumes},
        # The gate: the binpack scheduler places the run, so a run never starts while it is
        # unavailable, and evicted pods always have it to return to.
        scheduler_name=inputs.scheduler_name)


def compaction_objects(inputs: GpuCompactionInputs) -> list[dict]:
    """Everything compaction needs, namespace first."""
    return [manifests.namespace(inputs.compaction.namespace, "restricted", COMPONENT),
            *rbac_objects(inputs), config_map(inputs), cron_job(inputs)]
