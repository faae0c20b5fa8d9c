# Dynamic Resource Allocation: where GPUs come from the device plugin, no claim reaches NVIDIA's
# devices; on the DRA path a pod with claims is a GPU pod, and claims, their allocations, device
# classes and ResourceSlices reach GPUs only where the binpack scheduler places the pod.
package gpuplatform.admission_test.dra

import data.gpuplatform.admission_test as t
import data.gpuplatform.admission_test.teams

cases := object.union_n([
	device_plugin_path,
	{name: object.union({"stack": "dra"}, c) | some name, c in dra_path},
	listed_device_classes,
])

# The device plugin path (the example stack): claims on NVIDIA's classes are refused, and on a
# class the stack does not list.
device_plugin_path := {
	"claim on gpu.nvidia.com": {
		"request": claim(requesting({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}})),
		"refused": [
			`ResourceClaim "team-a/gpus" asks for devices of the device class "gpu.nvidia.com" through Dynamic Resource Allocation`,
			"GPUs through DRA need the DRA path (gpuOperator.gpuPath: dra)",
		],
	},
	"claim template on mig.nvidia.com": {
		"request": claim_template(requesting({"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}})),
		"refused": [`ResourceClaimTemplate "team-a/gpus"`, "mig.nvidia.com"],
	},
	"claim with an NVIDIA class among alternatives": {
		"request": claim(requesting({"name": "any", "firstAvailable": [
			{"name": "a", "deviceClassName": "fpga.example.com"},
			{"name": "b", "deviceClassName": "gpu.nvidia.com"},
		]})),
		"refused": ["gpu.nvidia.com"],
	},
	"beta claim on gpu.nvidia.com": {
		"request": claim(requesting({"name": "gpu", "deviceClassName": "gpu.nvidia.com"})),
		"refused": ["gpu.nvidia.com"],
	},
	"claim selecting the NVIDIA driver by its name": {
		"request": claim(requesting({"name": "gpu", "exactly": {
			"deviceClassName": "everything.example.com",
			"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
		}})),
		"refused": [`the device class "everything.example.com"`, "admission.deviceClasses"],
	},
	"claim reaching the NVIDIA driver without naming it": {
		"request": claim(requesting({"name": "gpu", "exactly": {
			"deviceClassName": "everything.example.com",
			"selectors": [{"cel": {"expression": "device.driver.startsWith('gpu.') && device.driver.endsWith('.com')"}}],
		}})),
		"refused": [`the device class "everything.example.com"`],
	},
	"claim on a device class the stack does not list": {
		"request": claim(nic_request),
		"refused": [`the device class "nic.example.com"`, "admission.deviceClasses"],
	},
	"update of a claim (its finalizer removed while it is deleted)": {
		"request": t.review(gpu_claim, {"kind": "ResourceClaim", "group": "resource.k8s.io", "name": "gpus", "operation": "UPDATE", "oldSpec": gpu_claim}),
		"admitted": true,
	},
	"a pod with claims, where GPUs come from the device plugin": {
		"request": claim_pod({"containers": [plain]}, {}),
		"admitted": true,
	},
}

# The DRA path, with teams at their defaults.
dra_path := {
	"a GPU claim on NVIDIA's class": {
		"request": claim(requesting({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}})),
		"admitted": true,
	},
	"a claim template on the platform's class": {
		"request": claim_template(requesting({"name": "gpu", "exactly": {"deviceClassName": "gpu-platform-gpu.nvidia.com"}})),
		"admitted": true,
	},
	"a claim with adminAccess": {
		"request": claim(requesting({"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": true}})),
		"refused": [`asks for the devices of the device class "gpu.nvidia.com" with adminAccess`, "drop adminAccess"],
	},
	"a claim on a class the stack does not list": {
		"request": claim(nic_request),
		"refused": [`the device class "nic.example.com"`, "admission.deviceClasses"],
	},
	"a pod with claims on the default scheduler": {
		"request": claim_pod({"containers": [plain]}, {}),
		"refused": [
			`pod "team-a/train-0" has resource claims (gpus), which may hold GPUs, but spec.schedulerName is "default-scheduler"`,
			"must set spec.schedulerName: gpu-binpack-scheduler",
		],
		# mutate names the scheduler; team-a is no team's namespace
		"mutate": {"refused": [`namespace "team-a", which belongs to no team`]},
	},
	"a pod with claims in a team namespace, outside the queue": {
		"request": claim_pod(t.binpack([plain], {}), {"namespace": "research"}),
		"refused": [`requests resource claims (gpus) in namespace "research" of team "research" without going through the team's queue`],
	},
	"a pod with claims in a team namespace, held by Kueue": {
		"request": teams.queued(teams.gated(t.binpack([plain], with_claim)), teams.managed),
		"admitted": true,
	},
	"a pod with claims in a critical class": {
		"request": claim_pod(
			t.binpack([plain], {"priorityClassName": "system-cluster-critical", "priority": 2000000000}),
			{"namespace": "research", "metadata": teams.managed},
		),
		"refused": ["would preempt other users' GPU pods"],
	},
	# a claim's allocation: the schedulers write it, the resource-claim controller releases it
	"a claim allocated by hand": {
		"request": claim_status({}, allocation, t.user),
		"refused": [`ResourceClaim "research/gpus": its allocation is written by a scheduler`],
	},
	"a claim allocated by the binpack scheduler": {
		"request": claim_status({}, allocation, "system:serviceaccount:gpu-scheduler:gpu-binpack-scheduler"),
		"admitted": true,
	},
	"a claim released by the resource-claim controller": {
		"request": claim_status(allocation, {}, "system:serviceaccount:kube-system:resource-claim-controller"),
		"admitted": true,
	},
	"a claim's device health written by the driver": {
		"request": claim_status(allocation, object.union(allocation, {"devices": [{"driver": "gpu.nvidia.com"}]}), dra_plugin),
		"admitted": true,
	},
	# device classes: only the platform's own and NVIDIA's reach NVIDIA's devices
	"a DeviceClass that serves nvidia.com/gpu": {
		"request": cluster_object("DeviceClass", object.union(select_nvidia, {"extendedResourceName": "nvidia.com/gpu"}), {}),
		"refused": [`DeviceClass "mine" may select NVIDIA devices`, "and serves nvidia.com/gpu", "only the platform's own classes"],
	},
	"a DeviceClass with no driver of its own": {
		"request": cluster_object("DeviceClass", {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}, {}),
		"refused": ["may select NVIDIA devices"],
	},
	"a DeviceClass updated to reach NVIDIA's devices": {
		"request": cluster_object("DeviceClass", select_nvidia, {"operation": "UPDATE"}),
		"refused": ["may select NVIDIA devices"],
	},
	"another vendor's DeviceClass": {
		"request": cluster_object("DeviceClass", {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com' && device.attributes['x'].rdma"}}]}, {}),
		"admitted": true,
	},
	"NVIDIA's classes, made by the GPU Operator": {
		"request": cluster_object("DeviceClass", select_nvidia, {"user": "system:serviceaccount:gpu-operator:gpu-operator", "name": "gpu.nvidia.com"}),
		"admitted": true,
	},
	# ResourceSlices: only NVIDIA's driver publishes its devices
	"a ResourceSlice of NVIDIA's driver written by a user": {
		"request": cluster_object(
			"ResourceSlice", {
				"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1",
				"pool": {"name": "gpu-node-1", "generation": 9, "resourceSliceCount": 1}, "devices": [],
			},
			{},
		),
		"refused": [`ResourceSlice "mine" publishes devices of NVIDIA's driver gpu.nvidia.com`],
	},
	"a ResourceSlice published by NVIDIA's driver": {
		"request": cluster_object("ResourceSlice", {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1"}, {"user": dra_plugin}),
		"admitted": true,
	},
	"another driver's ResourceSlice": {
		"request": cluster_object("ResourceSlice", {"driver": "nic.example.com", "nodeName": "node-1"}, {}),
		"admitted": true,
	},
}

# A class the stack lists (admission.deviceClasses) is claimed whatever a claim's selector
# narrows; NVIDIA's classes stay refused on the device plugin path.
listed_device_classes := {name: object.union({"stack": "listed_device_classes"}, c) | some name, c in {
	"a claim on a listed device class": {
		"request": claim(nic_request),
		"admitted": true,
	},
	"a claim on a listed device class, narrowed by a selector": {
		"request": claim(requesting({"name": "nic", "exactly": {
			"deviceClassName": "nic.example.com",
			"selectors": [{"cel": {"expression": "device.attributes['nic.example.com'].rdma"}}],
		}})),
		"admitted": true,
	},
	"a claim on gpu.nvidia.com, where another class is listed": {
		"request": claim(requesting({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}})),
		"refused": [`the device class "gpu.nvidia.com"`],
	},
}}

plain := t.container("main", {})

requesting(request) := {"devices": {"requests": [request]}}

gpu_claim := requesting({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}})

nic_request := requesting({"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}})

claim(spec) := t.review(spec, {"kind": "ResourceClaim", "group": "resource.k8s.io", "name": "gpus"})

claim_template(spec) := t.review({"spec": spec}, {"kind": "ResourceClaimTemplate", "group": "resource.k8s.io", "name": "gpus"})

with_claim := {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]}

claim_pod(spec, o) := t.review(object.union(spec, with_claim), o)

# A cluster-scoped object "mine" of resource.k8s.io, created by a user unless `o` says otherwise.
cluster_object(kind, spec, o) := t.review(spec, object.union({"kind": kind, "group": "resource.k8s.io", "namespace": "", "name": "mine"}, o))

# An update of a claim's status, from `old` to `new`, by `user`.
claim_status(old, new, user) := object.union(
	t.review(gpu_claim, {
		"kind": "ResourceClaim", "group": "resource.k8s.io", "name": "gpus", "namespace": "research",
		"operation": "UPDATE", "subResource": "status", "user": user, "oldSpec": {"devices": {"requests": []}},
	}),
	{"request": {"object": {"status": new}, "oldObject": {"status": old}}},
)

allocation := {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-1", "device": "gpu-3"}]}}}

select_nvidia := {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}

dra_plugin := "system:serviceaccount:gpu-operator:nvidia-dra-driver-kubeletplugin"

test_cases if t.all_decided(cases)
