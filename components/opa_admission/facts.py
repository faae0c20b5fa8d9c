"""Facts the admission policy decides with: who creates which pods and claims, what gives a
container a GPU other than the GPU resource on a GPU node, and which namespaces the webhooks
never see. Each is written once, here, with where it was read from."""

from __future__ import annotations

from dataclasses import dataclass

# Device classes of NVIDIA's Dynamic Resource Allocation driver (gpu.nvidia.com,
# mig.nvidia.com, vfio.gpu.nvidia.com, compute-domain-*.nvidia.com) and its drivers' names
# (gpu.nvidia.com, compute-domain.nvidia.com) end in this.
NVIDIA_DEVICE_CLASS_SUFFIX = "nvidia.com"
# Every DeviceClass also serves the extended resource of this prefix and its own name, whatever
# its extendedResourceName (Kubernetes 1.37: ResourceDeviceClassPrefix, k8s.io/api
# resource/v1; the DRAExtendedResource gate is locked on): a container may ask for a class's
# devices by that name.
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
# The opaque configuration NVIDIA's DRA driver (v0.5.0) reads from a claim, by its kind
# (apiVersion resource.nvidia.com/v1beta1): how the claim's own GPUs are shared among the pods
# that share the claim (time-slicing, MPS), and which ComputeDomain's IMEX channel or daemon a
# claim joins (written by the driver's compute-domain controller into the templates it makes).
GPU_SHARING_CONFIG_KINDS = ("GpuConfig", "MigDeviceConfig")
COMPUTE_DOMAIN_CONFIG_KINDS = ("ComputeDomainChannelConfig", "ComputeDomainDaemonConfig")
# Who writes ResourceClaims' allocations: kube-scheduler (the cluster's, and the binpack
# scheduler's ServiceAccount, added by the program) and the resource-claim controller, which
# releases them.
CLAIM_CONTROLLERS = ("system:kube-scheduler",
                     "system:serviceaccount:kube-system:resource-claim-controller",
                     "system:kube-controller-manager")
# The controller-manager's controllers that create pods, each with its own ServiceAccount
# (--use-service-account-credentials), or all with the controller-manager's identity.
CONTROLLER_MANAGER = "system:kube-controller-manager"
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
STATEFULSET_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"
# Who creates a DaemonSet's pods.
DAEMONSET_CONTROLLERS = (DAEMONSET_CONTROLLER, CONTROLLER_MANAGER)
# Who creates a Job's pods.
JOB_CONTROLLERS = (JOB_CONTROLLER, CONTROLLER_MANAGER)
# Who creates the pods of Deployments (their ReplicaSets) and StatefulSets.
PARENT_CONTROLLERS = (REPLICASET_CONTROLLER, STATEFULSET_CONTROLLER, CONTROLLER_MANAGER)
# Device paths: what gives a container a GPU other than the GPU resource, on a GPU node.
# The capabilities that make the NVIDIA container toolkit (v1.20.0, as the operator chart pins it)
# treat a container as privileged: CAP_SYS_ADMIN in its bounding set (and ALL, which holds it).
PRIVILEGED_CAPABILITIES = ("SYS_ADMIN", "ALL")
# Host paths that hold GPU devices, driver files or a way to them, each spelled as the node
# resolves it (HOST_PATH_ALIASES lists the other spellings): device nodes, the driver's /proc and
# /sys entries and libraries (host, GKE and standalone installs), the container runtimes' sockets
# and state (containerd, CRI-O, k3s and RKE2's containerd, Docker and cri-dockerd, Bottlerocket's
# host containerd; the NRI socket) and CDI specs, the kubelet's device-plugin, DRA-plugin and
# pod-resources sockets, and the MPS pipes of GKE's device plugin. A mount of one of them, of a
# path under one, or of a directory that holds one (/, /usr, /run, /var) is a device path.
DEVICE_HOST_PATHS = ("/dev", "/proc", "/sys", "/usr/lib", "/usr/lib64", "/usr/local/nvidia",
                     "/home/kubernetes/bin/nvidia", "/var/lib/nvidia", "/run/nvidia",
                     "/run/containerd", "/run/crio", "/run/k3s", "/run/docker", "/run/docker.sock",
                     "/run/cri-dockerd.sock", "/run/dockershim.sock", "/run/host-containerd",
                     "/run/nri", "/run/cdi", "/etc/cdi", "/var/lib/kubelet", "/tmp/nvidia-mps")
# Other spellings of the same host directories, as (spelling, where the node resolves it):
# symlinks every systemd distribution has (/var/run) or merged /usr has (/lib, /lib64, /bin,
# /sbin), and the bind mounts and symlinks of Bottlerocket (/local/*, its sys-root /usr) and
# Container-Optimized OS (/mnt/stateful_partition/*). A path is compared in every spelling.
HOST_PATH_ALIASES = (("/var/run", "/run"), ("/lib", "/usr/lib"), ("/lib64", "/usr/lib64"),
                     ("/bin", "/usr/bin"), ("/sbin", "/usr/sbin"),
                     ("/local/var", "/var"), ("/local/opt", "/opt"), ("/local/mnt", "/mnt"),
                     ("/x86_64-bottlerocket-linux-gnu/sys-root/usr", "/usr"),
                     ("/aarch64-bottlerocket-linux-gnu/sys-root/usr", "/usr"),
                     ("/mnt/stateful_partition/var", "/var"),
                     ("/mnt/stateful_partition/home", "/home"))
# The NVIDIA container toolkit reads a container's mounts whose destination starts with this (a
# plain string prefix, after cleaning the path) as a list of GPUs to give it, `all` included
# (the device plugin's volume-mounts strategy; toolkit v1.20.0, internal/config/image).
TOOLKIT_DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"


def path_spellings(path: str) -> list[str]:
    """Every spelling of a host path through HOST_PATH_ALIASES (the path itself first)."""
    spellings = [path]
    for spelling in spellings:
        for alias, target in HOST_PATH_ALIASES:
            if spelling == target or spelling.startswith(target + "/"):
                other = alias + spelling[len(target):]
                if other not in spellings:
                    spellings.append(other)
    return spellings


# Pod annotations that make the runtime inject devices: CDI's (honoured by containerd and CRI-O
# with CDI on, as the GPU Operator configures them) and the NVIDIA toolkit's NRI plugin's.
DEVICE_ANNOTATION_PREFIXES = ("cdi.k8s.io/", "nvidia.cdi.k8s.io/")
# The namespace the webhooks never see whatever the stack says: the control plane's own. (OPA's
# own is exempt too, since a webhook that guards the pods that serve it can deadlock, and so are
# the trusted namespaces of the platform's other components: OpaAdmissionInputs says which.)
ALWAYS_EXEMPT = ("kube-system",)


# --- workloads' pod templates --------------------------------------------------------------------
@dataclass(frozen=True)
class PodTemplate:
    """Where a workload keeps one pod template (`[]`: each item of a list, `{}`: each value of a
    map), who creates the pods made from it, and the controller owner reference it sets on
    them (apiVersion, kind)."""

    path: str
    creator: str
    owner: tuple[str, str]


@dataclass(frozen=True)
class WorkloadKind:
    """A kind of workload whose controller makes pods from its pod templates."""

    group: str
    kind: str
    resource: str
    templates: tuple[PodTemplate, ...]


# The operators of KubeRay and of Kubeflow's training operator create their pods themselves,
# with ServiceAccounts whose namespace depends on the install; no rule grants them anything, so
# the pods made from their templates are decided as any user's controller-owned pods.
KUBERAY_OPERATOR = "system:serviceaccount:<operator namespace>:kuberay-operator"
TRAINING_OPERATOR = "system:serviceaccount:<operator namespace>:training-operator"
_JOBS_PODS = (JOB_CONTROLLER, ("batch/v1", "Job"))
_RAY_PODS = (KUBERAY_OPERATOR, ("ray.io/v1", "RayCluster"))
# The kinds whose pod templates the templates webhook decides, with their paths as the CRDs
# name them: JobSet v0.12.0, LeaderWorkerSet v0.9.0 (its leader and worker StatefulSets),
# KubeRay ray-operator v1.6.2 (a RayJob's cluster, and the Job of its submitter), the Kubeflow
# training operator v1.9.2. A TrainJob (Kubeflow Trainer v2) has none: its pods' templates live
# in its TrainingRuntime.
WORKLOAD_KINDS = (
    WorkloadKind("apps", "Deployment", "deployments", (
        PodTemplate("spec.template", REPLICASET_CONTROLLER, ("apps/v1", "ReplicaSet")),)),
    WorkloadKind("apps", "ReplicaSet", "replicasets", (
        PodTemplate("spec.template", REPLICASET_CONTROLLER, ("apps/v1", "ReplicaSet")),)),
    WorkloadKind("apps", "StatefulSet", "statefulsets", (
        PodTemplate("spec.template", STATEFULSET_CONTROLLER, ("apps/v1", "StatefulSet")),)),
    WorkloadKind("apps", "DaemonSet", "daemonsets", (
        PodTemplate("spec.template", DAEMONSET_CONTROLLER, ("apps/v1", "DaemonSet")),)),
    WorkloadKind("batch", "Job", "jobs", (PodTemplate("spec.template", *_JOBS_PODS),)),
    WorkloadKind("batch", "CronJob", "cronjobs", (
        PodTemplate("spec.jobTemplate.spec.template", *_JOBS_PODS),)),
    WorkloadKind("jobset.x-k8s.io", "JobSet", "jobsets", (
        PodTemplate("spec.replicatedJobs[].template.spec.template", *_JOBS_PODS),)),
    WorkloadKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", tuple(
        PodTemplate(f"spec.leaderWorkerTemplate.{role}Template", STATEFULSET_CONTROLLER,
                    ("apps/v1", "StatefulSet")) for role in ("leader", "worker"))),
    WorkloadKind("ray.io", "RayCluster", "rayclusters", (
        PodTemplate("spec.headGroupSpec.template", *_RAY_PODS),
        PodTemplate("spec.workerGroupSpecs[].template", *_RAY_PODS))),
    WorkloadKind("ray.io", "RayJob", "rayjobs", (
        PodTemplate("spec.rayClusterSpec.headGroupSpec.template", *_RAY_PODS),
        PodTemplate("spec.rayClusterSpec.workerGroupSpecs[].template", *_RAY_PODS),
        PodTemplate("spec.submitterPodTemplate", *_JOBS_PODS))),
    WorkloadKind("kubeflow.org", "PyTorchJob", "pytorchjobs", (
        PodTemplate("spec.pytorchReplicaSpecs{}.template", TRAINING_OPERATOR,
                    ("kubeflow.org/v1", "PyTorchJob")),)),
)
# The priority classes every cluster has, with their priorities (k8s.io/api scheduling/v1:
# SystemCriticalPriority and the node-critical class above it): a template that names one is
# decided with that priority, as the API server resolves it for the pod.
BUILTIN_PRIORITY_CLASSES = {"system-cluster-critical": 2_000_000_000,
                            "system-node-critical": 2_000_001_000}
