# Where a pod may run: GPU pods are placed by the binpack scheduler, never bound by name, and GPU
# nodes are for GPU pods; every way onto a GPU node counts, where the stack names its GPU nodes
# and where node pools taint them (their names unknown).
package gpuplatform.admission_test.placement

import data.gpuplatform.admission_test as t

cases := object.union_n([placement, bound_by_name_where("GPU nodes named", "example", "named"), bound_by_name_where("node pools", "node_pools", "pools")])

reserved_for := {"key": "gpu-platform.io/reserved-for", "operator": "Exists", "effect": "NoSchedule"}

gpu_fault := {"key": "gpu-platform.io/gpu-fault", "operator": "Exists", "effect": "NoSchedule"}

placement := {
	# the scheduler
	"gpu limit on the default scheduler": {
		"request": t.pod({"containers": [t.gpu_container]}),
		"refused": [
			`pod "team-a/train-0"`, `container "main"`, "nvidia.com/gpu",
			`spec.schedulerName is "default-scheduler"`,
			"must set spec.schedulerName: gpu-binpack-scheduler",
		],
		"mutate": {"admitted": true},
	},
	"gpu pod on the binpack scheduler": {
		"request": t.pod(t.binpack([t.gpu_container], {})),
		"admitted": true,
	},
	"gpu pod tolerating a reservation's taint by name": {
		"stack": "reservation",
		"request": t.pod(t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, reserved_for]})),
		"refused": [`pod "team-a/train-0"`, "tolerates gpu-platform.io/reserved-for", "only the platform's reservation run"],
	},
	"gpu pod given a reservation's toleration by update": {
		"stack": "reservation",
		"request": t.review(t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, reserved_for]}), {
			"operation": "UPDATE", "oldSpec": t.binpack([t.gpu_container], {}),
		}),
		"refused": ["tolerates gpu-platform.io/reserved-for", "only the platform's reservation run"],
	},
	"the reservation run giving its toleration by update": {
		"stack": "reservation",
		"request": t.review(t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, reserved_for]}), {
			"operation": "UPDATE", "oldSpec": t.binpack([t.gpu_container], {}),
			"user": "system:serviceaccount:gpu-reservation:gpu-reservation",
		}),
		"admitted": true,
	},
	"an update of a pod that tolerated a reservation already": {
		"stack": "reservation",
		"request": t.review(t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, reserved_for]}), {
			"operation": "UPDATE", "oldSpec": t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, reserved_for]}),
		}),
		"admitted": true,
	},
	"gpu pod tolerating the same taint where reservation is off": {
		"request": t.pod(t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, reserved_for]})),
		"admitted": true,
	},
	"gpu pod tolerating a failed GPU node's taint": {
		"stack": "remediation",
		"request": t.pod(t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, gpu_fault]})),
		"refused": ["tolerates gpu-platform.io/gpu-fault", "a GPU node out of service after a GPU fault"],
	},
	"gpu pod given a failed GPU node's toleration by update": {
		"stack": "remediation",
		"request": t.review(t.binpack([t.gpu_container], {"tolerations": [t.gpu_toleration, gpu_fault]}), {
			"operation": "UPDATE", "oldSpec": t.binpack([t.gpu_container], {}),
		}),
		"refused": ["tolerates gpu-platform.io/gpu-fault"],
	},
	"a DaemonSet's pod tolerating a failed GPU node's taint": {
		"stack": "remediation",
		"request": t.daemonset_pod({"tolerations": [gpu_fault]}),
		"admitted": true,
	},
	"gpu pod on another scheduler": {
		"request": t.pod({"schedulerName": "volcano", "containers": [t.gpu_container]}),
		"refused": [`spec.schedulerName is "volcano"`],
		"mutate": {"admitted": true},
	},
	"explicit default scheduler": {
		"request": t.pod({"schedulerName": "default-scheduler", "containers": [t.gpu_container]}),
		"refused": [`spec.schedulerName is "default-scheduler"`],
		"mutate": {"admitted": true},
	},
	"two offending containers named": {
		"request": t.pod({"containers": [t.container("a", t.limits(t.gpu)), t.container("b", t.requests(t.mig))]}),
		"refused": [`container "a"`, `container "b"`],
		"mutate": {"admitted": true},
	},
	# spec.nodeName
	"gpu pod naming its node": {
		"request": t.pod(t.binpack([t.gpu_container], {"nodeName": "gpu-node-1"})),
		"refused": [`spec.nodeName "gpu-node-1" skips the scheduler`, "remove spec.nodeName"],
	},
	"gpu pod naming a cpu node": {
		"request": t.pod(t.binpack([t.gpu_container], {"nodeName": "cpu-node-1"})),
		"refused": [`spec.nodeName "cpu-node-1" skips the scheduler`],
	},
	"cpu pod naming a gpu node": {
		"request": t.pod({"nodeName": "gpu-node-2", "containers": [cpu_container]}),
		"refused": [`spec.nodeName "gpu-node-2" skips the scheduler`, "it is a GPU node"],
	},
	"cpu pod naming a cpu node": {
		"request": t.pod({"nodeName": "cpu-node-1", "containers": [cpu_container]}),
		"admitted": true,
	},
	# GPU nodes are for GPU pods
	"cpu pod tolerating the gpu taint": {
		"request": t.pod({"tolerations": [t.gpu_toleration], "containers": [cpu_container]}),
		"refused": ["requests no GPU but tolerates the GPU node taint nvidia.com/gpu=present:NoSchedule"],
	},
	"cpu pod tolerating every taint": {
		"request": t.pod({"tolerations": t.every_taint, "containers": [plain]}),
		"refused": ["tolerates the GPU node taint"],
	},
	"cpu pod tolerating the gpu key with Exists": {
		"request": t.pod({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], "containers": [plain]}),
		"refused": ["tolerates the GPU node taint"],
	},
	"cpu pod tolerating the gpu key for NoExecute only": {
		"request": t.pod({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], "containers": [plain]}),
		"admitted": true,
	},
	"cpu pod tolerating another value": {
		"request": t.pod({"tolerations": [object.union(t.gpu_toleration, {"value": "absent"})], "containers": [plain]}),
		"admitted": true,
	},
	"daemonset pod from the daemonset controller": {
		"request": t.daemonset_pod({}),
		"admitted": true,
	},
	"pod claiming a daemonset owner, made by a user": {
		"request": t.review({"tolerations": t.every_taint, "containers": [plain]}, {"metadata": t.daemonset_owner}),
		"refused": ["tolerates the GPU node taint"],
	},
	"update adding the gpu toleration to a cpu pod": {
		"request": t.review(
			{"tolerations": [t.gpu_toleration], "containers": [plain]},
			{"operation": "UPDATE", "oldSpec": {"containers": [plain]}},
		),
		"refused": ["tolerates the GPU node taint"],
	},
	"update of a pod that already tolerated": {
		"request": t.review(
			{"tolerations": [t.gpu_toleration], "containers": [plain]},
			{"operation": "UPDATE", "oldSpec": {"tolerations": [t.gpu_toleration], "containers": [plain]}},
		),
		"admitted": true,
	},
}

cpu_container := t.container("main", t.requests(t.cpu))

plain := t.container("main", {})

# Pods that may reach a GPU node in each stack: where the program names the GPU nodes, only a GPU
# node's name leads there; where node pools taint their own, any node's name may.
bound_by_name := {
	"pod bound by name, asking for no device path": {
		"request": t.pod({"nodeName": "node-7", "containers": [plain]}),
		"named": {"admitted": true},
		"pools": {"admitted": true},
	},
	"pod bound by name, mounting the runtime's socket spelled around the rule": {
		"request": t.pod({"nodeName": "node-7", "volumes": t.host_path("//run//containerd/containerd.sock"), "containers": [plain]}),
		"named": {"admitted": true},
		"pools": {"refused": ["mounts the host path //run//containerd/containerd.sock", `spec.nodeName "node-7" may be a GPU node`]},
	},
	"pod bound by name, sharing the host's IPC namespace": {
		"request": t.pod({"nodeName": "node-7", "hostIPC": true, "containers": [plain]}),
		"named": {"admitted": true},
		"pools": {"refused": ["spec.hostIPC"]},
	},
	"pod bound by name, sharing the host's processes": {
		"request": t.pod({"nodeName": "node-7", "hostPID": true, "containers": [plain]}),
		"named": {"admitted": true},
		"pools": {"refused": ["spec.hostPID", `spec.nodeName "node-7" may be a GPU node (GPU nodes are not named in this stack)`]},
	},
	"privileged debug container added to a running pod": {
		"request": debugging(t.privileged(t.container("debugger", {}))),
		"named": {"admitted": true},
		"pools": {"refused": [`ephemeral container "debugger" is privileged`, `spec.nodeName "node-7"`]},
	},
	"SYS_ADMIN debug container added to a running pod": {
		"request": debugging(t.adding_capabilities(t.container("debugger", {}), ["SYS_ADMIN"])),
		"named": {"admitted": true},
		"pools": {"refused": ["adds the capability SYS_ADMIN"]},
	},
	"pod bound by name in a critical class": {
		"request": t.pod({"nodeName": "node-7", "priorityClassName": "system-node-critical", "priority": 2000001000, "containers": [plain]}),
		"named": {"admitted": true},
		"pools": {"refused": ["above 0, the highest a pod that may run on a GPU node may have"]},
	},
	"gpu pod naming its node": {
		"request": t.pod(t.binpack([t.gpu_container], {"nodeName": "node-7"})),
		"named": {"refused": [`spec.nodeName "node-7" skips the scheduler`]},
		"pools": {"refused": [`spec.nodeName "node-7" skips the scheduler`]},
	},
	"cpu pod tolerating the gpu taint": {
		"request": t.pod({"tolerations": [t.gpu_toleration], "containers": [plain]}),
		"named": {"refused": ["tolerates the GPU node taint"]},
		"pools": {"refused": ["tolerates the GPU node taint"]},
	},
}

bound_by_name_where(where, stack, verdict) := {sprintf("%s (%s)", [name, where]): object.union({"request": b.request, "stack": stack}, b[verdict]) |
	some name, b in bound_by_name
}

# An ephemeral container added to a running pod on node-7 (kubectl debug).
debugging(container) := t.review(
	{"nodeName": "node-7", "containers": [plain], "ephemeralContainers": [container]},
	{"operation": "UPDATE", "subResource": "ephemeralcontainers", "oldSpec": {"nodeName": "node-7", "containers": [plain]}},
)

test_cases if t.all_decided(cases)
