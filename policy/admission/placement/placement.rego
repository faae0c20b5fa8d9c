# Where a pod may run: the ways onto a GPU node, and the rules that keep GPU pods with the binpack
# scheduler and GPU nodes for GPU pods (the scheduler's name, spec.nodeName, the GPU taint's
# tolerations).
package gpuplatform.admission

# Every way onto a GPU node, each with the reason a refusal gives: asking for GPUs (the binpack
# scheduler puts the pod there), tolerating the GPU taint (by key or by wildcard; then any
# scheduler may), or being bound to a node by name, which skips every scheduler: to a GPU node's
# name, or to any node where node pools taint their own GPU nodes and their names are unknown.
gpu_node_ways contains sprintf("it requests %s", [concat(", ", sort(requested_gpu_resources))]) if gpu_pod

gpu_node_ways contains sprintf("it tolerates the GPU node taint %s", [taint_text(params.gpuTaints[0])]) if tolerates_gpu_nodes(pod_spec)

gpu_node_ways contains sprintf("spec.nodeName %q is a GPU node", [pod_spec.nodeName]) if named_gpu_node

gpu_node_ways contains sprintf("spec.nodeName %q may be a GPU node (GPU nodes are not named in this stack)", [pod_spec.nodeName]) if {
	not params.gpuNodeNamesKnown
	bound_by_name
}

may_run_on_gpu_node if count(gpu_node_ways) > 0

# The first reason, for messages.
gpu_node_way := sort(gpu_node_ways)[0]

# kube-scheduler's toleration semantics: an empty key with Exists tolerates every taint; an
# empty effect tolerates every effect.
tolerates(t, taint) if {
	object.get(t, "effect", "") in {"", taint.effect}
	object.get(t, "key", "") == ""
	t.operator == "Exists"
}

tolerates(t, taint) if {
	object.get(t, "effect", "") in {"", taint.effect}
	t.key == taint.key
	t.operator == "Exists"
}

tolerates(t, taint) if {
	object.get(t, "effect", "") in {"", taint.effect}
	t.key == taint.key
	object.get(t, "operator", "Equal") == "Equal"
	object.get(t, "value", "") == taint.value
}

tolerated(spec, taint) if {
	some t in array_at(spec, "tolerations")
	is_object(t)
	tolerates(t, taint)
}

# The taint that keeps other pods off GPU nodes is the first one; the others only add to it.
tolerates_gpu_nodes(spec) if tolerated(spec, params.gpuTaints[0])

# A DaemonSet's pod, created by the DaemonSet controller: node agents (metrics, logs, network)
# belong on every node.
daemonset_pod if {
	input.request.userInfo.username in params.daemonSetControllers
	some owner in input.request.object.metadata.ownerReferences
	owner.controller == true
	owner.kind == "DaemonSet"
	owner.apiVersion == "apps/v1"
}

# Both come with the taint in the parameters, written by the program as it writes them elsewhere.
taint_text(taint) := taint.text

toleration_for(taint) := taint.toleration

violations contains {
	"rule": "scheduler",
	"fixable": true,
	"message": sprintf(
		"pod %q: %s %q requests %s but spec.schedulerName is %q; GPU pods must set spec.schedulerName: %s",
		[pod_name, label, object.get(c, "name", ""), concat(", ", sort(resources)), scheduler, params.schedulerName],
	),
} if {
	is_create
	scheduler := object.get(pod_spec, "schedulerName", "default-scheduler")
	scheduler != params.schedulerName
	some [label, c] in pod_containers
	resources := gpu_resources(c)
	count(resources) > 0
}

violations contains {
	"rule": "scheduler",
	"fixable": true,
	"message": sprintf(
		"pod %q has resource claims (%s), which may hold GPUs, but spec.schedulerName is %q; pods with resource claims must set spec.schedulerName: %s",
		[pod_name, concat(", ", sort(claim_names)), scheduler, params.schedulerName],
	),
} if {
	is_create
	claims_gpus
	scheduler := object.get(pod_spec, "schedulerName", "default-scheduler")
	scheduler != params.schedulerName
}

violations contains {
	"rule": "node-name",
	"fixable": false,
	"message": sprintf(
		"pod %q: spec.nodeName %q skips the scheduler; %s",
		[pod_name, pod_spec.nodeName, reason],
	),
} if {
	is_create
	is_string(pod_spec.nodeName)
	pod_spec.nodeName != ""
	some reason in node_name_reasons
}

node_name_reasons contains sprintf("GPU pods are placed by %s: remove spec.nodeName (use a nodeSelector on kubernetes.io/hostname to pin a node)", [params.schedulerName]) if gpu_pod

node_name_reasons contains "it is a GPU node, which only GPU pods placed by the binpack scheduler may use" if {
	not gpu_pod
	named_gpu_node
}

# Taints the platform puts on a GPU node for a while (a reservation's, a fault's): a pod that
# tolerates one by name would take the node kept for a waiting pod, or land on a failed GPU. Only
# the user the parameters name gives that toleration, by update (the reservation run, to the pod
# the node is kept for); the GPU node's own DaemonSets get it from the program.
violations contains {
	"rule": "platform-taint-toleration",
	"fixable": false,
	"message": sprintf("pod %q tolerates %s, %s: remove it", [pod_name, taint.key, taint.meaning]),
} if {
	input.request.operation in {"CREATE", "UPDATE"}
	not input.request.subResource
	not daemonset_pod
	some taint in object.get(params, "passingTaints", [])
	tolerates_by_key(pod_spec, taint.key)
	not tolerates_by_key(old_spec, taint.key)
	input.request.userInfo.username != taint.givenBy
}

tolerates_by_key(spec, key) if {
	some t in array_at(spec, "tolerations")
	object.get(t, "key", "") == key
}

violations contains {
	"rule": "gpu-node-without-gpu",
	"fixable": false,
	"message": sprintf(
		"pod %q requests no GPU but tolerates the GPU node taint %s; GPU nodes are for GPU pods: remove the toleration, or request a GPU",
		[pod_name, taint_text(params.gpuTaints[0])],
	),
} if {
	is_pod
	input.request.operation in {"CREATE", "UPDATE"}
	not input.request.subResource
	not gpu_pod
	tolerates_gpu_nodes(pod_spec)
	not tolerates_gpu_nodes(old_spec)
	not daemonset_pod
}
