# Dynamic Resource Allocation: claims and their allocations, device classes, ResourceSlices,
# DeviceTaintRules, and the resource names that resolve to a device class.
package gpuplatform.admission

# The principle of the device plugin path, applied to what the scheduler and NVIDIA's driver
# read on the DRA path rather than to the names the policy knows: every resource name that
# resolves to a DeviceClass (each class's own name, deviceclass.resource.kubernetes.io/<class>,
# besides its extendedResourceName), every class a claim names, every writer of classes,
# slices, taint rules and allocations. A claim's own selectors only narrow the devices of its
# class, so the policy decides by class. On the device plugin path a claim on an NVIDIA class
# is refused (no DRA driver serves it, and one would hand out the device plugin's GPUs again).
# On the DRA path claims on NVIDIA's classes are admitted (their pods are GPU pods), but not
# with adminAccess, tolerations of device taints, or another claim's ComputeDomain. Claims on
# another class are admitted only where the stack lists the class as selecting no NVIDIA device
# (admission.deviceClasses). Only creation decides a claim's devices: its spec cannot change.

# --- resource names that resolve to a device class ----------------------------------------------

# A container that asks for a class's devices by the class's own name: only the classes the
# stack lists. NVIDIA's GPUs are asked for as the resources the platform's classes serve
# (counted by the teams' quotas as such) or through claims.
violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"pod %q: %s %q requests %s, which Kubernetes serves from the devices of the device class %q; %s",
		[pod_name, label, object.get(c, "name", ""), name, class, class_resource_remedy(class)],
	),
} if {
	is_create
	some [label, c] in pod_containers
	some name in gpu_resources(c)
	class := class_of_resource(name)
}

class_resource_remedy(class) := "request nvidia.com/gpu (or nvidia.com/mig-<profile>) in resources.limits instead, which the platform places and counts as GPUs, or claim the class's devices with a ResourceClaim" if {
	params.gpuPath == "dra"
	nvidia_class(class)
} else := "GPUs through DRA need the DRA path (gpuOperator.gpuPath: dra); on this platform request nvidia.com/gpu in resources.limits instead" if {
	nvidia_class(class)
} else := "only the device classes the platform team has checked select no GPU may be asked for (admission.deviceClasses)"

# --- claims and claim templates -----------------------------------------------------------------

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

# A device taint takes devices out of service: NVIDIA's driver taints an unhealthy GPU
# (gpu.nvidia.com/xid, gpu.nvidia.com/gpu-lost), an administrator a GPU being drained
# (DeviceTaintRule). A claim that tolerates it could be given that GPU, or keep it.
violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"%s %q tolerates device taints (%s) on NVIDIA's devices: a tainted GPU is out of service (unhealthy, as NVIDIA's driver marks it, or drained by an administrator), and a claim that tolerates the taint may be given that GPU or keep it while it is drained; remove tolerations from spec.devices.requests",
		[input.request.kind.kind, claim_name, concat(", ", sort(tolerated_device_taints))],
	),
} if {
	is_claim
	input.request.operation == "CREATE"
	count(tolerated_device_taints) > 0
}

tolerated_device_taints contains object.get(t, "key", "every key") if {
	some r in device_requests
	nvidia_class(r.deviceClassName)
	some t in array_at(r, "tolerations")
}

# NVIDIA's driver reads a claim's opaque configuration: how the claim's own GPUs are shared
# among the pods that share the claim (admitted: the GPUs are the claim's alone), and which
# ComputeDomain's IMEX channel or daemon the claim joins, which only the driver's
# compute-domain controller names (in the templates it makes) and the resource-claim controller
# copies from them: a claim naming another ComputeDomain would share memory over NVLink with
# its pods, whoever's they are.
violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"%s %q: %s",
		[input.request.kind.kind, claim_name, reason],
	),
} if {
	is_claim
	input.request.operation == "CREATE"
	some config in array_at(object.get(claim_spec, "devices", {}), "config")
	nvidia_driver(config.opaque.driver)
	reason := opaque_config_refusal(config.opaque)
}

opaque_config_refusal(opaque) := sprintf(
	"its configuration for %s (kind %s) joins a ComputeDomain, which only NVIDIA's compute-domain controller names; create a ComputeDomain and use the claim template it makes (spec.channel.resourceClaimTemplate.name)",
	[opaque.driver, opaque.parameters.kind],
) if {
	opaque.parameters.kind in params.computeDomainConfigKinds
	not input.request.userInfo.username in params.draWriters.computeDomains
	not input.request.userInfo.username in params.claimWriters
}

opaque_config_refusal(opaque) := sprintf(
	"its configuration for %s is of kind %q, which the platform does not know the effect of; NVIDIA's driver takes %s (GPU sharing) from claims",
	[opaque.driver, kind, concat(" and ", params.gpuSharingConfigKinds)],
) if {
	kind := object.get(object.get(opaque, "parameters", {}), "kind", "")
	not kind in params.computeDomainConfigKinds
	not kind in params.gpuSharingConfigKinds
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

nvidia_driver(name) if {
	some suffix in params.draDeviceClassSuffixes
	endswith(name, suffix)
}

nvidia_class(name) if nvidia_driver(name)

nvidia_class(name) if platform_class_spec(name)

# The spec the program gives one of the platform's own DeviceClasses, by name: exactly, or
# from the shape of the per-profile classes with the profile put in.
platform_class_spec(name) := shape.spec if {
	some shape in params.platformDeviceClasses
	shape.name == name
}

platform_class_spec(name) := json.unmarshal(replace(json.marshal(shape.spec), placeholder, profile)) if {
	some shape in params.platformDeviceClasses
	placeholder := "{profile}"
	[prefix, suffix] := split(shape.name, placeholder)
	startswith(name, prefix)
	endswith(name, suffix)
	profile := substring(name, count(prefix), (count(name) - count(prefix)) - count(suffix))
	regex.match(shape.profilePattern, profile)
}

# --- allocations --------------------------------------------------------------------------------

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

# --- device classes -----------------------------------------------------------------------------

# Who may write what the DRA path hands out, each named by the program: the GPU Operator creates
# NVIDIA's DeviceClasses; the DRA driver's kubelet plugin (or the node itself) publishes a
# node's ResourceSlices; the program declares its own classes, whose spec is checked instead of
# their writer (the program's identity is the deployer's). No namespace's exemption reaches
# these cluster-wide objects.
class_writer if input.request.userInfo.username in params.draWriters.deviceClasses

is_device_class_write if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind == "DeviceClass"
	input.request.operation in {"CREATE", "UPDATE"}
}

device_class_name := object.get(input.request.object.metadata, "name", "")

violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"DeviceClass %q is the platform's own (it serves %s): `pulumi up` writes it, with the spec the stack gives it (gpuOperator); change the stack rather than the class",
		[device_class_name, object.get(want, "extendedResourceName", "GPUs")],
	),
} if {
	is_device_class_write
	not class_writer
	want := platform_class_spec(device_class_name)
	some field in ["selectors", "config", "extendedResourceName"]
	object.get(input.request.object.spec, field, null) != object.get(want, field, null)
}

violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"DeviceClass %q %s, and only the platform's own classes and NVIDIA's (made by the GPU Operator) may: GPUs are handed out only where the binpack scheduler places them; give it another name, select another driver's devices (a first selector device.driver == '<driver>') and name no NVIDIA resource",
		[device_class_name, concat(" and ", sort(device_class_reaches))],
	),
} if {
	is_device_class_write
	not platform_class_spec(device_class_name)
	not class_writer
	count(device_class_reaches) > 0
}

device_class_reaches contains sprintf("serves %s", [name]) if {
	name := input.request.object.spec.extendedResourceName
	guarded(name)
}

device_class_reaches contains "may select NVIDIA devices (no selector keeps to another driver)" if {
	not selects_other_driver
}

device_class_reaches contains sprintf("is named as NVIDIA's classes are (*%s), which claims are decided by", [suffix]) if {
	some suffix in params.draDeviceClassSuffixes
	endswith(device_class_name, suffix)
}

# A selector that keeps the class to one driver's devices, named literally, and not NVIDIA's.
selects_other_driver if {
	some selector in array_at(object.get(input.request.object, "spec", {}), "selectors")
	match := regex.find_all_string_submatch_n(`^\s*device\.driver\s*==\s*['"]([^'"]+)['"]\s*(&&.*)?$`, selector.cel.expression, 1)[0]
	not nvidia_driver(match[1])
}

# --- ResourceSlices -----------------------------------------------------------------------------

violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"ResourceSlice %q publishes devices of NVIDIA's driver %s; only the driver publishes them (its kubelet plugin in the GPU Operator's namespace, or the node itself), or it would offer GPUs no node holds, or another node's",
		[object.get(input.request.object.metadata, "name", ""), input.request.object.spec.driver],
	),
} if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind == "ResourceSlice"
	input.request.operation in {"CREATE", "UPDATE"}
	nvidia_driver(input.request.object.spec.driver)
	not input.request.userInfo.username in params.draWriters.resourceSlices
	not published_by_its_node
}

published_by_its_node if {
	input.request.userInfo.username == concat("", ["system:node:", input.request.object.spec.nodeName])
}

# --- DeviceTaintRules ---------------------------------------------------------------------------

# A taint keeps every new claim off the devices it selects (NoSchedule) or evicts the pods that
# use them (NoExecute), whoever's they are: on NVIDIA's devices only the users the stack lists may write one. A rule
# without a selector selects nothing; an effect of None only informs.
violations contains {
	"rule": "dra",
	"fixable": false,
	"message": sprintf(
		"DeviceTaintRule %q taints %s with %s (%s), whoever's claims they hold; only the users admission.deviceTaintWriters lists may take NVIDIA's devices out of service (to drain a GPU node, cordon and drain it)",
		[object.get(input.request.object.metadata, "name", ""), tainted_devices, taint.key, taint_effects[taint.effect]],
	),
} if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind == "DeviceTaintRule"
	input.request.operation in {"CREATE", "UPDATE"}
	not input.request.subResource
	not input.request.userInfo.username in params.deviceTaintWriters
	taint := input.request.object.spec.taint
	taint_effects[taint.effect]
	tainted_devices
}

taint_effects := {
	"NoSchedule": "effect NoSchedule: no claim is given them",
	"NoExecute": "effect NoExecute: the pods that use them are evicted",
}

tainted_devices := sprintf("the devices of NVIDIA's driver %s", [selector.driver]) if {
	selector := input.request.object.spec.deviceSelector
	nvidia_driver(selector.driver)
} else := "the devices of every driver, NVIDIA's among them" if {
	selector := input.request.object.spec.deviceSelector
	is_object(selector)
	object.get(selector, "driver", "") == ""
}
