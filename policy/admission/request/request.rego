# What the request is: a pod (created, or updated), its containers, the GPU resources it asks
# for, whether it is bound to a node by name, the annotations it sets.
package gpuplatform.admission

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

# A resource that may resolve to a GPU (params.gpuResourceNames: the stack's GPU resources,
# those the platform's DeviceClasses serve, and every DeviceClass's own resource name), but not
# the own name of a class the stack lists as selecting no NVIDIA device.
guarded(name) if {
	some pattern in params.gpuResourceNames
	resource_matches(name, pattern)
	not listed_class_resource(name)
}

listed_class_resource(name) if class_of_resource(name) in params.allowedDeviceClasses

resource_matches(name, pattern) if {
	not endswith(pattern, "*")
	name == pattern
}

resource_matches(name, pattern) if {
	endswith(pattern, "*")
	startswith(name, trim_suffix(pattern, "*"))
}

# The DeviceClass whose own resource name this is (deviceclass.resource.kubernetes.io/<class>).
class_of_resource(name) := trim_prefix(name, params.deviceClassResourcePrefix) if {
	startswith(name, params.deviceClassResourcePrefix)
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
