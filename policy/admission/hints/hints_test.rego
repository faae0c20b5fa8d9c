# Hints: a GPU pod that no node would take (it lacks the GPU taint's toleration) is admitted with a
# warning that gives the toleration to add.
package gpuplatform.admission_test.hints

import data.gpuplatform.admission_test as t

cases := {
	"gpu pod without the toleration": {
		"request": t.pod({"schedulerName": "gpu-binpack-scheduler", "containers": [t.gpu_container]}),
		"warned": [
			"does not tolerate the GPU node taint nvidia.com/gpu=present:NoSchedule, so no node will take it",
			`add the toleration {"effect":"NoSchedule","key":"nvidia.com/gpu","operator":"Equal","value":"present"}`,
		],
	},
	"gpu pod tolerating the GPU taint by its key": {
		"request": t.pod(t.binpack([t.gpu_container], {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]})),
		"admitted": true,
	},
	"gpu pod without the toleration, in an exempt namespace": {
		"request": t.review({"schedulerName": "gpu-binpack-scheduler", "containers": [t.gpu_container]}, {"namespace": "kube-system"}),
		"admitted": true,
	},
}

test_cases if t.all_decided(cases)
