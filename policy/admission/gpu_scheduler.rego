# Admission policy: no pod gets a GPU, or a place on a GPU node, unless the binpack scheduler
# decides where it runs. The principle: on a GPU node, a GPU is reached only through the GPU
# resource, as the binpack scheduler places it. Every way a pod may get onto a GPU node counts
# (asking for GPUs, tolerating the GPU taint, being bound to a node by name), and a pod that may
# get there is given no other way to a GPU (device paths: privilege, the capabilities the NVIDIA
# container toolkit treats as privilege, host devices and driver files, the host's processes,
# device-injecting annotations). docs/concepts/admission.md has the threat model.
#
# The webhooks send only the requests a rule can be about (their matchConditions); the policy
# checks again so that it is correct on its own. Its parameters are OPA data at
# data.gpuplatform.params: OPA loads them when it starts, with this file, from the same
# ConfigMap (opa-admission-policy, key params.json).
#
# Two decisions, one per webhook, both complete admission.k8s.io/v1 AdmissionReviews:
#   review    (validating) enforce: refuse any violation; mutate: refuse what the mutating
#             webhook cannot fix; audit: admit with a warning per violation.
#   mutation  (mutating; mutate and audit modes) mutate: set the scheduler and the GPU
#             tolerations; audit: label the pod so the dashboard can count it.
package gpuplatform.admission

# Undefined without the parameters: the decision is then undefined too, and the API server
# applies the webhook's failure policy instead of guessing.
params := data.gpuplatform.params if is_object(data.gpuplatform.params)

well_formed if {
	is_object(params)
	is_string(input.request.uid)
}

# --- decisions ---------------------------------------------------------------------------------

review := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": validation_response,
} if well_formed

mutation := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": mutation_response,
} if well_formed

refused contains v.message if {
	params.mode == "enforce"
	some v in violations
}

refused contains v.message if {
	params.mode == "mutate"
	some v in violations
	not v.fixable
}

warned contains sprintf("gpu-platform audit: %s", [v.message]) if {
	params.mode == "audit"
	some v in violations
}

warned contains message if {
	params.mode != "mutate"
	some message in hints
}

validation_response := {"uid": input.request.uid, "allowed": false, "status": {
	"code": 403,
	"reason": "Forbidden",
	"message": concat("; ", sort(refused)),
}} if count(refused) > 0

validation_response := {"uid": input.request.uid, "allowed": true, "warnings": sort(warned)} if {
	count(refused) == 0
	count(warned) > 0
	count(audited) == 0
}

# audit: the violations also go to the API server's audit log (as
# <webhook name>/violations), whatever the request: a Job's, a claim's, a debug container's.
validation_response := {
	"uid": input.request.uid, "allowed": true, "warnings": sort(warned),
	"auditAnnotations": {"violations": concat("; ", sort(audited))},
} if {
	count(refused) == 0
	count(audited) > 0
}

audited contains v.message if {
	params.mode == "audit"
	some v in violations
}

validation_response := {"uid": input.request.uid, "allowed": true} if {
	count(refused) == 0
	count(warned) == 0
}

mutation_response := {
	"uid": input.request.uid,
	"allowed": true,
	"patchType": "JSONPatch",
	"patch": base64.encode(json.marshal(patch)),
} if count(patch) > 0

mutation_response := {"uid": input.request.uid, "allowed": true} if count(patch) == 0

# mutate: what the violations' fixes and the missing tolerations need, in a fixed order.
patch := array.concat(scheduler_patch, toleration_patch) if params.mode == "mutate"

# audit: one label on a pod with violations, which kube-state-metrics exports.
patch := audit_label_patch if params.mode == "audit"

patch := [] if params.mode == "enforce"

scheduler_patch := [{"op": "add", "path": "/spec/schedulerName", "value": params.schedulerName}] if {
	some v in violations
	v.rule == "scheduler"
} else := []

toleration_patch := [{"op": "add", "path": "/spec/tolerations", "value": missing_tolerations}] if {
	count(missing_tolerations) > 0
	not is_array(object.get(pod_spec, "tolerations", null))
} else := [{"op": "add", "path": "/spec/tolerations/-", "value": t} | some t in missing_tolerations] if {
	count(missing_tolerations) > 0
} else := []

missing_tolerations := [toleration_for(taint) |
	is_create
	gpu_pod
	not kueue_managed
	some taint in params.gpuTaints
	not tolerated(pod_spec, taint)
]

audit_label_patch := [{"op": "add", "path": "/metadata/labels", "value": {params.auditLabel: "violation"}}] if {
	count(violations) > 0
	not is_object(object.get(input.request.object.metadata, "labels", null))
} else := [{"op": "add", "path": concat("", ["/metadata/labels/", replace(params.auditLabel, "/", "~1")]), "value": "violation"}] if {
	count(violations) > 0
} else := []

# --- what the request is -----------------------------------------------------------------------

is_pod if {
	input.request.kind.group == ""
	input.request.kind.kind == "Pod"
	is_object(input.request.object.spec)
	not exempt
}

is_create if {
	is_pod
	input.request.operation == "CREATE"
	not input.request.subResource
}

is_update if {
	is_pod
	input.request.operation == "UPDATE"
}

exempt if input.request.namespace in params.exemptNamespaces

pod_spec := input.request.object.spec

old_spec := input.request.oldObject.spec if is_object(input.request.oldObject.spec)

else := {}

pod_name := sprintf("%s/%s", [input.request.namespace, name]) if {
	name := input.request.object.metadata.name
	name != ""
} else := sprintf("%s/%s*", [input.request.namespace, input.request.object.metadata.generateName])

array_at(obj, key) := value if {
	value := obj[key]
	is_array(value)
} else := []

container_fields := {
	"containers": "container",
	"initContainers": "init container",
	"ephemeralContainers": "ephemeral container",
}

# Every container of the pod as [label, container]; on an update only the ephemeral containers
# the update adds (the others cannot change).
pod_containers contains [label, c] if {
	is_create
	some field, label in container_fields
	some c in array_at(pod_spec, field)
	is_object(c)
}

pod_containers contains ["ephemeral container", c] if {
	is_update
	some c in array_at(pod_spec, "ephemeralContainers")
	is_object(c)
	not c.name in {old.name | some old in array_at(old_spec, "ephemeralContainers")}
}

# The guarded resources a container asks for: named in its requests or limits with a quantity
# above zero (a chart's CPU variant may keep `nvidia.com/gpu: 0`, which asks for nothing).
gpu_resources(container) := {name |
	some section in ["requests", "limits"]
	some name, quantity in container.resources[section]
	guarded(name)
	positive(quantity)
}

positive(quantity) if {
	is_number(quantity)
	quantity > 0
}

# A quantity that does not parse counts as asking: the API server refuses it anyway.
positive(quantity) if {
	is_string(quantity)
	not units.parse(quantity) == 0
}

guarded(name) if {
	some pattern in params.gpuResourceNames
	not endswith(pattern, "*")
	name == pattern
}

guarded(name) if {
	some pattern in params.gpuResourceNames
	endswith(pattern, "*")
	startswith(name, trim_suffix(pattern, "*"))
}

gpu_pod if {
	some field, _ in container_fields
	some c in array_at(pod_spec, field)
	is_object(c)
	count(gpu_resources(c)) > 0
}

# On the DRA path a pod's resource claims may hold GPUs: the policy cannot see a claim's class
# from the pod (it names the claim), so such a pod is placed and queued as a GPU pod is.
gpu_pod if claims_gpus

claims_gpus if {
	params.gpuPath == "dra"
	count(array_at(pod_spec, "resourceClaims")) > 0
}

bound_by_name if {
	is_string(pod_spec.nodeName)
	pod_spec.nodeName != ""
}

named_gpu_node if pod_spec.nodeName in params.gpuNodeNames

# --- where a pod may run ------------------------------------------------------------------------

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

requested_gpu_resources contains name if {
	some field, _ in container_fields
	some c in array_at(pod_spec, field)
	is_object(c)
	some name in gpu_resources(c)
}

requested_gpu_resources contains sprintf("resource claims (%s)", [concat(", ", sort(claim_names))]) if claims_gpus

claim_names contains object.get(claim, "name", "") if {
	some claim in array_at(pod_spec, "resourceClaims")
}

may_run_on_gpu_node if count(gpu_node_ways) > 0

# The first reason, for messages.
gpu_node_way := sort(gpu_node_ways)[0]

# --- device paths: ways to a GPU other than the GPU resource ------------------------------------

# Each as [what, the fix]: on a GPU node, each reaches GPUs the pod was not given.
device_paths contains [sprintf("%s %q is privileged", [label, object.get(c, "name", "")]), "run it unprivileged"] if {
	some [label, c] in pod_containers
	c.securityContext.privileged == true
}

# The NVIDIA container toolkit treats a container with CAP_SYS_ADMIN in its bounding set as
# privileged: it then honours NVIDIA_VISIBLE_DEVICES and sees every GPU of the node.
device_paths contains [sprintf("%s %q adds the capability %s, which the NVIDIA container toolkit treats as privileged", [label, object.get(c, "name", ""), capability]), "drop it"] if {
	some [label, c] in pod_containers
	some capability in c.securityContext.capabilities.add
	is_string(capability)
	trim_prefix(upper(capability), "CAP_") in params.privilegedCapabilities
}

device_paths contains [sprintf("volume %q mounts the host path %s, which holds GPU devices or driver files", [object.get(v, "name", ""), v.hostPath.path]), "mount no host devices or driver files"] if {
	is_create
	some v in array_at(pod_spec, "volumes")
	is_string(v.hostPath.path)
	device_host_path(v.hostPath.path)
}

device_paths contains ["spec.hostPID shares the node's processes, and with them their GPU device files", "leave hostPID unset"] if {
	is_create
	pod_spec.hostPID == true
}

# The host's IPC namespace brings the host's /dev/shm, where GPU jobs keep their shared buffers
# (NCCL's shared-memory transport among them).
device_paths contains ["spec.hostIPC shares the node's shared memory, and with it other GPU jobs' buffers", "leave hostIPC unset"] if {
	is_create
	pod_spec.hostIPC == true
}

# The NVIDIA container toolkit gives a container the GPUs its mounts under this directory name
# (`all` among them): decided on the destination as the toolkit cleans it, whatever the source.
device_paths contains [sprintf("%s %q mounts %q at %s, where the NVIDIA container toolkit reads which GPUs to give it", [label, object.get(c, "name", ""), object.get(m, "name", ""), m.mountPath]), "mount it elsewhere"] if {
	some [label, c] in pod_containers
	some m in array_at(c, "volumeMounts")
	is_string(m.mountPath)
	toolkit_device_list(m.mountPath)
}

device_paths contains [sprintf("the annotation %s injects devices into its containers", [key]), "remove the annotation"] if {
	some key in annotations_set
	some prefix in params.deviceAnnotationPrefixes
	startswith(key, prefix)
}

# A path as the kernel reads it: split on "/", without empty segments (repeated and trailing
# slashes) and "." segments; "" for the root. A relative host path or one that climbs with ".."
# is resolved by the node where the policy cannot follow it: those count as device paths.
path_segments(path) := [s | some s in split(path, "/"); not s in {"", "."}]

clean_path(path) := concat("/", ["", concat("/", path_segments(path))])

resolvable(path) if {
	startswith(path, "/")
	not ".." in path_segments(path)
}

# A host path holds GPU devices or driver files when, in any of its spellings on the node
# (params.deviceHostPaths lists each guarded path in all of them), it is one of the guarded
# paths, lies under one, or contains one (a mount of / or /usr holds them all).
device_host_path(path) if not resolvable(path)

device_host_path(path) if {
	resolvable(path)
	clean := clean_path(path)
	some guarded_path in params.deviceHostPaths
	path_within(clean, guarded_path)
}

device_host_path(path) if {
	resolvable(path)
	clean := clean_path(path)
	some guarded_path in params.deviceHostPaths
	path_within(guarded_path, clean)
}

device_host_path(path) if clean_path(path) == "/"

path_within(path, directory) if path == directory

path_within(path, directory) if startswith(path, concat("", [directory, "/"]))

# The toolkit compares the cleaned destination with its directory as a plain string prefix
# (the kubelet makes a relative mount path absolute first); ".." is resolved by the cleaning,
# so a destination that climbs counts when it names the directory at all.
toolkit_device_list(mount_path) if {
	not ".." in path_segments(mount_path)
	startswith(clean_path(mount_path), params.toolkitDeviceListRoot)
}

toolkit_device_list(mount_path) if {
	".." in path_segments(mount_path)
	contains(mount_path, toolkit_device_list_name)
}

toolkit_device_list_name := name if {
	segments := path_segments(params.toolkitDeviceListRoot)
	name := segments[count(segments) - 1]
}

# The annotations a request sets: all of them at creation; on an update, those it adds or changes.
annotations_set contains key if {
	is_create
	some key, _ in object.get(input.request.object.metadata, "annotations", {})
}

annotations_set contains key if {
	is_pod
	input.request.operation == "UPDATE"
	not input.request.subResource
	some key, value in object.get(input.request.object.metadata, "annotations", {})
	object.get(object.get(object.get(input.request, "oldObject", {}), "metadata", {}), "annotations", {})[key] != value
}

annotations_set contains key if {
	is_pod
	input.request.operation == "UPDATE"
	not input.request.subResource
	some key, _ in object.get(input.request.object.metadata, "annotations", {})
	not object.get(object.get(object.get(input.request, "oldObject", {}), "metadata", {}), "annotations", {})[key]
}

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

visible_devices_env(c) := e if {
	some e in array_at(c, "env")
	e.name == "NVIDIA_VISIBLE_DEVICES"
	not object.get(e, "value", "x") in {"void", "none"}
}

# --- the rules ---------------------------------------------------------------------------------

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

violations contains {
	"rule": "visible-devices",
	"fixable": false,
	"message": sprintf(
		"pod %q: %s %q sets NVIDIA_VISIBLE_DEVICES, which would expose GPUs it did not request; request GPUs in resources.limits instead",
		[pod_name, label, object.get(c, "name", "")],
	),
} if {
	some [label, c] in pod_containers
	visible_devices_env(c)
}

violations contains {
	"rule": "runtime-class",
	"fixable": false,
	"message": sprintf(
		"pod %q requests no GPU but spec.runtimeClassName is %q, the NVIDIA runtime; request a GPU, or leave runtimeClassName unset",
		[pod_name, pod_spec.runtimeClassName],
	),
} if {
	is_create
	not gpu_pod
	pod_spec.runtimeClassName in params.gpuRuntimeClasses
}

# Device paths: a pod that may run on a GPU node reaches GPUs only through the GPU resource.
# Node agents that need any of these belong in an exempt namespace.
violations contains {
	"rule": "device-path",
	"fixable": false,
	"message": sprintf(
		"pod %q: %s, and it may run on a GPU node (%s), where a GPU is reached only through the GPU resource placed by %s: %s (node agents that need it belong in an exempt namespace)",
		[pod_name, what, gpu_node_way, params.schedulerName, fix],
	),
} if {
	may_run_on_gpu_node
	some [what, fix] in device_paths
}

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

# Dynamic Resource Allocation. A claim's own selectors only narrow the devices of its class, so
# the policy decides by class. On the device plugin path, a claim on an NVIDIA class is refused
# (no DRA driver serves it, and one would hand out the device plugin's GPUs again). On the DRA
# path, claims on NVIDIA's classes are admitted (their pods are GPU pods, above), but not with
# adminAccess (every device of the class, in use or not). Claims on another class are admitted
# only where the stack lists the class as selecting no NVIDIA device (admission.deviceClasses).
# Only creation decides a claim's devices: its finalizers stay free to change.
violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"%s %q asks for devices of %s through Dynamic Resource Allocation; %s",
		[input.request.kind.kind, claim_name, concat(", ", sort(refused_device_classes)), dra_remedy],
	),
} if {
	is_claim
	input.request.operation == "CREATE"
	count(refused_device_classes) > 0
}

violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"%s %q asks for the devices of %s with adminAccess, which hands it every device of the class, in use by other pods or not; drop adminAccess (monitoring agents that need it belong in an exempt namespace)",
		[input.request.kind.kind, claim_name, concat(", ", sort({sprintf("the device class %q", [r.deviceClassName]) | some r in device_requests; r.adminAccess == true}))],
	),
} if {
	is_claim
	input.request.operation == "CREATE"
	some r in device_requests
	r.adminAccess == true
}

is_claim if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind in {"ResourceClaim", "ResourceClaimTemplate"}
	not input.request.subResource
	not exempt
}

refused_device_classes contains sprintf("the device class %q", [r.deviceClassName]) if {
	some r in device_requests
	is_string(r.deviceClassName)
	not r.deviceClassName in params.allowedDeviceClasses
	not dra_gpu_class(r.deviceClassName)
}

# A class of NVIDIA's devices that the DRA path serves.
dra_gpu_class(name) if {
	params.gpuPath == "dra"
	nvidia_class(name)
}

dra_remedy := "GPUs through DRA need the DRA path (gpuOperator.gpuPath: dra); on this platform request nvidia.com/gpu in a container's resources.limits instead" if {
	some r in device_requests
	nvidia_class(r.deviceClassName)
} else := "only the device classes the platform team has checked select no GPU may be claimed (admission.deviceClasses)"

claim_name := sprintf("%s/%s", [input.request.namespace, object.get(input.request.object.metadata, "name", "")])

claim_spec := input.request.object.spec.spec if input.request.kind.kind == "ResourceClaimTemplate"

else := input.request.object.spec

# Every device request of the claim, in the v1 shape (exactly, firstAvailable) and the older
# beta shape (deviceClassName on the request itself).
device_requests contains r if {
	some request in claim_spec.devices.requests
	some r in [object.get(request, "exactly", {}), request]
}

device_requests contains r if {
	some request in claim_spec.devices.requests
	some r in request.firstAvailable
}

nvidia_class(name) if {
	some suffix in params.draDeviceClassSuffixes
	endswith(name, suffix)
}

nvidia_class(name) if name in params.platformDeviceClasses

# Who may write what the DRA path hands out: the schedulers allocate claims and the
# resource-claim controller releases them; NVIDIA's driver publishes its ResourceSlices; the
# platform declares its DeviceClasses. Anyone else doing so would reach GPUs past the binpack
# scheduler. Service accounts of exempt namespaces (the GPU Operator's, which runs the driver
# and creates NVIDIA's classes) are trusted, as every pod there is.
trusted_writer if {
	some namespace in params.exemptNamespaces
	startswith(input.request.userInfo.username, sprintf("system:serviceaccount:%s:", [namespace]))
}

violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"ResourceClaim %q: its allocation is written by a scheduler (and released by the resource-claim controller), not by %s; a claim allocated by hand reaches devices no scheduler placed",
		[claim_name, input.request.userInfo.username],
	),
} if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind == "ResourceClaim"
	input.request.operation == "UPDATE"
	input.request.subResource == "status"
	not exempt
	not input.request.userInfo.username in params.claimWriters
	some field in ["allocation", "reservedFor"]
	object.get(object.get(input.request.object, "status", {}), field, null) != object.get(object.get(object.get(input.request, "oldObject", {}), "status", {}), field, null)
}

violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"DeviceClass %q %s, and only the platform's own classes and NVIDIA's (made by the GPU Operator) may: GPUs are handed out only where the binpack scheduler places them; select another driver's devices (a first selector device.driver == '<driver>') and name no NVIDIA resource",
		[object.get(input.request.object.metadata, "name", ""), concat(" and ", sort(device_class_reaches))],
	),
} if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind == "DeviceClass"
	input.request.operation in {"CREATE", "UPDATE"}
	not object.get(input.request.object.metadata, "name", "") in params.platformDeviceClasses
	not trusted_writer
	count(device_class_reaches) > 0
}

device_class_reaches contains sprintf("serves %s", [name]) if {
	name := input.request.object.spec.extendedResourceName
	guarded(name)
}

device_class_reaches contains "may select NVIDIA devices (no selector keeps to another driver)" if {
	not selects_other_driver
}

# A selector that keeps the class to one driver's devices, named literally, and not NVIDIA's.
selects_other_driver if {
	some selector in array_at(object.get(input.request.object, "spec", {}), "selectors")
	match := regex.find_all_string_submatch_n(`^\s*device\.driver\s*==\s*['"]([^'"]+)['"]\s*(&&.*)?$`, selector.cel.expression, 1)[0]
	not endswith(match[1], "nvidia.com")
}

violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"ResourceSlice %q publishes devices of NVIDIA's driver %s; only the driver publishes them (its kubelet plugin in the GPU Operator's namespace), or it would offer GPUs no node holds, or another node's",
		[object.get(input.request.object.metadata, "name", ""), input.request.object.spec.driver],
	),
} if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind == "ResourceSlice"
	input.request.operation in {"CREATE", "UPDATE"}
	endswith(input.request.object.spec.driver, "nvidia.com")
	not trusted_writer
}

# --- teams: a team's GPUs are reached only through its queue -------------------------------------

# Kueue releases a team's GPU work, and only Kueue: a pod is held by Kueue's scheduling gates
# until Kueue admits it against the team's quota, or created by the Job controller for a Job
# that only Kueue starts. So in a team namespace the policy decides every write that could let
# GPU work run outside Kueue's hands: at creation, a gate Kueue would never lift on the quota's
# terms (a pod Kueue does not manage, a pod group sized by what its pods claim, a parent's pod
# no controller made); later, a gate lifted, or Kueue's labels and annotations changed, by anyone
# but Kueue; a Job started, or grown while it runs, by anyone but Kueue.

team_of_namespace := team if {
	params.teams.enabled
	team := params.teams.namespaces[input.request.namespace]
}

by_kueue if input.request.userInfo.username in params.teams.kueueUsers

metadata_of(obj, field) := object.get(object.get(obj, "metadata", {}), field, {})

kueue_gated if {
	some gate in array_at(pod_spec, "schedulingGates")
	gate.name == params.teams.admissionGate
}

# Kueue forms a group of the pods that name one (label or annotation) into one workload.
pod_group_name := name if {
	some field in ["labels", "annotations"]
	name := metadata_of(input.request.object, field)[params.teams.podGroupKey]
}

# Why Kueue would not release a gated pod only by admitting it, if it would not.
queue_bypass contains "it carries Kueue's gate, but Kueue's webhook did not take it over (no label kueue.x-k8s.io/managed: a pod that names a controller of a kind Kueue manages is left to that controller), so nothing would lift the gate against the quota" if {
	kueue_gated
	not metadata_of(input.request.object, "labels")[params.teams.managedLabel] == "true"
	not metadata_of(input.request.object, "annotations")[params.teams.parentAnnotation]
}

queue_bypass contains sprintf("it claims a parent Kueue holds (annotation %s), but the ReplicaSet or StatefulSet controller did not create it", [params.teams.parentAnnotation]) if {
	kueue_gated
	metadata_of(input.request.object, "annotations")[params.teams.parentAnnotation]
	not input.request.userInfo.username in params.teams.parentControllers
}

queue_bypass contains sprintf("it joins the Kueue pod group %q, which Kueue (0.19) sizes by the role its pods claim rather than by what each asks for: run the group as a Job, JobSet or StatefulSet", [pod_group_name]) if {
	kueue_gated
	pod_group_name
	not input.request.userInfo.username in params.teams.parentControllers
}

queue_bypass contains "it is not held by Kueue's admission gate" if not kueue_gated

# A pod Kueue holds until it admits it against its team's quota (a bare pod, and the pods of
# Deployments, StatefulSets and LeaderWorkerSets), or one the Job controller creates for a Job
# Kueue started (Jobs, JobSets: Kueue writes the admission into the Job's template, and only
# Kueue starts a team's Job, below).
kueue_managed if {
	kueue_gated
	count(queue_bypass) == 0
}

kueue_managed if {
	input.request.userInfo.username in params.teams.jobControllers
	object.get(metadata_of(input.request.object, "labels"), params.teams.podSetLabel, "") != ""
}

violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"pod %q requests %s in namespace %q of team %q without going through the team's queue, so no quota would count it (%s): submit it through Kueue, to the LocalQueue %s/%s (every Job, JobSet, Deployment, StatefulSet and pod of the namespace that names no other queue goes there)",
		[pod_name, concat(", ", sort(requested_gpu_resources)), input.request.namespace, team, concat("; ", sort(queue_bypass)), input.request.namespace, params.teams.queue],
	),
} if {
	is_create
	gpu_pod
	team := team_of_namespace
	not kueue_managed
}

# Later, only Kueue lifts its gates and writes its labels and annotations on a team's GPU pod:
# without its gate the pod is scheduled at once, and without its labels Kueue lets it go.
violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"pod %q: only Kueue lifts its scheduling gate %s, once it admits the pod against the quota of team %q; leave the gate to Kueue (the pod starts when the LocalQueue %s/%s admits it)",
		[pod_name, gate.name, team, input.request.namespace, params.teams.queue],
	),
} if {
	is_pod_update
	gpu_pod
	team := team_of_namespace
	not by_kueue
	some gate in array_at(old_spec, "schedulingGates")
	gate.name in params.teams.gates
	not gate.name in {g.name | some g in array_at(pod_spec, "schedulingGates")}
}

violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"pod %q: only Kueue changes its %s, which Kueue reads to count the pod against the quota of team %q; leave Kueue's labels and annotations (%s*) as they are",
		[pod_name, what, team, params.teams.metadataPrefix],
	),
} if {
	is_pod_update
	gpu_pod
	team := team_of_namespace
	not by_kueue
	some what in kueue_metadata_changed
}

is_pod_update if {
	is_update
	not input.request.subResource
}

kueue_metadata_changed contains sprintf("%s %s", [trim_suffix(field, "s"), key]) if {
	some field in ["labels", "annotations"]
	new := metadata_of(input.request.object, field)
	old := metadata_of(input.request.oldObject, field)
	some key in (object.keys(new) | object.keys(old))
	startswith(key, params.teams.metadataPrefix)
	object.get(new, key, null) != object.get(old, key, null)
}

# Jobs and JobSets: Kueue suspends each at creation in a team namespace and starts it when it
# admits it; a Job's pods are then admitted for the labels Kueue wrote into its template. So only
# Kueue may start one, and a running Job may not grow behind Kueue's back.
team_workload := {"kind": input.request.kind.kind, "spec": input.request.object.spec} if {
	[input.request.kind.group, input.request.kind.kind] in {["batch", "Job"], ["jobset.x-k8s.io", "JobSet"]}
	is_object(input.request.object.spec)
	not exempt
	team_of_namespace
}

workload_pod_specs contains spec if {
	team_workload.kind == "Job"
	spec := team_workload.spec.template.spec
}

workload_pod_specs contains spec if {
	team_workload.kind == "JobSet"
	some replicated in array_at(team_workload.spec, "replicatedJobs")
	spec := replicated.template.spec.template.spec
}

workload_gpu_resources contains name if {
	some spec in workload_pod_specs
	some field, _ in container_fields
	some c in array_at(spec, field)
	is_object(c)
	some name in gpu_resources(c)
}

workload_name := sprintf("%s %q", [team_workload.kind, sprintf("%s/%s", [input.request.namespace, object.get(input.request.object.metadata, "name", "")])])

suspended(spec) if spec.suspend == true

violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"%s requests %s but was not suspended at creation: Kueue suspends every %s of namespace %q (team %q) until it admits it, and leaves it running only for an owner Kueue already admitted, which only that owner's controller may create; remove metadata.ownerReferences and submit it to the LocalQueue %s/%s",
		[workload_name, concat(", ", sort(workload_gpu_resources)), team_workload.kind, input.request.namespace, team_of_namespace, input.request.namespace, params.teams.queue],
	),
} if {
	input.request.operation == "CREATE"
	count(workload_gpu_resources) > 0
	not suspended(team_workload.spec)
	not by_kueue
	not input.request.userInfo.username in params.teams.workloadControllers
}

violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"%s: only Kueue starts a %s of namespace %q (team %q), once it admits it against the team's quota; leave spec.suspend to Kueue",
		[workload_name, team_workload.kind, input.request.namespace, team_of_namespace],
	),
} if {
	input.request.operation == "UPDATE"
	count(workload_gpu_resources) > 0
	suspended(input.request.oldObject.spec)
	not suspended(team_workload.spec)
	not by_kueue
}

violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"%s: spec.parallelism %d -> %d would run more GPU pods than Kueue admitted for team %q; suspend the Job first (Kueue admits it again at its new size)",
		[workload_name, old_parallelism, team_workload.spec.parallelism, team_of_namespace],
	),
} if {
	input.request.operation == "UPDATE"
	team_workload.kind == "Job"
	count(workload_gpu_resources) > 0
	not suspended(team_workload.spec)
	old_parallelism := object.get(input.request.oldObject.spec, "parallelism", 1)
	object.get(team_workload.spec, "parallelism", 1) > old_parallelism
	not by_kueue
}

violations contains {
	"rule": "team-namespace",
	"fixable": false,
	"message": sprintf(
		"pod %q requests %s in namespace %q, which belongs to no team: GPU pods run in the namespaces of a team (%s), whose quota counts them",
		[pod_name, concat(", ", sort(requested_gpu_resources)), input.request.namespace, concat(", ", sort(object.keys(params.teams.namespaces)))],
	),
} if {
	is_create
	gpu_pod
	params.teams.enabled
	params.teams.gpuPodsOutsideTeams == "refuse"
	not params.teams.namespaces[input.request.namespace]
}

# --- hints: not violations, but a pod that would never run --------------------------------------

hints contains sprintf(
	"pod %q requests a GPU but does not tolerate the GPU node taint %s, so no node will take it: add the toleration %s",
	[pod_name, taint_text(taint), json.marshal(toleration_for(taint))],
) if {
	is_create
	gpu_pod
	not kueue_managed
	some taint in params.gpuTaints
	not tolerated(pod_spec, taint)
}

# Both come with the taint in the parameters, written by the program as it writes them elsewhere.
taint_text(taint) := taint.text

toleration_for(taint) := taint.toleration
