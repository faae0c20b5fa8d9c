"""The admission policy, run in real OPA (the version the platform ships) with the policy files
and parameters exactly as the program puts them in its ConfigMaps, and the webhook's
matchConditions run in a real CEL engine."""

import base64
import json
import shutil
import subprocess

import jsonpatch
import pytest
from test_settings import TEAMS, with_changes

import harness
from components import opa_admission, teams
from components.facts import AUDIT_LABEL, JOB_CONTROLLERS
from policy_harness import (
    K8S,
    MODES,
    PARAMS_FIXTURE,
    POLICY,
    STACKS,
    USER,
    decide,
    deployed_policy,
    deployed_stack,
    evaluate,
    params_fixture,
    review,
    sent_to_opa,
)

BINPACK = "gpu-binpack-scheduler"


DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"


def container(name="main", requests=None, limits=None, env=None, privileged=None,
              capabilities=None):
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    c = {"name": name, "image": "trainer:1", "resources": resources}
    if env:
        c["env"] = env
    security: dict = {}
    if privileged is not None:
        security["privileged"] = privileged
    if capabilities:
        security["capabilities"] = {"add": capabilities}
    if security:
        c["securityContext"] = security
    return c


GPU = {"nvidia.com/gpu": "1"}
MIG = {"nvidia.com/mig-1g.10gb": "1"}
CPU = {"cpu": "2", "memory": "4Gi"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                  "effect": "NoSchedule"}
DAEMONSET_OWNER = {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                        "name": "node-exporter", "uid": "d1", "controller": True}]}
EVERY_TAINT = [{"operator": "Exists"}]
ZERO_GPUS = {"nvidia.com/gpu": "0"}
NIC = {"nvidia.com/rdma_shared_device_a": "1"}


def daemonset_pod(**spec):
    """A DaemonSet's pod as the DaemonSet controller creates it: a node agent tolerating every
    taint."""
    return review({"tolerations": EVERY_TAINT, "containers": [container()], **spec},
                  user=DAEMONSET_CONTROLLER, metadata=DAEMONSET_OWNER)


def host_path(path: str) -> list[dict]:
    return [{"name": "host", "hostPath": {"path": path}}]


EMPTY_DIR = [{"name": "scratch", "emptyDir": {}}]


def mounting(c: dict, mount_path: str, volume: str = "scratch") -> dict:
    """A container with the volume mounted at `mount_path`."""
    return {**c, "volumeMounts": [{"name": volume, "mountPath": mount_path}]}


def annotated(spec: dict, annotations: dict, **kwargs):
    return review(spec, metadata={"annotations": annotations}, **kwargs)


JOB_OWNER = {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                   "uid": "5d1e", "controller": True}]}


def binpack(*containers, **spec):
    return {"schedulerName": BINPACK, "tolerations": [GPU_TOLERATION],
            "containers": list(containers), **spec}


def claim(spec, kind="ResourceClaim"):
    return review(spec if kind == "ResourceClaim" else {"spec": spec}, kind=kind,
                  group="resource.k8s.io", name="gpus")


def requests_of(*requests):
    return {"devices": {"requests": list(requests)}}


# (case, AdmissionReview, allowed in enforce mode, fragments the refusal message must contain)
CASES = [
    # the scheduler
    ("gpu limit on the default scheduler", review({"containers": [container(limits=GPU)]}),
     False, ['pod "team-a/train-0"', 'container "main"', "nvidia.com/gpu",
             'spec.schedulerName is "default-scheduler"',
             f"must set spec.schedulerName: {BINPACK}"]),
    ("gpu request without limit", review({"containers": [container(requests=GPU)]}),
     False, ['container "main" requests nvidia.com/gpu']),
    ("gpu pod on the binpack scheduler", review(binpack(container(limits=GPU))), True, []),
    ("gpu pod on another scheduler",
     review({"schedulerName": "volcano", "containers": [container(limits=GPU)]}),
     False, ['spec.schedulerName is "volcano"']),
    ("explicit default scheduler",
     review({"schedulerName": "default-scheduler", "containers": [container(limits=GPU)]}),
     False, ['spec.schedulerName is "default-scheduler"']),
    ("gpu in an init container",
     review({"containers": [container(requests=CPU)],
             "initContainers": [container("warmup", limits=GPU)]}),
     False, ['init container "warmup" requests nvidia.com/gpu']),
    ("gpu in an ephemeral container",
     review({"containers": [container(requests=CPU)],
             "ephemeralContainers": [container("debug", limits=GPU)]}),
     False, ['ephemeral container "debug" requests nvidia.com/gpu']),
    ("mig slice on the default scheduler", review({"containers": [container(limits=MIG)]}),
     False, ['requests nvidia.com/mig-1g.10gb']),
    ("mig slice on the binpack scheduler", review(binpack(container(limits=MIG))), True, []),
    ("two offending containers named",
     review({"containers": [container("a", limits=GPU), container("b", requests=MIG)]}),
     False, ['container "a"', 'container "b"']),
    ("generated name", review({"containers": [container(limits=GPU)]}, name=None,
                              generate_name="job-"),
     False, ['pod "team-a/job-*"']),
    # renamed and other NVIDIA resources
    ("time-sliced GPU renamed to nvidia.com/gpu.shared",
     review({"containers": [container(limits={"nvidia.com/gpu.shared": "1"})]}),
     False, ["requests nvidia.com/gpu.shared"]),
    ("shared MIG slice", review({"containers": [container(
        limits={"nvidia.com/mig-1g.10gb.shared": "1"})]}),
     False, ["requests nvidia.com/mig-1g.10gb.shared"]),
    ("vGPU type", review({"containers": [container(limits={"nvidia.com/GRID_A100-4C": "1"})]}),
     False, ["requests nvidia.com/GRID_A100-4C"]),
    ("passthrough GPU", review({"containers": [container(
        limits={"nvidia.com/GA102GL_A10": "1"})]}),
     False, ["requests nvidia.com/GA102GL_A10"]),
    # spec.nodeName
    ("gpu pod naming its node",
     review(binpack(container(limits=GPU), nodeName="gpu-node-1")),
     False, ['spec.nodeName "gpu-node-1" skips the scheduler', "remove spec.nodeName"]),
    ("gpu pod naming a cpu node",
     review(binpack(container(limits=GPU), nodeName="cpu-node-1")),
     False, ['spec.nodeName "cpu-node-1" skips the scheduler']),
    ("cpu pod naming a gpu node",
     review({"nodeName": "gpu-node-2", "containers": [container(requests=CPU)]}),
     False, ['spec.nodeName "gpu-node-2" skips the scheduler', "it is a GPU node"]),
    ("cpu pod naming a cpu node",
     review({"nodeName": "cpu-node-1", "containers": [container(requests=CPU)]}), True, []),
    # GPU nodes are for GPU pods
    ("cpu pod tolerating the gpu taint",
     review({"tolerations": [GPU_TOLERATION], "containers": [container(requests=CPU)]}),
     False, ["requests no GPU but tolerates the GPU node taint nvidia.com/gpu=present:NoSchedule"]),
    ("cpu pod tolerating every taint",
     review({"tolerations": [{"operator": "Exists"}], "containers": [container()]}),
     False, ["tolerates the GPU node taint"]),
    ("cpu pod tolerating the gpu key with Exists",
     review({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
             "containers": [container()]}), False, ["tolerates the GPU node taint"]),
    ("cpu pod tolerating the gpu key for NoExecute only",
     review({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                              "effect": "NoExecute"}], "containers": [container()]}), True, []),
    ("cpu pod tolerating another value",
     review({"tolerations": [{**GPU_TOLERATION, "value": "absent"}],
             "containers": [container()]}), True, []),
    ("daemonset pod from the daemonset controller",
     review({"tolerations": [{"operator": "Exists"}], "containers": [container()]},
            user=DAEMONSET_CONTROLLER, metadata=DAEMONSET_OWNER), True, []),
    ("pod claiming a daemonset owner, made by a user",
     review({"tolerations": [{"operator": "Exists"}], "containers": [container()]},
            metadata=DAEMONSET_OWNER), False, ["tolerates the GPU node taint"]),
    ("update adding the gpu toleration to a cpu pod",
     review({"tolerations": [GPU_TOLERATION], "containers": [container()]},
            operation="UPDATE", old_spec={"containers": [container()]}),
     False, ["tolerates the GPU node taint"]),
    ("update of a pod that already tolerated",
     review({"tolerations": [GPU_TOLERATION], "containers": [container()]},
            operation="UPDATE", old_spec={"tolerations": [GPU_TOLERATION],
                                          "containers": [container()]}), True, []),
    # seeing GPUs without asking for one
    ("NVIDIA_VISIBLE_DEVICES=all without a GPU",
     review({"containers": [container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]}),
     False, ['container "main" sets NVIDIA_VISIBLE_DEVICES']),
    ("NVIDIA_VISIBLE_DEVICES from a ConfigMap key",
     review(binpack(container(limits=GPU, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
         "configMapKeyRef": {"name": "gpus", "key": "all"}}}]))),
     False, ["sets NVIDIA_VISIBLE_DEVICES"]),
    ("NVIDIA_VISIBLE_DEVICES=void", review({"containers": [container(
        env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])]}), True, []),
    ("debug container with NVIDIA_VISIBLE_DEVICES added to a running pod",
     review(binpack(container(limits=GPU), nodeName="gpu-node-1", ephemeralContainers=[
         container("debugger", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]),
         operation="UPDATE", sub_resource="ephemeralcontainers",
         old_spec=binpack(container(limits=GPU), nodeName="gpu-node-1")),
     False, ['ephemeral container "debugger" sets NVIDIA_VISIBLE_DEVICES']),
    ("nvidia runtime class without a GPU",
     review({"runtimeClassName": "nvidia", "containers": [container()]}),
     False, ['spec.runtimeClassName is "nvidia"']),
    ("nvidia runtime class with a GPU",
     review(binpack(container(limits=GPU), runtimeClassName="nvidia")), True, []),
    # device paths: a pod that may run on a GPU node reaches GPUs only through the GPU resource
    ("privileged gpu container",
     review(binpack(container(limits=GPU, privileged=True))),
     False, ['container "main" is privileged, and it may run on a GPU node (it requests '
             'nvidia.com/gpu)', "a GPU is reached only through the GPU resource",
             "run it unprivileged"]),
    ("privileged debug container on a gpu node",
     review(binpack(container(limits=GPU), nodeName="gpu-node-1", ephemeralContainers=[
         container("debugger", privileged=True)]),
         operation="UPDATE", sub_resource="ephemeralcontainers",
         old_spec=binpack(container(limits=GPU), nodeName="gpu-node-1")),
     False, ['ephemeral container "debugger" is privileged']),
    ("privileged debug container on a cpu pod's cpu node",
     review({"nodeName": "cpu-node-1", "containers": [container()], "ephemeralContainers": [
         container("debugger", privileged=True)]}, operation="UPDATE",
         sub_resource="ephemeralcontainers",
         old_spec={"nodeName": "cpu-node-1", "containers": [container()]}), True, []),
    ("privileged cpu pod", review({"containers": [container(privileged=True)]}), True, []),
    ("SYS_ADMIN in a gpu pod's sidecar that asks for no GPU",
     review(binpack(container(limits=GPU), container("sidecar", capabilities=["SYS_ADMIN"]))),
     False, ['container "sidecar" adds the capability SYS_ADMIN, which the NVIDIA container '
             "toolkit treats as privileged", "drop it"]),
    ("ALL capabilities in a gpu container",
     review(binpack(container(limits=GPU, capabilities=["ALL"]))),
     False, ["adds the capability ALL"]),
    ("cap_sys_admin spelled in lower case with its prefix",
     review(binpack(container(limits=GPU, capabilities=["cap_sys_admin"]))),
     False, ["adds the capability cap_sys_admin"]),
    ("another capability in a gpu container",
     review(binpack(container(limits=GPU, capabilities=["NET_ADMIN", "SYS_PTRACE"]))),
     True, []),
    ("SYS_ADMIN in a cpu pod", review({"containers": [container(capabilities=["SYS_ADMIN"])]}),
     True, []),
    ("gpu pod mounting the host's /dev",
     review(binpack(container(limits=GPU), volumes=host_path("/dev"))),
     False, ['volume "host" mounts the host path /dev, which holds GPU devices or driver files']),
    ("gpu pod mounting a GPU device node",
     review(binpack(container(limits=GPU), volumes=host_path("/dev/nvidia0"))),
     False, ["mounts the host path /dev/nvidia0"]),
    ("gpu pod mounting the host's root",
     review(binpack(container(limits=GPU), volumes=host_path("/"))),
     False, ["mounts the host path /"]),
    ("gpu pod mounting /usr, which holds the driver's libraries",
     review(binpack(container(limits=GPU), volumes=host_path("/usr/"))),
     False, ["mounts the host path /usr/"]),
    ("gpu pod mounting the container runtime's socket",
     review(binpack(container(limits=GPU), volumes=host_path("/run/containerd/containerd.sock"))),
     False, ["mounts the host path /run/containerd/containerd.sock"]),
    ("gpu pod mounting a host directory of its own",
     review(binpack(container(limits=GPU), volumes=host_path("/mnt/datasets"))), True, []),
    # host paths as the node resolves them, whatever their spelling
    *[(f"gpu pod mounting {path!r}, {what}",
       review(binpack(container(limits=GPU), volumes=host_path(path))),
       False, [f"mounts the host path {path}, which holds GPU devices or driver files"])
      for path, what in [
          ("//dev", "the device nodes with a doubled slash"),
          ("/./dev/nvidia0", "a GPU's device node through a dot segment"),
          ("/dev//nvidia0/", "a GPU's device node with repeated and trailing slashes"),
          ("dev", "the device nodes, relative"),
          ("//", "the host's root with a doubled slash"),
          ("/.", "the host's root through a dot segment"),
          ("/var/run/containerd/containerd.sock", "containerd's socket through /var/run"),
          ("/var//run/./containerd", "containerd's directory spelled around"),
          ("/run/k3s/containerd/containerd.sock", "k3s and RKE2's containerd socket"),
          ("/var/run/crio/crio.sock", "CRI-O's socket"),
          ("/var/run/docker.sock", "Docker's socket"),
          ("/var/run/cri-dockerd.sock", "cri-dockerd's socket"),
          ("/run/dockershim.sock", "Bottlerocket's link to containerd's socket"),
          ("/local/var/lib/kubelet/device-plugins", "the kubelet's device plugins on Bottlerocket"),
          ("/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's pod-resources socket"),
          ("/var/lib/kubelet/plugins/gpu.nvidia.com", "NVIDIA's DRA plugin"),
          ("/lib/x86_64-linux-gnu", "the driver's libraries through merged /usr"),
          ("/mnt/stateful_partition/home/kubernetes/bin/nvidia", "GKE's driver, bind-mounted"),
          ("/tmp/nvidia-mps", "GKE's MPS pipes"),
          ("/var", "a directory that holds the kubelet's sockets"),
      ]],
    ("gpu pod sharing the host's IPC namespace",
     review(binpack(container(limits=GPU), hostIPC=True)),
     False, ["spec.hostIPC shares the node's shared memory", "leave hostIPC unset"]),
    ("cpu pod sharing the host's IPC namespace", review({"hostIPC": True,
                                                         "containers": [container()]}), True, []),
    *[(f"gpu pod mounting at {mount_path!r}",
       review(binpack(mounting(container(limits=GPU), mount_path), volumes=EMPTY_DIR)),
       False, [f'container "main" mounts "scratch" at {mount_path}, where the NVIDIA container '
               "toolkit reads which GPUs to give it", "mount it elsewhere"])
      for mount_path in ["/var/run/nvidia-container-devices/all",
                         "//var/run/./nvidia-container-devices//all/",
                         "/var/run/nvidia-container-devicesall",
                         "var/run/nvidia-container-devices/all",
                         "/scratch/../var/run/nvidia-container-devices/all"]],
    ("gpu pod mounting its scratch space at /scratch",
     review(binpack(mounting(container(limits=GPU), "/scratch"), volumes=EMPTY_DIR)), True, []),
    ("gpu pod sharing the host's processes",
     review(binpack(container(limits=GPU), hostPID=True)),
     False, ["spec.hostPID shares the node's processes", "leave hostPID unset"]),
    ("gpu pod with a CDI annotation",
     annotated(binpack(container(limits=GPU)), {"cdi.k8s.io/extra": "nvidia.com/gpu=all"}),
     False, ["the annotation cdi.k8s.io/extra injects devices into its containers"]),
    ("gpu pod with the NVIDIA NRI plugin's annotation",
     annotated(binpack(container(limits=GPU)), {"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=all"}),
     False, ["the annotation nvidia.cdi.k8s.io/pod injects devices"]),
    ("an update adding a CDI annotation to a gpu pod",
     annotated(binpack(container(limits=GPU)), {"cdi.k8s.io/extra": "nvidia.com/gpu=all"},
               operation="UPDATE", old_spec=binpack(container(limits=GPU)), old_metadata={}),
     False, ["the annotation cdi.k8s.io/extra injects devices"]),
    ("cpu pod with a CDI annotation for another vendor's device",
     annotated({"containers": [container()]}, {"cdi.k8s.io/fpga": "example.com/fpga=0"}),
     True, []),
    # node agents: a DaemonSet's pods tolerate the GPU taint, and get no device path there
    ("daemonset pod asking for no device path", daemonset_pod(), True, []),
    ("daemonset pod mounting /var/log", daemonset_pod(volumes=host_path("/var/log")), True, []),
    ("privileged daemonset pod",
     review({"tolerations": EVERY_TAINT, "containers": [container(privileged=True)]},
            user=DAEMONSET_CONTROLLER, metadata=DAEMONSET_OWNER),
     False, ['container "main" is privileged, and it may run on a GPU node (it tolerates the '
             "GPU node taint nvidia.com/gpu=present:NoSchedule)", "exempt namespace"]),
    ("daemonset pod mounting the host's /proc", daemonset_pod(volumes=host_path("/proc")),
     False, ["mounts the host path /proc"]),
    ("daemonset pod sharing the host's processes", daemonset_pod(hostPID=True),
     False, ["spec.hostPID"]),
    ("daemonset pod in a critical class",
     daemonset_pod(priorityClassName="system-node-critical", priority=2000001000),
     False, ['priorityClassName "system-node-critical" gives it priority 2000001000, above 0',
             "a pod that may run on a GPU node", "node agents that must preempt belong in an "
             "exempt namespace"]),
    # zero quantities ask for nothing
    ("zero GPUs on the default scheduler",
     review({"containers": [container(limits=ZERO_GPUS)]}), True, []),
    ("zero GPUs tolerating the gpu taint",
     review({"tolerations": [GPU_TOLERATION], "containers": [container(limits=ZERO_GPUS)]}),
     False, ["requests no GPU but tolerates the GPU node taint"]),
    ("zero GPUs naming the nvidia runtime class",
     review({"runtimeClassName": "nvidia", "containers": [container(limits=ZERO_GPUS)]}),
     False, ['spec.runtimeClassName is "nvidia"']),
    ("zero GPUs pinned to a gpu node",
     review({"nodeName": "gpu-node-1", "containers": [container(limits=ZERO_GPUS)]}),
     False, ["it is a GPU node"]),
    ("a zero and a one: a GPU pod",
     review({"containers": [container(limits={**ZERO_GPUS, "nvidia.com/mig-1g.10gb": "1"})]}),
     False, ["requests nvidia.com/mig-1g.10gb but spec.schedulerName"]),
    # another NVIDIA device: placed as a GPU pod is
    ("NIC-only pod on the binpack scheduler with the gpu toleration",
     review(binpack(container(limits=NIC))), True, []),
    ("NIC-only pod on the default scheduler",
     review({"containers": [container(limits=NIC)]}),
     False, ["requests nvidia.com/rdma_shared_device_a but spec.schedulerName"]),
    # priority: preempting other users' GPU pods
    ("gpu pod in a class above the ceiling",
     review(binpack(container(limits=GPU), priorityClassName="system-cluster-critical",
                    priority=2000000000)),
     False, ['priorityClassName "system-cluster-critical" gives it priority 2000000000, above 0',
             "would preempt other users' GPU pods",
             "name no priority class, gpu-preemptible (preemptible)"]),
    ("gpu pod in a class at the ceiling",
     review(binpack(container(limits=GPU), priorityClassName="batch", priority=0)), True, []),
    ("gpu pod naming no class, under a high global default",
     review(binpack(container(limits=GPU), priority=1000)), True, []),
    ("cpu pod in a high class",
     review({"priorityClassName": "system-cluster-critical", "priority": 2000000000,
             "containers": [container(requests=CPU)]}), True, []),
    ("Job's gpu pod in the preemptible class",
     review(binpack(container(limits=GPU), priorityClassName="gpu-preemptible", priority=-100),
            metadata=JOB_OWNER), True, []),
    ("bare gpu pod in the preemptible class",
     review(binpack(container(limits=GPU), priorityClassName="gpu-preemptible", priority=-100)),
     False, ['priorityClassName "gpu-preemptible" lets other GPU pods preempt it',
             "gone for good once preempted"]),
    ("gpu pod claiming an owner that is not its controller, preemptible",
     review(binpack(container(limits=GPU), priorityClassName="gpu-preemptible", priority=-100),
            metadata={"ownerReferences": [{**JOB_OWNER["ownerReferences"][0],
                                           "controller": False}]}),
     False, ["gone for good once preempted"]),
    # Dynamic Resource Allocation
    ("claim on gpu.nvidia.com", claim(requests_of(
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}})),
     False, ['ResourceClaim "team-a/gpus" asks for devices of the device class '
             '"gpu.nvidia.com" through Dynamic Resource Allocation',
             "GPUs through DRA need the DRA path (gpuOperator.gpuPath: dra)"]),
    ("claim template on mig.nvidia.com", claim(requests_of(
        {"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}),
        kind="ResourceClaimTemplate"),
     False, ['ResourceClaimTemplate "team-a/gpus"', "mig.nvidia.com"]),
    ("claim with an NVIDIA class among alternatives", claim(requests_of(
        {"name": "any", "firstAvailable": [{"name": "a", "deviceClassName": "fpga.example.com"},
                                           {"name": "b", "deviceClassName": "gpu.nvidia.com"}]})),
     False, ["gpu.nvidia.com"]),
    ("beta claim on gpu.nvidia.com", claim(requests_of(
        {"name": "gpu", "deviceClassName": "gpu.nvidia.com"})), False, ["gpu.nvidia.com"]),
    ("claim selecting the NVIDIA driver by its name",
     claim(requests_of({"name": "gpu", "exactly": {
         "deviceClassName": "everything.example.com", "selectors": [
             {"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}})),
     False, ['the device class "everything.example.com"', "admission.deviceClasses"]),
    ("claim reaching the NVIDIA driver without naming it",
     claim(requests_of({"name": "gpu", "exactly": {
         "deviceClassName": "everything.example.com", "selectors": [
             {"cel": {"expression": "device.driver.startsWith('gpu.') && "
                                    "device.driver.endsWith('.com')"}}]}})),
     False, ['the device class "everything.example.com"']),
    ("claim on a device class the stack does not list", claim(requests_of(
        {"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}})),
     False, ['the device class "nic.example.com"', "admission.deviceClasses"]),
    ("update of a claim (its finalizer removed while it is deleted)",
     review({"devices": {"requests": [{"name": "gpu", "exactly": {
         "deviceClassName": "gpu.nvidia.com"}}]}}, kind="ResourceClaim",
         group="resource.k8s.io", name="gpus", operation="UPDATE",
         old_spec={"devices": {"requests": [{"name": "gpu", "exactly": {
             "deviceClassName": "gpu.nvidia.com"}}]}}), True, []),
    # what is not the policy's business
    ("cpu-only pod", review({"containers": [container(requests=CPU, limits=CPU)]}), True, []),
    ("pod without resources", review({"containers": [{"name": "c", "image": "x"}]}), True, []),
    ("unguarded extended resource",
     review({"containers": [container(limits={"example.com/fpga": "1"})]}), True, []),
    ("exempt namespace kube-system",
     review({"containers": [container(limits=GPU)]}, namespace="kube-system"), True, []),
    ("exempt GPU Operator namespace (its validator pods request GPUs)",
     review({"containers": [container(limits=GPU)]}, namespace="gpu-operator"), True, []),
    ("not a pod",
     review({"template": {"spec": {"containers": [container(limits=GPU)]}}},
            kind="Deployment", group="apps"), True, []),
    ("pod UPDATE", review(binpack(container(limits=GPU)), operation="UPDATE",
                          old_spec=binpack(container(limits=GPU))), True, []),
    ("pod DELETE", review(None, operation="DELETE"), True, []),
    ("containers not a list",
     review({"containers": {"main": container(limits=GPU)}}), True, []),
    ("container not an object", review({"containers": ["main"]}), True, []),
    ("limits not an object", review({"containers": [{"name": "c", "resources": {
        "limits": "nvidia.com/gpu"}}]}), True, []),
]


@pytest.mark.parametrize("request_, allowed, fragments", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_enforce_decision(opa_bin, deployed, request_, allowed, fragments):
    response = decide(opa_bin, deployed, request_)
    assert response["allowed"] is allowed, response
    if allowed:
        assert "status" not in response
    else:
        assert response["status"]["code"] == 403
        for fragment in fragments:
            assert fragment in response["status"]["message"]


def test_gpu_pod_without_the_toleration_is_admitted_with_a_warning(opa_bin, deployed):
    response = decide(opa_bin, deployed, review({"schedulerName": BINPACK,
                                                 "containers": [container(limits=GPU)]}))
    assert response["allowed"] is True
    assert any("does not tolerate the GPU node taint nvidia.com/gpu=present:NoSchedule, so no "
               "node will take it" in w for w in response["warnings"])


def mutated(opa_bin, deployed, request_, mode):
    """The pod after the mutating webhook's patch, applied as RFC 6902 says."""
    response = decide(opa_bin, deployed, request_, mode, rule="mutation")
    assert response["allowed"] is True
    if "patch" not in response:
        return request_, []
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    result = json.loads(json.dumps(request_))
    result["request"]["object"] = jsonpatch.apply_patch(request_["request"]["object"], patch)
    return result, patch


@pytest.mark.parametrize("spec", [
    {"containers": [container(limits=GPU)]},
    {"schedulerName": "default-scheduler", "containers": [container(limits=MIG)],
     "tolerations": [{"key": "dedicated", "operator": "Exists"}]},
    {"schedulerName": BINPACK, "containers": [container(limits=GPU)]},
], ids=["no scheduler, no tolerations", "default scheduler, other tolerations",
        "binpack scheduler, no tolerations"])
def test_mutate_fixes_gpu_pods_so_the_validating_policy_admits_them(opa_bin, deployed, spec):
    fixed, patch = mutated(opa_bin, deployed, review(spec), "mutate")
    assert patch, "nothing was fixed"
    pod_spec = fixed["request"]["object"]["spec"]
    assert pod_spec["schedulerName"] == BINPACK
    assert GPU_TOLERATION in pod_spec["tolerations"]
    assert pod_spec["tolerations"][:len(spec.get("tolerations", []))] == spec.get("tolerations",
                                                                                 [])
    assert decide(opa_bin, deployed, fixed, "mutate") == {"uid": "3b9f-41d2", "allowed": True}
    # A fixed pod needs no second fix (the webhook may be reinvoked).
    assert mutated(opa_bin, deployed, fixed, "mutate")[1] == []


@pytest.mark.parametrize("request_", [
    review(binpack(container(limits=GPU)), namespace="team-b"),
    review({"containers": [container(requests=CPU)]}),
    review({"containers": [container(limits=GPU)]}, namespace="kube-system"),
    review({"containers": [container(limits=ZERO_GPUS)]}),
], ids=["already right", "cpu pod", "exempt namespace",
        "a chart's CPU variant that keeps nvidia.com/gpu: 0"])
def test_mutate_leaves_alone_what_needs_no_fix(opa_bin, deployed, request_):
    assert mutated(opa_bin, deployed, request_, "mutate")[1] == []


@pytest.mark.parametrize("case", ["gpu pod naming its node", "cpu pod tolerating the gpu taint",
                                  "NVIDIA_VISIBLE_DEVICES=all without a GPU",
                                  "privileged gpu container", "claim on gpu.nvidia.com",
                                  "SYS_ADMIN in a gpu pod's sidecar that asks for no GPU",
                                  "privileged daemonset pod", "gpu pod mounting the host's /dev",
                                  "gpu pod with a CDI annotation",
                                  "daemonset pod in a critical class",
                                  "zero GPUs tolerating the gpu taint"])
def test_mutate_still_refuses_what_it_cannot_fix(opa_bin, deployed, case):
    request_ = next(c[1] for c in CASES if c[0] == case)
    fixed, _ = mutated(opa_bin, deployed, request_, "mutate")
    response = decide(opa_bin, deployed, fixed, "mutate")
    assert response["allowed"] is False
    assert response["status"]["message"] == decide(opa_bin, deployed, request_)["status"][
        "message"]


@pytest.mark.parametrize("case", [c for c in CASES if not c[2]], ids=[c[0] for c in CASES
                                                                       if not c[2]])
def test_audit_admits_every_violation_with_a_warning_and_labels_the_pod(opa_bin, deployed, case):
    _, request_, _, fragments = case
    response = decide(opa_bin, deployed, request_, "audit")
    assert response["allowed"] is True and "status" not in response
    warnings = " ".join(response["warnings"])
    assert warnings.startswith("gpu-platform audit: ")
    # The API server's audit log records them too, whatever the request.
    for fragment in fragments:
        assert fragment in response["auditAnnotations"]["violations"]
    for fragment in fragments:
        assert fragment in warnings
    if request_["request"]["kind"]["kind"] == "Pod" and request_["request"]["operation"] == \
            "CREATE":
        labelled, _ = mutated(opa_bin, deployed, request_, "audit")
        labels = labelled["request"]["object"]["metadata"]["labels"]
        assert labels[AUDIT_LABEL] == "violation"


def test_audit_leaves_a_rule_abiding_pod_unlabelled(opa_bin, deployed):
    request_ = review(binpack(container(limits=GPU)), metadata={"labels": {"app": "x"}})
    assert decide(opa_bin, deployed, request_, "audit") == {"uid": "3b9f-41d2", "allowed": True}
    assert mutated(opa_bin, deployed, request_, "audit")[1] == []


def test_audit_label_joins_existing_labels(opa_bin, deployed):
    request_ = review({"containers": [container(limits=GPU)]}, metadata={"labels": {"app": "x"}})
    labelled, _ = mutated(opa_bin, deployed, request_, "audit")
    assert labelled["request"]["object"]["metadata"]["labels"] == {"app": "x",
                                                                   AUDIT_LABEL: "violation"}


@pytest.mark.parametrize("request_", [
    {"kind": "NotAReview"},
    {"request": {"operation": "CREATE", "kind": {"group": "", "kind": "Pod"}}},
    "just a string",
], ids=["no request", "no uid", "not an object"])
def test_no_decision_for_malformed_reviews(opa_bin, deployed, request_):
    # No decision: OPA answers 404 and the API server applies the failure policy.
    assert evaluate(opa_bin, deployed["dir"], deployed["query"], request_) is None


def test_no_decision_without_the_parameters(opa_bin, deployed, tmp_path):
    """A policy loaded without (or with broken) parameters decides nothing, so the API server
    applies the failure policy; and OPA is then not ready (policy/opa/health.rego)."""
    broken, loaded = tmp_path / "broken", tmp_path / "loaded"
    broken.mkdir()
    for name in opa_admission.rego_files("admission"):
        (broken / name).write_text((deployed["dir"] / name).read_text())
    request_ = review({"containers": [container(limits=GPU)]})
    assert evaluate(opa_bin, broken, deployed["query"], request_) is None
    (broken / "data.json").write_text(json.dumps({"gpuplatform": {"params": "not an object"}}))
    assert evaluate(opa_bin, broken, deployed["query"], request_) is None
    shutil.copytree(deployed["dir"], loaded)
    for directory in (broken, loaded):
        for name, text in opa_admission.rego_files("opa").items():
            (directory / name).write_text(text)
    assert evaluate(opa_bin, broken, "data.system.health.ready", {}) is False
    assert evaluate(opa_bin, loaded, "data.system.health.ready", {}) is True


def pod_requests_the_api_server_could_send(settings):
    """Pod cases that pass the API server's own validation, outside exempt namespaces (which
    the namespaceSelector keeps from the webhook)."""
    for case in CASES:
        request_ = case[1]["request"]
        if request_["kind"]["kind"] != "Pod" or request_["operation"] not in ("CREATE", "UPDATE"):
            continue
        if request_["namespace"] in harness.admission_of(settings).exempt_namespaces:
            continue
        containers = request_["object"]["spec"].get("containers")
        if isinstance(containers, list) and all(
                isinstance(c, dict) and isinstance(c.get("resources", {}).get("limits", {}), dict)
                for c in containers):
            yield pytest.param(case[1], id=case[0])


@pytest.mark.parametrize("request_", list(pod_requests_the_api_server_could_send(
    harness.example_settings())))
def test_every_pod_the_policy_refuses_or_warns_about_is_sent_to_opa(opa_bin, deployed,
                                                                     request_):
    """The matchConditions must not open a way around the policy."""
    response = decide(opa_bin, deployed, request_)
    if not response["allowed"] or response.get("warnings"):
        assert sent_to_opa(deployed["webhooks"][0], request_)


@pytest.mark.parametrize("case", [
    "cpu-only pod", "pod without resources", "unguarded extended resource",
    "daemonset pod from the daemonset controller", "cpu pod naming a cpu node",
    "privileged cpu pod", "update of a pod that already tolerated", "pod UPDATE",
    "cpu pod tolerating the gpu key for NoExecute only",
    "daemonset pod asking for no device path", "SYS_ADMIN in a cpu pod"])
def test_pods_that_cannot_break_a_rule_never_wait_for_opa(deployed, case):
    request_ = next(c[1] for c in CASES if c[0] == case)
    assert not sent_to_opa(deployed["webhooks"][0], request_)


def test_opa_check_strict_and_tests_pass_and_format_is_canonical(opa_bin):
    subprocess.run([str(opa_bin), "check", "--strict", str(POLICY)], check=True,
                   capture_output=True)
    tests = subprocess.run([str(opa_bin), "test", "--format=json", str(POLICY)],
                           capture_output=True, text=True)
    results = json.loads(tests.stdout)
    failed = [r["name"] for r in results if r.get("fail") or r.get("error")]
    assert tests.returncode == 0 and not failed, failed
    assert len(results) >= 10
    unformatted = subprocess.run([str(opa_bin), "fmt", "--list", str(POLICY)],
                                 capture_output=True, text=True, check=True).stdout.split()
    assert unformatted == []


def test_the_rego_tests_decide_with_the_parameters_each_stack_renders(opa_bin, deployed,
                                                                     tmp_path_factory):
    rendered = params_fixture({
        stack: (deployed if stack == "example" else
                deployed_stack(stack, tmp_path_factory.mktemp))["params"] for stack in STACKS},
        opa_bin)
    assert PARAMS_FIXTURE.read_text() == rendered, \
        f"{PARAMS_FIXTURE.relative_to(harness.ROOT)} is stale: run " \
        "venv/bin/python tests/policy_harness.py"


def test_the_mode_changes_no_parameter_but_the_mode():
    """The Rego tests decide a stack's cases in each mode by setting `mode` in its parameters,
    which is what the program renders with admission.mode set."""
    def params(settings: dict) -> dict:
        config = harness.stack_file_config(settings)
        return opa_admission.policy_params(harness.admission_of(harness.settings_of(config)))

    enforce = params(with_changes(admission={"mode": "enforce"}))
    for mode in MODES:
        assert params(with_changes(admission={"mode": mode})) == {**enforce, "mode": mode}


def test_opa_api_is_locked_down(opa_bin, example_run, deployed, tmp_path):
    """OPA's authorization policy with the data the program gives it: callers may only ask for
    the admission decisions and read health and metrics; nobody may read or write policies or
    data, with or without a token."""
    server_map = example_run.one(f"{K8S}core/v1:ConfigMap",
                                 f"gpu-admission/{opa_admission.SERVER_POLICY_CONFIGMAP}").inputs
    files = dict(server_map["data"])
    server = json.loads(files.pop(opa_admission.SERVER_DATA_KEY))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "data.json").write_text(json.dumps({opa_admission.SERVER_DATA_ROOT: server}))
    webhook_path = deployed["webhook"]["clientConfig"]["service"]["path"].strip("/").split("/")

    def allowed(method, path, identity=None):
        request_ = {"method": method, "path": path}
        if identity is not None:
            request_["identity"] = identity
        return evaluate(opa_bin, tmp_path, "data.system.authz.allow", request_)

    assert allowed("POST", webhook_path) is True
    assert allowed("GET", ["health", "ready"]) is True
    assert allowed("PUT", ["v1", "policies", "gpu-admission", "x"]) is False
    assert allowed("PUT", ["v1", "data", "gpu-admission"]) is False
    assert allowed("GET", ["v1", "data"]) is False
    assert allowed("POST", ["v1", "data", "gpuplatform", "admission", "params"]) is False
    assert allowed("PUT", ["v1", "policies", "x"], identity="any-token") is False
    assert allowed("GET", ["v1", "policies"], identity="any-token") is False


# --- node pools, and other stacks --------------------------------------------------------------

def deployed_for(tmp_path_factory, **changes) -> dict:
    """The admission policy as a stack with `changes` deploys it."""
    config = harness.stack_file_config(with_changes(**changes))
    return deployed_policy(harness.run_program(config), harness.settings_of(config),
                           tmp_path_factory.mktemp)


@pytest.fixture(scope="module")
def deployed_pools(tmp_path_factory):
    """Node pools taint their own GPU nodes: the policy knows no GPU node's name."""
    return deployed_for(tmp_path_factory, gpuNodes={"taintedBy": "nodePool", "names": []})


DEBUG_ON = {"nodeName": "node-7", "containers": [container()]}

# (case, AdmissionReview, allowed where the program names the GPU nodes, allowed with node
# pools, fragments the node pools' refusal must contain)
NAMED_OR_NOT = [
    ("pod bound by name, asking for no device path",
     review({"nodeName": "node-7", "containers": [container()]}), True, True, []),
    ("pod bound by name, mounting the runtime's socket spelled around the rule",
     review({"nodeName": "node-7", "volumes": host_path("//run//containerd/containerd.sock"),
             "containers": [container()]}), True, False,
     ["mounts the host path //run//containerd/containerd.sock", 'spec.nodeName "node-7" may be '
      "a GPU node"]),
    ("pod bound by name, sharing the host's IPC namespace",
     review({"nodeName": "node-7", "hostIPC": True, "containers": [container()]}), True, False,
     ["spec.hostIPC"]),
    ("pod bound by name, sharing the host's processes",
     review({"nodeName": "node-7", "hostPID": True, "containers": [container()]}), True, False,
     ['spec.hostPID', 'spec.nodeName "node-7" may be a GPU node (GPU nodes are not named in '
      "this stack)"]),
    ("privileged debug container added to a running pod",
     review({**DEBUG_ON, "ephemeralContainers": [container("debugger", privileged=True)]},
            operation="UPDATE", sub_resource="ephemeralcontainers", old_spec=DEBUG_ON),
     True, False, ['ephemeral container "debugger" is privileged', 'spec.nodeName "node-7"']),
    ("SYS_ADMIN debug container added to a running pod",
     review({**DEBUG_ON, "ephemeralContainers": [container("debugger",
                                                           capabilities=["SYS_ADMIN"])]},
            operation="UPDATE", sub_resource="ephemeralcontainers", old_spec=DEBUG_ON),
     True, False, ["adds the capability SYS_ADMIN"]),
    ("pod bound by name in a critical class",
     review({"nodeName": "node-7", "priorityClassName": "system-node-critical",
             "priority": 2000001000, "containers": [container()]}), True, False,
     ["above 0, the highest a pod that may run on a GPU node may have"]),
    ("gpu pod naming its node",
     review(binpack(container(limits=GPU), nodeName="node-7")), False, False,
     ['spec.nodeName "node-7" skips the scheduler']),
    ("cpu pod tolerating the gpu taint",
     review({"tolerations": [GPU_TOLERATION], "containers": [container()]}), False, False,
     ["tolerates the GPU node taint"]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("request_, named, pools, fragments", [c[1:] for c in NAMED_OR_NOT],
                         ids=[c[0] for c in NAMED_OR_NOT])
def test_every_way_onto_a_gpu_node_counts_where_gpu_nodes_are_named_and_where_not(
        opa_bin, deployed, deployed_pools, mode, request_, named, pools, fragments):
    for policy, allowed in ((deployed, named), (deployed_pools, pools)):
        response = decide(opa_bin, policy, request_, mode)
        if mode == "audit":      # admitted, with the refusal as a warning
            assert response["allowed"] is True
            assert bool(response.get("warnings")) is not allowed
        else:                    # nothing here is a fix the mutate mode could make
            assert response["allowed"] is allowed, (policy is deployed, response)
            if not allowed and policy is deployed_pools:
                for fragment in fragments:
                    assert fragment in response["status"]["message"]
        if not allowed:
            assert sent_to_opa(policy["webhooks"][0], request_)


def test_claims_on_a_listed_device_class_are_admitted(opa_bin, tmp_path_factory):
    listed = deployed_for(tmp_path_factory, admission={"deviceClasses": ["nic.example.com"]})
    nic = claim(requests_of({"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}}))
    assert decide(opa_bin, listed, nic)["allowed"] is True
    # A selector narrows the class; the listed class's claim stays admitted whatever it selects.
    narrowed = claim(requests_of({"name": "nic", "exactly": {
        "deviceClassName": "nic.example.com",
        "selectors": [{"cel": {"expression": "device.attributes['nic.example.com'].rdma"}}]}}))
    assert decide(opa_bin, listed, narrowed)["allowed"] is True
    gpu = claim(requests_of({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}))
    assert decide(opa_bin, listed, gpu)["allowed"] is False


# --- teams: a team's GPUs only through its queue ------------------------------------------------

TEAM_NAMESPACE = "research"
KUEUE_GATE = {"schedulingGates": [{"name": teams.ADMISSION_GATE}]}
KUEUE_CONTROLLER = "system:serviceaccount:kueue-system:kueue-controller-manager"


@pytest.fixture(scope="module")
def deployed_teams(tmp_path_factory):
    """Teams on, and GPU pods outside their namespaces refused (the default)."""
    return deployed_for(tmp_path_factory, kubernetesVersion="1.35.10", teams=TEAMS)


def team_pod(spec: dict, **kwargs) -> dict:
    return review(spec, namespace=TEAM_NAMESPACE, **kwargs)


def gated(spec: dict) -> dict:
    """A pod spec as Kueue's webhook leaves it: held by its admission and topology gates."""
    return {**spec, "schedulingGates": [{"name": teams.ADMISSION_GATE},
                                        {"name": teams.TOPOLOGY_GATE}]}


MANAGED = {"labels": {teams.MANAGED_LABEL: "true", teams.QUEUE_LABEL: "default"}}


def queued(spec: dict, metadata: dict | None = None, **kwargs) -> dict:
    """A bare GPU pod as Kueue's webhook leaves it in a team namespace: gated, labelled as the
    pod Kueue manages."""
    return team_pod(gated(spec), metadata=metadata or MANAGED, **kwargs)


def test_a_gpu_pod_in_a_team_namespace_outside_its_queue_is_refused_naming_the_queue(
        opa_bin, deployed_teams):
    response = decide(opa_bin, deployed_teams, team_pod(binpack(container(limits=GPU))))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert 'namespace "research" of team "research"' in message
    assert "LocalQueue research/default" in message
    # In audit mode it is admitted, with the same words as a warning.
    audited = decide(opa_bin, deployed_teams, team_pod(binpack(container(limits=GPU))),
                     mode="audit")
    assert audited["allowed"] and any("LocalQueue research/default" in w
                                      for w in audited["warnings"])


def test_a_pod_kueue_holds_for_the_teams_quota_is_admitted_without_a_toleration_hint(
        opa_bin, deployed_teams):
    """Kueue gives the pods it admits the flavor's tolerations of the GPU taint itself."""
    response = decide(opa_bin, deployed_teams,
                      queued({"schedulerName": BINPACK, "containers": [container(limits=GPU)]}))
    assert response == {"uid": response["uid"], "allowed": True}


def test_the_pods_of_a_job_kueue_admitted_are_admitted_and_a_forged_one_is_not(
        opa_bin, deployed_teams):
    admitted = {"labels": {teams.PODSET_LABEL: "main"}}
    spec = binpack(container(limits=GPU))
    from_controller = team_pod(spec, metadata=admitted, user=JOB_CONTROLLERS[0])
    assert decide(opa_bin, deployed_teams, from_controller)["allowed"]
    # The same labels on a pod a user creates prove nothing.
    forged = team_pod(spec, metadata=admitted)
    assert not decide(opa_bin, deployed_teams, forged)["allowed"]


ADMITTED = {"labels": {**MANAGED["labels"], teams.PODSET_LABEL: "main",
                       "kueue.x-k8s.io/local-queue-name": "default"},
            "annotations": {"kueue.x-k8s.io/workload": "pod-train-0-3b9f"}}


def test_kueue_letting_a_pod_go_is_admitted(opa_bin, deployed_teams):
    """At admission Kueue removes its gates, adds the flavor's node labels and tolerations, and
    its own labels and annotation (one merge patch, by its ServiceAccount)."""
    old = gated({"schedulerName": BINPACK, "containers": [container(limits=GPU)]})
    new = {**binpack(container(limits=GPU)), "nodeSelector": {"nvidia.com/gpu.present": "true"}}
    request_ = team_pod(new, operation="UPDATE", old_spec=old, metadata=ADMITTED,
                        old_metadata=MANAGED, user=KUEUE_CONTROLLER)
    assert decide(opa_bin, deployed_teams, request_)["allowed"]


REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
STATEFULSET_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"
JOBSET_CONTROLLER = "system:serviceaccount:jobset-system:jobset-controller-manager"
GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"


def team_job(spec: dict, operation="CREATE", old: dict | None = None, gpus=True, **kwargs):
    """A Job of the research team, its template asking for a GPU (or none)."""
    template = {"spec": {"restartPolicy": "Never",
                         "containers": [container(limits=GPU if gpus else CPU)]}}
    old_spec = None if old is None else {**old, "template": template}
    return team_pod({**spec, "template": template}, kind="Job", group="batch", name="train",
                    operation=operation, old_spec=old_spec, **kwargs)


def team_jobset(spec: dict, operation="CREATE", old: dict | None = None, **kwargs):
    jobs = [{"name": "workers", "replicas": 2, "template": {"spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [container(limits=GPU)]}}}}}]
    old_spec = None if old is None else {**old, "replicatedJobs": jobs}
    return team_pod({**spec, "replicatedJobs": jobs}, kind="JobSet", group="jobset.x-k8s.io",
                    name="train", operation=operation, old_spec=old_spec, **kwargs)


def webhook_for(deployed, request_) -> dict | None:
    """The validating webhook the API server calls for the request, if any: its rules match
    the request's resource and its namespaceSelector the namespace."""
    request = request_["request"]
    resource = request["resource"]["resource"]
    if request.get("subResource"):
        resource += "/" + request["subResource"]
    for webhook in deployed["webhooks"]:
        if not any(resource in rule["resources"] and request["operation"] in rule["operations"]
                   and request["kind"]["group"] in rule["apiGroups"]
                   for rule in webhook["rules"]):
            continue
        scope = next(r.get("scope", "*") for r in webhook["rules"] if resource in r["resources"])
        if scope == "Cluster" or not request["namespace"]:
            return webhook      # the namespaceSelector skips no cluster-scoped object
        for expression in webhook.get("namespaceSelector", {}).get("matchExpressions", []):
            assert expression["key"] == "kubernetes.io/metadata.name"
            inside = request["namespace"] in expression["values"]
            if inside != (expression["operator"] == "In"):
                break
        else:
            return webhook
    return None


GATED = gated({"schedulerName": BINPACK, "containers": [container(limits=GPU)]})
UNGATED = binpack(container(limits=GPU))
JOB_POD = {"labels": {teams.PODSET_LABEL: "main"}}

# (case, request in a team namespace, allowed, fragments of the refusal)
TEAM_CASES = [
    # gates and owners at creation
    ("a gate and a controller of the user's own making",
     team_pod(GATED, metadata={"ownerReferences": JOB_OWNER["ownerReferences"]}), False,
     ["it carries Kueue's gate, but Kueue's webhook did not take it over",
      "LocalQueue research/default"]),
    ("a parent's annotation on a pod a user made",
     team_pod(GATED, metadata={"annotations": {teams.PARENT_ANNOTATION: "leaderworkerset"},
                               "labels": {"leaderworkerset.sigs.k8s.io/name": "x"}}), False,
     ["it claims a parent Kueue holds (annotation kueue.x-k8s.io/pod-suspending-parent), but "
      "the ReplicaSet or StatefulSet controller did not create it"]),
    ("a Deployment's pod, held for its parent",
     team_pod(GATED, metadata={"annotations": {teams.PARENT_ANNOTATION: "deployment"},
                               **MANAGED}, user=REPLICASET_CONTROLLER), True, []),
    ("a StatefulSet's pod, held for its parent",
     team_pod(GATED, metadata={"annotations": {teams.PARENT_ANNOTATION: "statefulset"}},
              user=STATEFULSET_CONTROLLER), True, []),
    ("a pod group of bare pods",
     queued({"schedulerName": BINPACK, "containers": [container(limits=GPU)]},
            metadata={"labels": {**MANAGED["labels"], teams.POD_GROUP_KEY: "gang"},
                      "annotations": {"kueue.x-k8s.io/role-hash": "a1b2c3d4"}}), False,
     ['it joins the Kueue pod group "gang"', "run the group as a Job, JobSet or StatefulSet"]),
    # later: gates and Kueue's labels belong to Kueue
    ("the admission gate lifted by the user",
     team_pod(UNGATED, operation="UPDATE", old_spec=GATED, old_metadata=MANAGED,
              metadata=MANAGED), False,
     ['pod "research/train-0": only Kueue lifts its scheduling gate kueue.x-k8s.io/admission, '
      'once it admits the pod against the quota of team "research"']),
    ("the managed label removed by the user",
     team_pod(GATED, operation="UPDATE", old_spec=GATED, old_metadata=MANAGED,
              metadata={"labels": {teams.QUEUE_LABEL: "default"}}), False,
     ["only Kueue changes its label kueue.x-k8s.io/managed"]),
    ("a Job pod's podset label changed by the user",
     team_pod(UNGATED, operation="UPDATE", old_spec=UNGATED, old_metadata=JOB_POD,
              metadata={"labels": {teams.PODSET_LABEL: "other"}}), False,
     ["only Kueue changes its label kueue.x-k8s.io/podset"]),
    ("a group's total count annotated by the user",
     team_pod(GATED, operation="UPDATE", old_spec=GATED, old_metadata=MANAGED,
              metadata={**MANAGED, "annotations": {"kueue.x-k8s.io/pod-group-total-count": "1"}}),
     False, ["only Kueue changes its annotation kueue.x-k8s.io/pod-group-total-count"]),
    ("a label of the user's own changed on a held pod",
     team_pod(GATED, operation="UPDATE", old_spec=GATED, old_metadata=MANAGED,
              metadata={"labels": {**MANAGED["labels"], "app": "trainer"}}), True, []),
    ("a finalizer removed by a controller",
     team_pod(UNGATED, operation="UPDATE", old_spec=UNGATED, old_metadata=ADMITTED,
              metadata=ADMITTED, user=GARBAGE_COLLECTOR),
     True, []),
    ("Kueue's labels written by Kueue on a StatefulSet's pod",
     team_pod(GATED, operation="UPDATE", old_spec=GATED, old_metadata={},
              metadata={"labels": {**MANAGED["labels"], teams.POD_GROUP_KEY: "web"}},
              user=KUEUE_CONTROLLER), True, []),
    # Jobs: only Kueue starts one, and a running one does not grow
    ("a GPU Job created running by a user",
     team_job({"suspend": False}), False,
     ['Job "research/train" requests nvidia.com/gpu but was not suspended at creation',
      "remove metadata.ownerReferences"]),
    ("a GPU Job created suspended", team_job({"suspend": True}), True, []),
    ("a JobSet's Job created running by JobSet's controller",
     team_job({"suspend": False}, user=JOBSET_CONTROLLER), True, []),
    ("a GPU Job started by a user",
     team_job({"suspend": False}, operation="UPDATE", old={"suspend": True}), False,
     ['Job "research/train": only Kueue starts a Job of namespace "research" (team '
      '"research")', "leave spec.suspend to Kueue"]),
    ("a GPU Job started by Kueue",
     team_job({"suspend": False}, operation="UPDATE", old={"suspend": True},
              user=KUEUE_CONTROLLER), True, []),
    ("a running GPU Job grown by a user",
     team_job({"suspend": False, "parallelism": 4}, operation="UPDATE",
              old={"suspend": False, "parallelism": 1}), False,
     ["spec.parallelism 1 -> 4 would run more GPU pods than Kueue admitted"]),
    ("a running GPU Job shrunk by a user",
     team_job({"suspend": False, "parallelism": 1}, operation="UPDATE",
              old={"suspend": False, "parallelism": 4}), True, []),
    ("a GPU JobSet started by a user",
     team_jobset({"suspend": False}, operation="UPDATE", old={"suspend": True}), False,
     ['JobSet "research/train": only Kueue starts a JobSet']),
    ("a Job without GPUs created running", team_job({"suspend": False}, gpus=False), True, []),
]


@pytest.mark.parametrize("request_, allowed, fragments", [c[1:] for c in TEAM_CASES],
                         ids=[c[0] for c in TEAM_CASES])
def test_only_kueue_releases_a_teams_gpu_work(opa_bin, deployed_teams, request_, allowed,
                                               fragments):
    response = decide(opa_bin, deployed_teams, request_)
    assert response["allowed"] is allowed, response
    for fragment in fragments:
        assert fragment in response["status"]["message"]
    webhook = webhook_for(deployed_teams, request_)
    if not allowed:
        # The API server asks OPA about it, and audit mode warns (and labels a pod).
        assert webhook is not None and sent_to_opa(webhook, request_)
        audited = decide(opa_bin, deployed_teams, request_, "audit")
        assert audited["allowed"] and any(fragments[0] in w for w in audited["warnings"])
        if request_["request"]["kind"]["kind"] == "Pod":
            labelled, _ = mutated(opa_bin, deployed_teams, request_, "audit")
            assert labelled["request"]["object"]["metadata"]["labels"][AUDIT_LABEL] == \
                "violation"


def test_kueues_own_writes_never_wait_for_opa(deployed_teams):
    for case in ("Kueue's labels written by Kueue on a StatefulSet's pod",
                 "a GPU Job started by Kueue", "a GPU Job created suspended",
                 "a label of the user's own changed on a held pod",
                 "a running GPU Job shrunk by a user"):
        request_ = next(c[1] for c in TEAM_CASES if c[0] == case)
        webhook = webhook_for(deployed_teams, request_)
        assert webhook is None or not sent_to_opa(webhook, request_), case


def test_a_gpu_pod_in_a_namespace_of_no_team_is_refused_or_admitted_as_the_stack_says(
        opa_bin, deployed_teams, deployed):
    pod = review(binpack(container(limits=GPU)), namespace="team-a")
    refused = decide(opa_bin, deployed_teams, pod)
    assert not refused["allowed"]
    assert 'namespace "team-a", which belongs to no team' in refused["status"]["message"]
    assert "(research, vision)" in refused["status"]["message"]
    # The example stack admits them during a migration.
    assert deployed["settings"].teams.gpu_pods_outside_teams == "admit"
    assert decide(opa_bin, deployed, pod)["allowed"]


def test_a_pod_without_gpus_in_a_team_namespace_needs_no_queue(opa_bin, deployed_teams):
    cpu = team_pod({"containers": [container(requests=CPU)]})
    assert decide(opa_bin, deployed_teams, cpu)["allowed"]


# --- the DRA path: GPUs through Dynamic Resource Allocation ------------------------------------

@pytest.fixture(scope="module")
def deployed_dra(tmp_path_factory):
    """The DRA path (Kubernetes 1.37), with teams at their defaults."""
    return deployed_for(tmp_path_factory, kubernetesVersion="1.37.2",
                        gpuOperator={"gpuPath": "dra"}, teams=TEAMS)


OPERATOR = "system:serviceaccount:gpu-operator:gpu-operator"
DRA_PLUGIN = "system:serviceaccount:gpu-operator:nvidia-dra-driver-kubeletplugin"
BINPACK_SA = "system:serviceaccount:gpu-scheduler:gpu-binpack-scheduler"
PLATFORM_CLASS = "gpu-platform-gpu.nvidia.com"
WITH_CLAIM = {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]}


def claim_pod(spec: dict, **kwargs) -> dict:
    return review({**spec, **WITH_CLAIM}, **kwargs)


def cluster_object(kind: str, spec: dict, user: str = USER, operation: str = "CREATE",
                   name: str = "mine") -> dict:
    return review(spec, kind=kind, group="resource.k8s.io", namespace="", name=name,
                  user=user, operation=operation)


def claim_status(old: dict, new: dict, user: str) -> dict:
    request_ = review({"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com"}}]}}, kind="ResourceClaim", group="resource.k8s.io",
        name="gpus", operation="UPDATE", sub_resource="status", user=user,
        namespace=TEAM_NAMESPACE, old_spec={"devices": {"requests": []}})
    request_["request"]["object"]["status"] = new
    request_["request"]["oldObject"]["status"] = old
    return request_


ALLOCATION = {"allocation": {"devices": {"results": [
    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-1", "device": "gpu-3"}]}}}
SELECT_NVIDIA = {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}
SELECT_NIC = {"selectors": [{"cel": {
    "expression": "device.driver == 'nic.example.com' && device.attributes['x'].rdma"}}]}

# (case, request, allowed on the DRA path, fragments of the refusal)
DRA_CASES = [
    ("a GPU claim on NVIDIA's class",
     claim(requests_of({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                   "count": 2}})), True, []),
    ("a claim template on the platform's class",
     claim(requests_of({"name": "gpu", "exactly": {"deviceClassName": PLATFORM_CLASS}}),
           kind="ResourceClaimTemplate"), True, []),
    ("a claim with adminAccess",
     claim(requests_of({"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                   "allocationMode": "All",
                                                   "adminAccess": True}})), False,
     ['asks for the devices of the device class "gpu.nvidia.com" with adminAccess',
      "drop adminAccess"]),
    ("a claim on a class the stack does not list",
     claim(requests_of({"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}})),
     False, ['the device class "nic.example.com"', "admission.deviceClasses"]),
    ("a pod with claims on the default scheduler",
     claim_pod({"containers": [container()]}), False,
     ['pod "team-a/train-0" has resource claims (gpus), which may hold GPUs, but '
      'spec.schedulerName is "default-scheduler"',
      "must set spec.schedulerName: gpu-binpack-scheduler"]),
    ("a pod with claims in a team namespace, outside the queue",
     claim_pod(binpack(container()), namespace=TEAM_NAMESPACE), False,
     ['requests resource claims (gpus) in namespace "research" of team "research" without '
      "going through the team's queue"]),
    ("a pod with claims in a team namespace, held by Kueue",
     queued(gated({**binpack(container()), **WITH_CLAIM})), True, []),
    ("a pod with claims in a critical class",
     claim_pod(binpack(container(), priorityClassName="system-cluster-critical",
                       priority=2000000000), namespace=TEAM_NAMESPACE,
               metadata=MANAGED), False, ["would preempt other users' GPU pods"]),
    ("a claim allocated by hand",
     claim_status({}, ALLOCATION, USER), False,
     ['ResourceClaim "research/gpus": its allocation is written by a scheduler']),
    ("a claim allocated by the binpack scheduler",
     claim_status({}, ALLOCATION, BINPACK_SA), True, []),
    ("a claim released by the resource-claim controller",
     claim_status(ALLOCATION, {}, "system:serviceaccount:kube-system:resource-claim-controller"),
     True, []),
    ("a claim's device health written by the driver",
     claim_status(ALLOCATION, {**ALLOCATION, "devices": [{"driver": "gpu.nvidia.com"}]},
                  DRA_PLUGIN), True, []),
    ("a DeviceClass that serves nvidia.com/gpu",
     cluster_object("DeviceClass", {**SELECT_NVIDIA, "extendedResourceName": "nvidia.com/gpu"}),
     False, ['DeviceClass "mine" may select NVIDIA devices', 'and serves nvidia.com/gpu',
             "only the platform's own classes"]),
    ("a DeviceClass with no driver of its own",
     cluster_object("DeviceClass", {"selectors": [{"cel": {
         "expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}), False,
     ["may select NVIDIA devices"]),
    ("a DeviceClass updated to reach NVIDIA's devices",
     cluster_object("DeviceClass", SELECT_NVIDIA, operation="UPDATE"), False,
     ["may select NVIDIA devices"]),
    ("another vendor's DeviceClass", cluster_object("DeviceClass", SELECT_NIC), True, []),
    ("NVIDIA's classes, made by the GPU Operator",
     cluster_object("DeviceClass", SELECT_NVIDIA, user=OPERATOR, name="gpu.nvidia.com"), True,
     []),
    ("a ResourceSlice of NVIDIA's driver written by a user",
     cluster_object("ResourceSlice", {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1",
                                      "pool": {"name": "gpu-node-1", "generation": 9,
                                               "resourceSliceCount": 1}, "devices": []}),
     False, ['ResourceSlice "mine" publishes devices of NVIDIA\'s driver gpu.nvidia.com']),
    ("a ResourceSlice published by NVIDIA's driver",
     cluster_object("ResourceSlice", {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1"},
                    user=DRA_PLUGIN), True, []),
    ("another driver's ResourceSlice",
     cluster_object("ResourceSlice", {"driver": "nic.example.com", "nodeName": "node-1"}),
     True, []),
]


@pytest.mark.parametrize("request_, allowed, fragments", [c[1:] for c in DRA_CASES],
                         ids=[c[0] for c in DRA_CASES])
def test_on_the_dra_path_a_gpu_is_reached_only_where_the_binpack_scheduler_places_the_pod(
        opa_bin, deployed_dra, request_, allowed, fragments):
    response = decide(opa_bin, deployed_dra, request_)
    assert response["allowed"] is allowed, response
    for fragment in fragments:
        assert fragment in response["status"]["message"]
    webhook = webhook_for(deployed_dra, request_)
    if not allowed:
        assert webhook is not None and sent_to_opa(webhook, request_)


def test_the_dra_paths_writers_never_wait_for_opa(deployed_dra):
    for case in ("a claim allocated by the binpack scheduler",
                 "a claim released by the resource-claim controller",
                 "NVIDIA's classes, made by the GPU Operator",
                 "a ResourceSlice published by NVIDIA's driver"):
        request_ = next(c[1] for c in DRA_CASES if c[0] == case)
        webhook = webhook_for(deployed_dra, request_)
        assert webhook is None or not sent_to_opa(webhook, request_), case


def test_on_the_device_plugin_path_a_pod_with_claims_is_not_a_gpu_pod(opa_bin, deployed):
    """Where no DRA driver serves GPUs, a claim on NVIDIA's classes is refused at the claim."""
    response = decide(opa_bin, deployed, claim_pod({"containers": [container()]}))
    assert response["allowed"] is True
