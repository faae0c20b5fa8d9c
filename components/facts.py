"""Facts of the domain that the settings, the components and the admission policy share: NVIDIA's
resource and device names, what counts as a way to a GPU, Kubernetes' own names and limits, and
kube-scheduler's defaults. Each is written once, here, with where it was read from."""

from __future__ import annotations

# The extended resource the NVIDIA device plugin advertises for a whole GPU.
GPU_RESOURCE = "nvidia.com/gpu"
# MIG slices are advertised as nvidia.com/mig-<profile> (mixed strategy).
MIG_RESOURCE_PATTERN = "nvidia.com/mig-*"
# Everything NVIDIA's device plugins advertise: whole GPUs, shared GPUs renamed to
# nvidia.com/gpu.shared, MIG slices (shared or not), vGPU types and passthrough devices.
NVIDIA_RESOURCES = "nvidia.com/*"
# Device classes of NVIDIA's Dynamic Resource Allocation driver (gpu.nvidia.com,
# mig.nvidia.com, compute-domain-*.nvidia.com) end in this.
NVIDIA_DEVICE_CLASS_SUFFIX = "nvidia.com"
# Dynamic Resource Allocation (resource.k8s.io/v1), the GPU path Kubernetes 1.37 made standard:
# a DeviceClass that names an extended resource (`extendedResourceName`, GA in 1.37) serves pods
# that request it through the devices of its class.
DRA_MIN_KUBERNETES = (1, 37)
# NVIDIA's DRA driver (sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0, as GPU Operator v26.7.0 runs
# it): its driver name, the attribute that tells a whole GPU from a MIG device, and the MIG
# device's profile attribute.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
NVIDIA_DRA_KUBELET_PLUGIN = "nvidia-dra-driver-kubeletplugin"
# The pinned chart's DRA values (deployments/gpu-operator/values.yaml of v26.7.0): the keys
# under draDriver a stack may set. The GPUCluster resource deploys the DRA driver when
# gpuCluster.deployCR is on and clusterPolicy.deployCR off.
DRA_DRIVER_VALUES = {"repository": None, "image": None, "version": None,
                     "imagePullPolicy": None, "imagePullSecrets": None, "featureGates": None,
                     "gpus": {"kubeletPlugin": None},
                     "computeDomains": {"enabled": None, "controller": None,
                                        "kubeletPlugin": None}}
# The namespace label that lets claims there ask for adminAccess (DRA's monitoring access to
# every device), which the operator's DCGM exporter does.
DRA_ADMIN_ACCESS_LABEL = ("resource.kubernetes.io/admin-access", "true")
# Who writes ResourceClaims' allocations: kube-scheduler (the cluster's, and the binpack
# scheduler's ServiceAccount, added by the program) and the resource-claim controller, which
# releases them.
CLAIM_CONTROLLERS = ("system:kube-scheduler",
                     "system:serviceaccount:kube-system:resource-claim-controller",
                     "system:kube-controller-manager")
# Who creates the claims of a pod's ResourceClaimTemplates: the resource-claim controller.
CLAIM_TEMPLATE_CONTROLLERS = ("system:serviceaccount:kube-system:resource-claim-controller",
                              "system:kube-controller-manager")
# Who creates a DaemonSet's pods: the controller-manager's DaemonSet controller, with its own
# ServiceAccount (--use-service-account-credentials) or with the controller-manager's identity.
DAEMONSET_CONTROLLERS = ("system:serviceaccount:kube-system:daemon-set-controller",
                         "system:kube-controller-manager")
# Who creates a Job's pods: the controller-manager's Job controller, with its own ServiceAccount
# or with the controller-manager's identity.
JOB_CONTROLLERS = ("system:serviceaccount:kube-system:job-controller",
                   "system:kube-controller-manager")
# Who creates the pods of Deployments (their ReplicaSets) and StatefulSets: the
# controller-manager's controllers, with their own ServiceAccounts or its identity.
PARENT_CONTROLLERS = ("system:serviceaccount:kube-system:replicaset-controller",
                      "system:serviceaccount:kube-system:statefulset-controller",
                      "system:kube-controller-manager")
# GPU Feature Discovery (deployed by the GPU Operator) labels every node with a GPU so.
GPU_PRESENT_LABEL = ("nvidia.com/gpu.present", "true")
# In audit mode, pods admitted against the rules carry this label (value "violation").
AUDIT_LABEL = "gpu-platform.io/admission-audit"

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


def clean_path(path: str) -> str:
    """An absolute path as the kernel reads it: repeated slashes and `.` segments dropped."""
    return "/" + "/".join(part for part in path.split("/") if part not in ("", "."))


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

# Oldest Kubernetes minor the program supports: matchConditions on admission webhooks are GA
# from 1.30, and the scheduler configuration API is kubescheduler.config.k8s.io/v1.
MIN_KUBERNETES = (1, 30)

# Namespaces that always bypass the admission webhook: the control plane's own, OPA's own (a
# webhook that guards the pods that serve it can deadlock), and the GPU Operator's (its validator
# pods request nvidia.com/gpu and are scheduled by the default scheduler).
ALWAYS_EXEMPT = ("kube-system",)

# Namespaces the program must never create or delete.
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# Score plugins of kube-scheduler's default profile and their weights there
# (pkg/scheduler/apis/config/v1/default_plugins.go of k8s.io/kubernetes, 1.30 to 1.36).
DEFAULT_SCORE_WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1,
                         "PodTopologySpread": 2, "InterPodAffinity": 2,
                         "NodeResourcesBalancedAllocation": 1, "ImageLocality": 1}
# What the binpack profile changes (0: the plugin does not score). BalancedAllocation favours
# nodes whose CPU and memory are equally used, which is unrelated to where GPUs are free;
# ImageLocality favours nodes that already hold the image, which an idle node often does.
# Either can outweigh one GPU's worth of NodeResourcesFit, so both are off
# (docs/concepts/binpack-scheduler.md).
BINPACK_SCORE_WEIGHTS = {"NodeResourcesBalancedAllocation": 0, "ImageLocality": 0}
