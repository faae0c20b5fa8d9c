"""Reservation's objects: its namespace and ServiceAccount, the ClusterRole a run needs, the
ConfigMap with the run's settings and modules, and the CronJob."""


from ..base import gpu_count, kube_api, manifests
from ..base.facts import GPU_RESOURCE
from .actor import gpu_reservation
from .actor.gpu_reservation import Config
from .inputs import GpuReservationInputs

COMPONENT = "reservation"
CONFIG_DIR = "/reservation"
# The taint a reserved node carries; its value is the uid of the pod it is reserved for.
TAINT_KEY = "gpu-platform.io/reserved-for"
# What a node carrying it is, and who tolerates it (admission's refusal says it).
TAINT_MEANING = ("the taint of a node kept for a whole-node pod that waits; only the platform's "
                 "reservation run gives that toleration, to the pod the node is kept for")
# On a reserved node: the pod (namespace/name) and when the reservation ends (RFC 3339).
POD_ANNOTATION = "gpu-platform.io/reserved-for-pod"
UNTIL_ANNOTATION = "gpu-platform.io/reserved-until"
# On a pod whose reservation expired: when (RFC 3339); its wait starts over then.
ENDED_ANNOTATION = "gpu-platform.io/reservation-expired-at"
CONTROLLER = "gpu-platform.io/reservation"
# A run that has not ended by then is stopped (the Job fails); the next one starts over.
RUN_DEADLINE_SECONDS = 120
CONFIG_HASH_ANNOTATION = "gpu-platform.io/reservation-config-sha256"
MODULES = (gpu_reservation, gpu_count, kube_api)


def actor_config(inputs: GpuReservationInputs) -> Config:
    reservation = inputs.reservation
    return Config(
        schedulerName=inputs.scheduler_name,
        gpuResource=GPU_RESOURCE,
        dra=({"driver": inputs.dra_driver, "deviceClasses": inputs.gpu_device_classes}
             if inputs.dra_driver else None),
        minGpus=reservation.min_gpus,
        waitBefore=reservation.wait_before,
        waitBeforeSeconds=reservation.wait_before_seconds,
        expireAfter=reservation.expire_after,
        expireAfterSeconds=reservation.expire_after_seconds,
        maxNodes=reservation.max_nodes,
        maxShare=reservation.max_share,
        backfill=reservation.backfill,
        taintKey=TAINT_KEY,
        podAnnotation=POD_ANNOTATION,
        untilAnnotation=UNTIL_ANNOTATION,
        endedAnnotation=ENDED_ANNOTATION,
        controller=CONTROLLER)


def reservation_rules(inputs: GpuReservationInputs) -> list[dict]:
    """What a run does, and no more: read nodes and pods and, on the DRA path, where the
    devices are and who holds them; taint and annotate nodes; add a toleration and an
    annotation to a waiting pod; create events. Nothing is evicted or deleted."""
    rules = [manifests.rule([""], ["nodes"], ["get", "list", "patch"]),
             manifests.rule([""], ["pods"], ["list", "patch"]),
             manifests.rule(["events.k8s.io"], ["events"], ["create"])]
    if inputs.dra_driver:
        rules.append(manifests.rule(["resource.k8s.io"], ["resourceslices", "resourceclaims"],
                                    ["list"]))
    return rules


def rbac_objects(inputs: GpuReservationInputs) -> list[dict]:
    reservation = inputs.reservation
    return manifests.account_with_cluster_role(reservation.name, reservation.namespace,
                                               COMPONENT, reservation_rules(inputs))


def module_run(inputs: GpuReservationInputs) -> manifests.ModuleRun:
    reservation = inputs.reservation
    return manifests.module_run(reservation.name, reservation.namespace, COMPONENT,
                                inputs.image(reservation.image), CONFIG_DIR,
                                actor_config(inputs), gpu_reservation, MODULES,
                                reservation.resources)


def cron_job(inputs: GpuReservationInputs) -> dict:
    reservation = inputs.reservation
    run = module_run(inputs)
    # Its runs never overlap: two would reserve two nodes for one pod.
    return manifests.cron_job(
        reservation.name, reservation.namespace, COMPONENT, reservation.schedule,
        RUN_DEADLINE_SECONDS, {CONFIG_HASH_ANNOTATION: run.content_hash},
        {"containers": [run.container], "volumes": [run.volume]})


def reservation_objects(inputs: GpuReservationInputs) -> list[dict]:
    """Everything reservation needs, its namespace first."""
    return [manifests.namespace(inputs.reservation.namespace, "restricted", COMPONENT),
            *rbac_objects(inputs), module_run(inputs).config_map, cron_job(inputs)]
