# Device paths: a pod that may run on a GPU node reaches GPUs only through the GPU resource, node
# agents and debug containers included; host paths count in every spelling the node resolves.
# Wherever a pod runs, NVIDIA_VISIBLE_DEVICES and an NVIDIA RuntimeClass without a GPU are refused.
package gpuplatform.admission_test.device_paths

import data.gpuplatform.admission_test as t

cases := object.union_n([device_paths, host_path_spellings, device_list_mounts])

device_paths := {
	# seeing GPUs without asking for one
	"NVIDIA_VISIBLE_DEVICES=all without a GPU": {
		"request": t.pod({"containers": [with_env(plain, visible_devices("all"))]}),
		"refused": [`container "main" sets NVIDIA_VISIBLE_DEVICES`],
	},
	"NVIDIA_VISIBLE_DEVICES from a ConfigMap key": {
		"request": t.pod(t.binpack([with_env(t.gpu_container, {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "all"}}})], {})),
		"refused": ["sets NVIDIA_VISIBLE_DEVICES"],
	},
	"NVIDIA_VISIBLE_DEVICES=void": {
		"request": t.pod({"containers": [with_env(plain, visible_devices("void"))]}),
		"admitted": true,
	},
	"debug container with NVIDIA_VISIBLE_DEVICES added to a running pod": {
		"request": debugging_gpu_pod(with_env(t.container("debugger", {}), visible_devices("all"))),
		"refused": [`ephemeral container "debugger" sets NVIDIA_VISIBLE_DEVICES`],
	},
	"nvidia runtime class without a GPU": {
		"request": t.pod({"runtimeClassName": "nvidia", "containers": [plain]}),
		"refused": [`spec.runtimeClassName is "nvidia"`],
	},
	"nvidia runtime class with a GPU": {
		"request": t.pod(t.binpack([t.gpu_container], {"runtimeClassName": "nvidia"})),
		"admitted": true,
	},
	# privilege, and the capabilities the NVIDIA container toolkit treats as privilege
	"privileged gpu container": {
		"request": t.pod(t.binpack([t.privileged(t.gpu_container)], {})),
		"refused": [
			`container "main" is privileged, and it may run on a GPU node (it requests nvidia.com/gpu)`,
			"a GPU is reached only through the GPU resource", "run it unprivileged",
		],
	},
	"privileged debug container on a gpu node": {
		"request": debugging_gpu_pod(t.privileged(t.container("debugger", {}))),
		"refused": [`ephemeral container "debugger" is privileged`],
	},
	"privileged debug container on a cpu pod's cpu node": {
		"request": t.review(
			{"nodeName": "cpu-node-1", "containers": [plain], "ephemeralContainers": [t.privileged(t.container("debugger", {}))]},
			{"operation": "UPDATE", "subResource": "ephemeralcontainers", "oldSpec": {"nodeName": "cpu-node-1", "containers": [plain]}},
		),
		"admitted": true,
	},
	"privileged cpu pod": {
		"request": t.pod({"containers": [t.privileged(plain)]}),
		"admitted": true,
	},
	"SYS_ADMIN in a gpu pod's sidecar that asks for no GPU": {
		"request": t.pod(t.binpack([t.gpu_container, t.adding_capabilities(t.container("sidecar", {}), ["SYS_ADMIN"])], {})),
		"refused": [
			`container "sidecar" adds the capability SYS_ADMIN, which the NVIDIA container toolkit treats as privileged`,
			"drop it",
		],
	},
	"ALL capabilities in a gpu container": {
		"request": t.pod(t.binpack([t.adding_capabilities(t.gpu_container, ["ALL"])], {})),
		"refused": ["adds the capability ALL"],
	},
	"cap_sys_admin spelled in lower case with its prefix": {
		"request": t.pod(t.binpack([t.adding_capabilities(t.gpu_container, ["cap_sys_admin"])], {})),
		"refused": ["adds the capability cap_sys_admin"],
	},
	"another capability in a gpu container": {
		"request": t.pod(t.binpack([t.adding_capabilities(t.gpu_container, ["NET_ADMIN", "SYS_PTRACE"])], {})),
		"admitted": true,
	},
	"SYS_ADMIN in a cpu pod": {
		"request": t.pod({"containers": [t.adding_capabilities(plain, ["SYS_ADMIN"])]}),
		"admitted": true,
	},
	# host paths
	"gpu pod mounting the host's /dev": {
		"request": mounting_host("/dev"),
		"refused": [`volume "host" mounts the host path /dev, which holds GPU devices or driver files`],
	},
	"gpu pod mounting a GPU device node": {
		"request": mounting_host("/dev/nvidia0"),
		"refused": ["mounts the host path /dev/nvidia0"],
	},
	"gpu pod mounting the host's root": {
		"request": mounting_host("/"),
		"refused": ["mounts the host path /"],
	},
	"gpu pod mounting /usr, which holds the driver's libraries": {
		"request": mounting_host("/usr/"),
		"refused": ["mounts the host path /usr/"],
	},
	"gpu pod mounting the container runtime's socket": {
		"request": mounting_host("/run/containerd/containerd.sock"),
		"refused": ["mounts the host path /run/containerd/containerd.sock"],
	},
	"gpu pod mounting a host directory of its own": {
		"request": mounting_host("/mnt/datasets"),
		"admitted": true,
	},
	# the host's namespaces
	"gpu pod sharing the host's IPC namespace": {
		"request": t.pod(t.binpack([t.gpu_container], {"hostIPC": true})),
		"refused": ["spec.hostIPC shares the node's shared memory", "leave hostIPC unset"],
	},
	"cpu pod sharing the host's IPC namespace": {
		"request": t.pod({"hostIPC": true, "containers": [plain]}),
		"admitted": true,
	},
	"gpu pod sharing the host's processes": {
		"request": t.pod(t.binpack([t.gpu_container], {"hostPID": true})),
		"refused": ["spec.hostPID shares the node's processes", "leave hostPID unset"],
	},
	"gpu pod mounting its scratch space at /scratch": {
		"request": mounting_scratch_at("/scratch"),
		"admitted": true,
	},
	# device-injecting annotations
	"gpu pod with a CDI annotation": {
		"request": t.review(t.binpack([t.gpu_container], {}), {"metadata": {"annotations": {"cdi.k8s.io/extra": "nvidia.com/gpu=all"}}}),
		"refused": ["the annotation cdi.k8s.io/extra injects devices into its containers"],
	},
	"gpu pod with the NVIDIA NRI plugin's annotation": {
		"request": t.review(t.binpack([t.gpu_container], {}), {"metadata": {"annotations": {"nvidia.cdi.k8s.io/pod": "nvidia.com/gpu=all"}}}),
		"refused": ["the annotation nvidia.cdi.k8s.io/pod injects devices"],
	},
	"an update adding a CDI annotation to a gpu pod": {
		"request": t.review(t.binpack([t.gpu_container], {}), {
			"metadata": {"annotations": {"cdi.k8s.io/extra": "nvidia.com/gpu=all"}},
			"operation": "UPDATE", "oldSpec": t.binpack([t.gpu_container], {}), "oldMetadata": {},
		}),
		"refused": ["the annotation cdi.k8s.io/extra injects devices"],
	},
	"cpu pod with a CDI annotation for another vendor's device": {
		"request": t.review({"containers": [plain]}, {"metadata": {"annotations": {"cdi.k8s.io/fpga": "example.com/fpga=0"}}}),
		"admitted": true,
	},
	# node agents: a DaemonSet's pods tolerate the GPU taint, and get no device path there
	"daemonset pod asking for no device path": {
		"request": t.daemonset_pod({}),
		"admitted": true,
	},
	"daemonset pod mounting /var/log": {
		"request": t.daemonset_pod({"volumes": t.host_path("/var/log")}),
		"admitted": true,
	},
	"privileged daemonset pod": {
		"request": t.daemonset_pod({"containers": [t.privileged(plain)]}),
		"refused": [
			`container "main" is privileged, and it may run on a GPU node (it tolerates the GPU node taint nvidia.com/gpu=present:NoSchedule)`,
			"exempt namespace",
		],
	},
	"daemonset pod mounting the host's /proc": {
		"request": t.daemonset_pod({"volumes": t.host_path("/proc")}),
		"refused": ["mounts the host path /proc"],
	},
	"daemonset pod sharing the host's processes": {
		"request": t.daemonset_pod({"hostPID": true}),
		"refused": ["spec.hostPID"],
	},
}

# Host paths as the node resolves them, whatever their spelling.
host_path_spellings := {sprintf("gpu pod mounting '%s', %s", [path, what]): {
	"request": mounting_host(path),
	"refused": [sprintf("mounts the host path %s, which holds GPU devices or driver files", [path])],
} |
	some [path, what] in [
		["//dev", "the device nodes with a doubled slash"],
		["/./dev/nvidia0", "a GPU's device node through a dot segment"],
		["/dev//nvidia0/", "a GPU's device node with repeated and trailing slashes"],
		["dev", "the device nodes, relative"],
		["//", "the host's root with a doubled slash"],
		["/.", "the host's root through a dot segment"],
		["/var/run/containerd/containerd.sock", "containerd's socket through /var/run"],
		["/var//run/./containerd", "containerd's directory spelled around"],
		["/run/k3s/containerd/containerd.sock", "k3s and RKE2's containerd socket"],
		["/var/run/crio/crio.sock", "CRI-O's socket"],
		["/var/run/docker.sock", "Docker's socket"],
		["/var/run/cri-dockerd.sock", "cri-dockerd's socket"],
		["/run/dockershim.sock", "Bottlerocket's link to containerd's socket"],
		["/local/var/lib/kubelet/device-plugins", "the kubelet's device plugins on Bottlerocket"],
		["/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's pod-resources socket"],
		["/var/lib/kubelet/plugins/gpu.nvidia.com", "NVIDIA's DRA plugin"],
		["/lib/x86_64-linux-gnu", "the driver's libraries through merged /usr"],
		["/mnt/stateful_partition/home/kubernetes/bin/nvidia", "GKE's driver, bind-mounted"],
		["/tmp/nvidia-mps", "GKE's MPS pipes"],
		["/var", "a directory that holds the kubelet's sockets"],
	]
}

# The NVIDIA container toolkit's device list, decided on the destination as the toolkit cleans it.
device_list_mounts := {sprintf("gpu pod mounting at '%s'", [path]): {
	"request": mounting_scratch_at(path),
	"refused": [
		sprintf(`container "main" mounts "scratch" at %s, where the NVIDIA container toolkit reads which GPUs to give it`, [path]),
		"mount it elsewhere",
	],
} |
	some path in [
		"/var/run/nvidia-container-devices/all",
		"//var/run/./nvidia-container-devices//all/",
		"/var/run/nvidia-container-devicesall",
		"var/run/nvidia-container-devices/all",
		"/scratch/../var/run/nvidia-container-devices/all",
	]
}

plain := t.container("main", {})

with_env(c, variable) := object.union(c, {"env": [variable]})

visible_devices(value) := {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}

# A GPU pod on the binpack scheduler mounting the host's `path`.
mounting_host(path) := t.pod(t.binpack([t.gpu_container], {"volumes": t.host_path(path)}))

# A GPU pod on the binpack scheduler mounting an emptyDir at `path`.
mounting_scratch_at(path) := t.pod(t.binpack(
	[object.union(t.gpu_container, {"volumeMounts": [{"name": "scratch", "mountPath": path}]})],
	{"volumes": [{"name": "scratch", "emptyDir": {}}]},
))

# An ephemeral container added to a running GPU pod on a GPU node (kubectl debug).
debugging_gpu_pod(container) := t.review(
	t.binpack([t.gpu_container], {"nodeName": "gpu-node-1", "ephemeralContainers": [container]}),
	{"operation": "UPDATE", "subResource": "ephemeralcontainers", "oldSpec": t.binpack([t.gpu_container], {"nodeName": "gpu-node-1"})},
)

test_cases if t.all_decided(cases)
