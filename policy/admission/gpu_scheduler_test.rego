package gpuplatform.admission_test

import data.gpuplatform.admission

params := {
	"mode": "enforce",
	"schedulerName": "gpu-binpack-scheduler",
	"gpuResourceNames": ["nvidia.com/gpu", "nvidia.com/mig-*"],
	"exemptNamespaces": ["kube-system"],
	"gpuNodeNames": ["gpu-1"],
	"gpuTaints": [{
		"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule",
		"text": "nvidia.com/gpu=present:NoSchedule",
		"toleration": {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
	}],
	"gpuRuntimeClasses": ["nvidia"],
	"daemonSetControllers": ["system:kube-controller-manager"],
	"auditLabel": "gpu-platform.io/admission-audit",
	"draDeviceClassSuffixes": ["nvidia.com"],
}

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
		with data.gpuplatform.params as params
	review.response.allowed == false
	review.response.uid == "7f0c"
	contains(review.response.status.message, `pod "team-a/train": container "main" requests nvidia.com/gpu`)
	contains(review.response.status.message, "spec.schedulerName: gpu-binpack-scheduler")
}

test_gpu_pod_on_binpack_scheduler_is_allowed if {
	spec := {
		"schedulerName": "gpu-binpack-scheduler", "containers": [gpu_container],
		"tolerations": [params.gpuTaints[0].toleration],
	}
	review := admission.review with input as pod_review("team-a", spec)
		with data.gpuplatform.params as params
	review.response == {"uid": "7f0c", "allowed": true}
}

test_mig_init_container_is_guarded if {
	init := {"name": "warmup", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}
	review := admission.review with input as pod_review("team-a", {"containers": [{"name": "c"}], "initContainers": [init]})
		with data.gpuplatform.params as params
	contains(review.response.status.message, `init container "warmup" requests nvidia.com/mig-1g.10gb`)
}

test_exempt_namespace_is_allowed if {
	review := admission.review with input as pod_review("kube-system", {"containers": [gpu_container]})
		with data.gpuplatform.params as params
	review.response.allowed == true
}

test_cpu_pod_bound_by_name_to_a_gpu_node_is_denied if {
	spec := {"nodeName": "gpu-1", "containers": [{"name": "c"}]}
	review := admission.review with input as pod_review("team-a", spec)
		with data.gpuplatform.params as params
	contains(review.response.status.message, `spec.nodeName "gpu-1" skips the scheduler`)
}

test_mutate_sets_the_scheduler if {
	review := admission.mutation with input as pod_review("team-a", {"containers": [gpu_container]})
		with data.gpuplatform.params as object.union(params, {"mode": "mutate"})
	patch := json.unmarshal(base64.decode(review.response.patch))
	{"op": "add", "path": "/spec/schedulerName", "value": "gpu-binpack-scheduler"} in patch
}

test_no_decision_without_parameters if {
	not admission.review with input as pod_review("team-a", {"containers": [gpu_container]})
}

high_priority_pod := {
	"schedulerName": "gpu-binpack-scheduler", "containers": [gpu_container],
	"tolerations": [params.gpuTaints[0].toleration],
	"priorityClassName": "urgent", "priority": 1000,
}

test_priority_remedy_names_the_preemptible_class_only_when_it_exists if {
	with_class := object.union(params, {"maxGpuPodPriority": 0, "preemptibleClass": "gpu-preemptible"})
	review := admission.review with input as pod_review("team-a", high_priority_pod)
		with data.gpuplatform.params as with_class
	contains(review.response.status.message, "name no priority class, gpu-preemptible (preemptible), or a class of priority 0 or less")

	without := object.union(params, {"maxGpuPodPriority": 0, "preemptibleClass": ""})
	plain := admission.review with input as pod_review("team-a", high_priority_pod)
		with data.gpuplatform.params as without
	contains(plain.response.status.message, "name no priority class, or a class of priority 0 or less")
}

test_no_preemptible_class_means_no_bare_pod_rule if {
	spec := object.union(high_priority_pod, {"priorityClassName": "gpu-preemptible", "priority": -100})
	without := object.union(params, {"maxGpuPodPriority": 0, "preemptibleClass": ""})
	review := admission.review with input as pod_review("team-a", spec)
		with data.gpuplatform.params as without
	review.response == {"uid": "7f0c", "allowed": true}
}
