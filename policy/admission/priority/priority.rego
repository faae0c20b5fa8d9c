# Priority: what a pod that may run on a GPU node may preempt, and who may be preempted.
package gpuplatform.admission

# Priority: kube-scheduler preempts lower-priority pods to place a pod that does not fit, so a
# pod of a high class that may run on a GPU node would evict other users' GPU pods that never
# opted in. spec.priority is already resolved from priorityClassName here (the Priority
# admission plugin runs before webhooks); a pod naming no class gets the cluster's default and
# is not this rule's business.
violations contains {
	"rule": "priority",
	"fixable": false,
	"message": sprintf(
		"pod %q: priorityClassName %q gives it priority %d, above %d, the highest a pod that may run on a GPU node may have (%s): it would preempt other users' GPU pods; %s",
		[pod_name, pod_spec.priorityClassName, pod_spec.priority, params.maxGpuPodPriority, gpu_node_way, priority_remedy],
	),
} if {
	is_create
	may_run_on_gpu_node
	is_string(pod_spec.priorityClassName)
	pod_spec.priorityClassName != ""
	is_number(pod_spec.priority)
	pod_spec.priority > params.maxGpuPodPriority
}

priority_remedy := sprintf("name no priority class, %s (preemptible), or a class of priority %d or less", [params.preemptibleClass, params.maxGpuPodPriority]) if {
	gpu_pod
	params.preemptibleClass != ""
}

else := sprintf("name no priority class, or a class of priority %d or less (node agents that must preempt belong in an exempt namespace)", [params.maxGpuPodPriority]) if not gpu_pod

else := sprintf("name no priority class, or a class of priority %d or less", [params.maxGpuPodPriority])

# A pod in the preemptible class is deleted when preempted; only a controller brings it back.
violations contains {
	"rule": "preemptible-bare-pod",
	"fixable": false,
	"message": sprintf(
		"pod %q: priorityClassName %q lets other GPU pods preempt it, and a pod that no controller owns is gone for good once preempted; run it under a Job, Deployment or StatefulSet, or name no priority class",
		[pod_name, params.preemptibleClass],
	),
} if {
	is_create
	gpu_pod
	params.preemptibleClass != ""
	pod_spec.priorityClassName == params.preemptibleClass
	not controller_owned
}

controller_owned if {
	some owner in input.request.object.metadata.ownerReferences
	owner.controller == true
}
