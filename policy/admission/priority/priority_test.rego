# Priority: a pod that may run on a GPU node preempts no other user's GPU pods, and a pod that may
# be preempted has a controller to bring it back.
package gpuplatform.admission_test.priority

import data.gpuplatform.admission_test as t

cases := {
	"gpu pod in a class above the ceiling": {
		"request": t.pod(critical_gpu_pod),
		"refused": [
			`priorityClassName "system-cluster-critical" gives it priority 2000000000, above 0`,
			"would preempt other users' GPU pods",
			"name no priority class, gpu-preemptible (preemptible)",
		],
	},
	"gpu pod in a class above the ceiling, where the stack declares no preemptible class": {
		"request": t.pod(critical_gpu_pod),
		"stack": "no_preemptible_class",
		"refused": ["name no priority class, or a class of priority 0 or less"],
	},
	"gpu pod in a class at the ceiling": {
		"request": t.pod(t.binpack([t.gpu_container], {"priorityClassName": "batch", "priority": 0})),
		"admitted": true,
	},
	"gpu pod naming no class, under a high global default": {
		"request": t.pod(t.binpack([t.gpu_container], {"priority": 1000})),
		"admitted": true,
	},
	"cpu pod in a high class": {
		"request": t.pod({
			"priorityClassName": "system-cluster-critical", "priority": 2000000000,
			"containers": [t.container("main", t.requests(t.cpu))],
		}),
		"admitted": true,
	},
	"daemonset pod in a critical class": {
		"request": t.daemonset_pod({"priorityClassName": "system-node-critical", "priority": 2000001000}),
		"refused": [
			`priorityClassName "system-node-critical" gives it priority 2000001000, above 0`,
			"a pod that may run on a GPU node",
			"node agents that must preempt belong in an exempt namespace",
		],
	},
	# the preemptible class
	"Job's gpu pod in the preemptible class": {
		"request": t.review(preemptible_gpu_pod, {"metadata": {"ownerReferences": [t.job_owner]}}),
		"admitted": true,
	},
	"bare gpu pod in the preemptible class": {
		"request": t.pod(preemptible_gpu_pod),
		"refused": [`priorityClassName "gpu-preemptible" lets other GPU pods preempt it`, "gone for good once preempted"],
	},
	"gpu pod claiming an owner that is not its controller, preemptible": {
		"request": t.review(preemptible_gpu_pod, {"metadata": {"ownerReferences": [object.union(t.job_owner, {"controller": false})]}}),
		"refused": ["gone for good once preempted"],
	},
	"bare gpu pod in a class below 0, where the stack declares no preemptible class": {
		"request": t.pod(preemptible_gpu_pod),
		"stack": "no_preemptible_class",
		"admitted": true,
	},
}

critical_gpu_pod := t.binpack([t.gpu_container], {"priorityClassName": "system-cluster-critical", "priority": 2000000000})

preemptible_gpu_pod := t.binpack([t.gpu_container], {"priorityClassName": "gpu-preemptible", "priority": -100})

test_cases if t.all_decided(cases)
