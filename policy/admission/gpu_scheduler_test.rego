package gpuplatform.admission_test

import data.gpuplatform.admission

params := {
	"schedulerName": "gpu-binpack-scheduler",
	"gpuResourceNames": ["nvidia.com/gpu", "nvidia.com/mig-*"],
	"exemptNamespaces": ["kube-system"],
}

# Where kube-mgmt puts the parameter ConfigMap of namespace gpu-admission.
loaded := {"gpu-platform-admission-params": {"params.json": params}}

pod_review(namespace, spec) := {"request": {
	"uid": "7f0c",
	"operation": "CREATE",
	"namespace": namespace,
	"kind": {"group": "", "version": "v1", "kind": "Pod"},
	"object": {"metadata": {"name": "train"}, "spec": spec},
}}

gpu_container := {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}

test_gpu_pod_on_default_scheduler_is_denied_with_the_fix if {
	review := admission.review with input as pod_review("team-a", {"containers": [gpu_container]})
		with data["gpu-admission"] as loaded
	review.response.allowed == false
	review.response.uid == "7f0c"
	contains(review.response.status.message, `pod "team-a/train": container "main" requests nvidia.com/gpu`)
	contains(review.response.status.message, "spec.schedulerName: gpu-binpack-scheduler")
}

test_gpu_pod_on_binpack_scheduler_is_allowed if {
	spec := {"schedulerName": "gpu-binpack-scheduler", "containers": [gpu_container]}
	review := admission.review with input as pod_review("team-a", spec)
		with data["gpu-admission"] as loaded
	review.response == {"uid": "7f0c", "allowed": true}
}

test_mig_init_container_is_guarded if {
	init := {"name": "warmup", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}
	review := admission.review with input as pod_review("team-a", {"containers": [{"name": "c"}], "initContainers": [init]})
		with data["gpu-admission"] as loaded
	contains(review.response.status.message, `init container "warmup" requests nvidia.com/mig-1g.10gb`)
}

test_exempt_namespace_is_allowed if {
	review := admission.review with input as pod_review("kube-system", {"containers": [gpu_container]})
		with data["gpu-admission"] as loaded
	review.response.allowed == true
}

test_no_decision_without_parameters if {
	not admission.review with input as pod_review("team-a", {"containers": [gpu_container]})
}
