"""Facts of the domain that several components share, each written once, with where it was
read from: NVIDIA's resource names, Kubernetes' own names and limits, Kueue's names, and the
names by which one component finds another's objects (webhooks, Services, ports). A fact
that only one component uses lives in that component's package."""

from __future__ import annotations

from dataclasses import dataclass

# The extended resource the NVIDIA device plugin advertises for a whole GPU.
GPU_RESOURCE = "nvidia.com/gpu"
# MIG slices are advertised as nvidia.com/mig-<profile> (mixed strategy).
MIG_RESOURCE_PATTERN = "nvidia.com/mig-*"
# Everything NVIDIA's device plugins advertise: whole GPUs, shared GPUs renamed to
# nvidia.com/gpu.shared, MIG slices (shared or not), vGPU types and passthrough devices.
NVIDIA_RESOURCES = "nvidia.com/*"
# Dynamic Resource Allocation (resource.k8s.io/v1), the GPU path Kubernetes 1.37 made standard:
# a DeviceClass that names an extended resource (`extendedResourceName`, GA in 1.37) serves pods
# that request it through the devices of its class.
DRA_MIN_KUBERNETES = (1, 37)
# GPU Feature Discovery (deployed by the GPU Operator) labels every node with a GPU so.
GPU_PRESENT_LABEL = ("nvidia.com/gpu.present", "true")
# In audit mode, pods admitted against the rules carry this label (value "violation").
AUDIT_LABEL = "gpu-platform.io/admission-audit"
# Where an image reference without a registry host comes from.
DEFAULT_REGISTRY = "docker.io"


def split_registry(repository: str) -> tuple[str, str]:
    """(registry host, path) of an image repository, as container runtimes read it: the first
    component is a host when it has a dot or a port or is localhost, else it is Docker Hub's."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return DEFAULT_REGISTRY, repository if "/" in repository else f"library/{repository}"


def resource_matches(name: str, pattern: str) -> bool:
    """Whether a resource name matches a guarded name or prefix pattern (trailing *)."""
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def mig_resource(profile: str) -> str:
    return MIG_RESOURCE_PATTERN.replace("*", profile)


# Stands for any MIG profile in the shapes of the platform's per-profile DeviceClasses (their
# names, selectors and the resources they serve), as the GPU Operator component hands them to
# the admission policy.
PROFILE_PLACEHOLDER = "{profile}"


# Oldest Kubernetes minor the program supports: matchConditions on admission webhooks are GA
# from 1.30, and the scheduler configuration API is kubescheduler.config.k8s.io/v1.
MIN_KUBERNETES = (1, 30)
# Namespaces the program must never create or delete.
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# Node labels whose value is one multi-node NVLink domain (an NVL72 rack): GPU Feature
# Discovery's clique (<cluster UUID>.<clique ID>), and NVIDIA topograph's accelerator domain.
GFD_CLIQUE_LABEL = "nvidia.com/gpu.clique"
TOPOGRAPH_ACCELERATOR_LABEL = "network.topology.nvidia.com/accelerator"
NVLINK_DOMAIN_LABELS = (GFD_CLIQUE_LABEL, TOPOGRAPH_ACCELERATOR_LABEL)
# What NVIDIA's DRA driver's compute-domain controller puts on the claim templates it makes for a
# ComputeDomain (kubernetes-sigs/dra-driver-nvidia-gpu cmd/compute-domain-controller): the
# domain's UID, and whether a template is for the workload's pods or the IMEX daemons.
COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
COMPUTE_DOMAIN_TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"

# --- Kueue (sigs.k8s.io/kueue v0.19.2), as the teams' queues and the admission policy use it ----
KUEUE_API = "kueue.x-k8s.io/v1beta2"
# The LocalQueue Kueue gives every workload of a namespace that names no queue.
KUEUE_DEFAULT_QUEUE = "default"
# What Kueue puts on the pods it manages, and what the Job controller's pods of a workload it
# admitted carry (the admission policy reads them; pkg/controller/jobs/pod). The admission gate
# holds a pod until Kueue admits it; the topology gate (topology-aware scheduling, on by default)
# until Kueue has placed it. The managed label marks a pod Kueue's pod integration took over;
# the parent annotation one a Deployment's, StatefulSet's or LeaderWorkerSet's template holds
# for Kueue; the group key joins pods into one workload.
KUEUE_PREFIX = "kueue.x-k8s.io/"
ADMISSION_GATE = KUEUE_PREFIX + "admission"
TOPOLOGY_GATE = KUEUE_PREFIX + "topology"
# The annotations of a pod template by which a pod set asks Kueue for one domain of a level.
REQUIRED_TOPOLOGY = KUEUE_PREFIX + "podset-required-topology"
PREFERRED_TOPOLOGY = KUEUE_PREFIX + "podset-preferred-topology"
MANAGED_LABEL = KUEUE_PREFIX + "managed"
PARENT_ANNOTATION = KUEUE_PREFIX + "pod-suspending-parent"
POD_GROUP_KEY = KUEUE_PREFIX + "pod-group-name"
PODSET_LABEL = KUEUE_PREFIX + "podset"
QUEUE_LABEL = KUEUE_PREFIX + "queue-name"
@dataclass(frozen=True)
class KueueIntegration:
    """A kind of workload Kueue admits as a whole: its integration's name in Kueue's
    Configuration, its API, and the field Kueue suspends it with until it admits it (empty
    for kinds whose pods Kueue holds by their scheduling gates instead). `crds` names where the
    kind's CRD comes from, for kinds the platform does not install."""

    name: str
    group: str
    kind: str
    resource: str
    suspend: str = ""
    crds: str = ""


# Kueue v0.19.2's integrations the platform turns on: the built-in kinds always, the
# frameworks' as `teams.frameworks` says. Their suspend fields are those Kueue's integrations
# read (pkg/controller/jobs/*: IsSuspended); the CRDs' versions are those Kueue v0.19.2 is
# built against (its go.mod).
BUILTIN_INTEGRATIONS = (
    KueueIntegration("batch/job", "batch", "Job", "jobs", "spec.suspend"),
    KueueIntegration("pod", "", "Pod", "pods"),
    KueueIntegration("deployment", "apps", "Deployment", "deployments"),
    KueueIntegration("statefulset", "apps", "StatefulSet", "statefulsets"),
)
FRAMEWORK_INTEGRATIONS = (
    KueueIntegration("jobset.x-k8s.io/jobset", "jobset.x-k8s.io", "JobSet", "jobsets",
                     "spec.suspend", "JobSet v0.12.0"),
    KueueIntegration("leaderworkerset.x-k8s.io/leaderworkerset", "leaderworkerset.x-k8s.io",
                     "LeaderWorkerSet", "leaderworkersets", "", "LeaderWorkerSet v0.9.0"),
    KueueIntegration("trainer.kubeflow.org/trainjob", "trainer.kubeflow.org", "TrainJob",
                     "trainjobs", "spec.suspend", "Kubeflow Trainer v2.2.1"),
    KueueIntegration("kubeflow.org/pytorchjob", "kubeflow.org", "PyTorchJob", "pytorchjobs",
                     "spec.runPolicy.suspend", "the Kubeflow training operator v1.9.3"),
    KueueIntegration("ray.io/rayjob", "ray.io", "RayJob", "rayjobs", "spec.suspend",
                     "KubeRay v1.6.2"),
    KueueIntegration("ray.io/raycluster", "ray.io", "RayCluster", "rayclusters", "spec.suspend",
                     "KubeRay v1.6.2"),
)


def kueue_integrations(frameworks: list[str]) -> list[KueueIntegration]:
    """The integrations Kueue runs with: the built-in ones and the stack's frameworks'."""
    return [*BUILTIN_INTEGRATIONS, *(f for f in FRAMEWORK_INTEGRATIONS if f.name in frameworks)]

# Facts of the pinned chart (charts/kueue): the names a release gives its Deployment and its
# metrics Service's port, after the chart's fullname.
KUEUE_CHART = "kueue"
KUEUE_DEPLOYMENT = "controller-manager"
KUEUE_METRICS_PORT_NAME = "https"


def kueue_fullname(release: str) -> str:
    """The chart's name for a release's objects: the release's, when it contains `kueue`."""
    return release if KUEUE_CHART in release else f"{release}-{KUEUE_CHART}"


def kueue_deployment_name(release: str) -> str:
    return f"{kueue_fullname(release)}-{KUEUE_DEPLOYMENT}"


def service_account_user(namespace: str, name: str) -> str:
    """A ServiceAccount's user name in the API server's requests (what admission reads)."""
    return f"system:serviceaccount:{namespace}:{name}"


def kueue_controller_user(namespace: str, release: str) -> str:
    """Kueue's identity in the API server's requests: its controller-manager's ServiceAccount."""
    return service_account_user(namespace, kueue_deployment_name(release))


# A GPU is active while its engine activity (a fraction of time) is above this: the default of
# monitoring.usage.activeThreshold, the one threshold of idle, which reclaim reports with too.
DEFAULT_ACTIVE_THRESHOLD = 0.05


# Kueue's quota gauges, from the replica that decides (every replica serves metrics; a follower's
# are not current). GPU resources only: the queues count nothing else.
KUEUE_GPUS = 'resource=~"nvidia[.]com/.*", replica_role!="follower"'


def kueue_series(metric: str, by: str = "cluster_queue, resource", where: str = "") -> str:
    """A Kueue gauge of GPU resources, summed `by`."""
    return f"sum by ({by}) (kueue_{metric}{{{KUEUE_GPUS}{where}}})"


def kueue_metrics_service_labels(release: str) -> dict[str, str]:
    """The labels of the chart's metrics Service (and of no other Service)."""
    return {"app.kubernetes.io/instance": release, "app.kubernetes.io/component": "metrics-service"}


# --- how one component finds another's objects -------------------------------------------------
# The admission webhooks, named after `admission.webhookName`: the mutating one (mutate and audit
# modes), the one on a team's Jobs and JobSets, and the one on Dynamic Resource Allocation.
def mutating_webhook(webhook_name: str) -> str:
    return f"mutate.{webhook_name}"


def workloads_webhook(webhook_name: str) -> str:
    return f"jobs.{webhook_name}"


def claims_webhook(webhook_name: str) -> str:
    return f"dra.{webhook_name}"


def refusing_webhooks(webhook_name: str, teams: bool) -> list[str]:
    """The webhooks that refuse: every validating webhook admission registers (a team's Jobs
    have one of their own when teams are on)."""
    return [webhook_name, claims_webhook(webhook_name),
            *([workloads_webhook(webhook_name)] if teams else [])]


# The platform's own pods by their `app.kubernetes.io/name` and `component` labels, and the named
# ports of their metrics, which Monitoring scrapes: the binpack scheduler's (its name is
# `scheduler.name`), and OPA's (/health and /metrics).
SCHEDULER_COMPONENT = "scheduler"
SCHEDULER_METRICS_PORT_NAME = "https-metrics"
OPA_SERVICE = "opa"
ADMISSION_COMPONENT = "admission"
OPA_DIAGNOSTIC_PORT_NAME = "diagnostics"
# Facts of the pinned GPU Operator chart (assets/state-dcgm-exporter, and
# manifests/state-dcgm-exporter for the DRA stack, at v26.7.0): the Service the operator creates
# for the DCGM exporter on each GPU path, and its metrics port, which Monitoring scrapes.
DCGM_SERVICE_LABELS = {"devicePlugin": {"app": "nvidia-dcgm-exporter"},
                       "dra": {"app": "nvidia-dcgm-exporter-dra"}}
DCGM_METRICS_PORT = "gpu-metrics"
