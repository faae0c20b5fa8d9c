# Dynamic Resource Allocation: claims, device classes, ResourceSlices and claims' allocations.
package gpuplatform.admission

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
