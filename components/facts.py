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
# Who creates a DaemonSet's pods: the controller-manager's DaemonSet controller, with its own
# ServiceAccount (--use-service-account-credentials) or with the controller-manager's identity.
DAEMONSET_CONTROLLERS = ("system:serviceaccount:kube-system:daemon-set-controller",
                         "system:kube-controller-manager")
# Who creates a Job's pods: the controller-manager's Job controller, with its own ServiceAccount
# or with the controller-manager's identity.
JOB_CONTROLLERS = ("system:serviceaccount:kube-system:job-controller",
                   "system:kube-controller-manager")
# GPU Feature Discovery (deployed by the GPU Operator) labels every node with a GPU so.
GPU_PRESENT_LABEL = ("nvidia.com/gpu.present", "true")
# In audit mode, pods admitted against the rules carry this label (value "violation").
AUDIT_LABEL = "gpu-platform.io/admission-audit"

# Device paths: what gives a container a GPU other than the GPU resource, on a GPU node.
# The capabilities that make the NVIDIA container toolkit (v1.20.0, as the operator chart pins it)
# treat a container as privileged: CAP_SYS_ADMIN in its bounding set (and ALL, which holds it).
PRIVILEGED_CAPABILITIES = ("SYS_ADMIN", "ALL")
# Host paths that hold GPU devices, driver files or a way to them: device nodes, the driver's
# /proc and /sys entries and libraries (host and GKE installs), the container runtimes' sockets
# and CDI specs, the kubelet's device-plugin and pod-resources sockets. A mount of one of them,
# of a path under one, or of a directory that holds one (/, /usr, /run) is a device path.
DEVICE_HOST_PATHS = ("/dev", "/proc", "/sys", "/usr/lib", "/usr/lib64", "/lib", "/lib64",
                     "/usr/local/nvidia", "/home/kubernetes/bin/nvidia", "/run/nvidia",
                     "/var/run/nvidia", "/run/containerd", "/var/run/containerd", "/run/crio",
                     "/var/run/crio", "/run/nri", "/var/run/nri", "/run/cdi", "/var/run/cdi",
                     "/etc/cdi", "/var/lib/kubelet")
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
