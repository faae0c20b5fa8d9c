# Dynamic Resource Allocation: where GPUs come from the device plugin, no claim reaches NVIDIA's
# devices; on the DRA path a pod with claims is a GPU pod, and claims, their allocations, device
# classes and ResourceSlices reach GPUs only where the binpack scheduler places the pod.
package gpuplatform.admission_test.dra

import data.gpuplatform.admission_test as t
import data.gpuplatform.admission_test.teams

cases := object.union_n([
	device_plugin_path,
	{name: object.union({"stack": "dra"}, c) | some name, c in dra_path},
	admission_lists,
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
	# resource names that resolve to a device class
	"NVIDIA's class asked for by its own resource name, where GPUs come from the device plugin": {
		"request": t.pod(t.binpack([class_container("gpu.nvidia.com")], {})),
		"refused": [
			`container "main" requests deviceclass.resource.kubernetes.io/gpu.nvidia.com, which Kubernetes serves from the devices of the device class "gpu.nvidia.com"`,
			"GPUs through DRA need the DRA path (gpuOperator.gpuPath: dra)",
		],
	},
	"a class the stack does not list, asked for by its own resource name": {
		"request": t.pod(t.binpack([class_container("fpga.example.com")], {})),
		"refused": [`the device class "fpga.example.com"`, "(admission.deviceClasses)"],
	},
	# writers of what the DRA path reads, wherever GPUs come from
	"a DeviceClass named as NVIDIA's, of a user's": {
		"request": cluster_object("DeviceClass", select_other_driver, {"name": "gpu.nvidia.com"}),
		"refused": [`DeviceClass "gpu.nvidia.com" is named as NVIDIA's classes are (*nvidia.com)`],
	},
	"a ResourceSlice of NVIDIA's driver published by a user, where GPUs come from the device plugin": {
		"request": cluster_object("ResourceSlice", {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1"}, {}),
		"refused": ["only the driver publishes them"],
	},
	"a DeviceTaintRule on NVIDIA's devices, where GPUs come from the device plugin": {
		"request": taint_rule({"driver": "gpu.nvidia.com"}, "NoExecute", {}),
		"refused": [`DeviceTaintRule "mine" taints the devices of NVIDIA's driver gpu.nvidia.com`],
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
	"a ResourceSlice of NVIDIA's driver published by the monitoring stack's ServiceAccount": {
		"request": cluster_object("ResourceSlice", {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1"}, {"user": "system:serviceaccount:monitoring:kube-prometheus-stack-operator"}),
		"refused": ["only the driver publishes them"],
	},
	"a ResourceSlice of NVIDIA's driver published by its node": {
		"request": cluster_object("ResourceSlice", {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1"}, {"user": "system:node:gpu-node-1"}),
		"admitted": true,
	},
	"a ResourceSlice of NVIDIA's driver published by another node": {
		"request": cluster_object("ResourceSlice", {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1"}, {"user": "system:node:cpu-node-1"}),
		"refused": [`ResourceSlice "mine" publishes devices of NVIDIA's driver gpu.nvidia.com`],
	},
	"a ComputeDomain's ResourceSlice published by NVIDIA's driver": {
		"request": cluster_object("ResourceSlice", {"driver": "compute-domain.nvidia.com", "nodeName": "gpu-node-1"}, {"user": dra_plugin}),
		"admitted": true,
	},
	# the platform's own classes: as the program writes them, whoever writes them
	"the platform's class, as the program writes it": {
		"request": cluster_object("DeviceClass", platform_gpu_class, {"name": "gpu-platform-gpu.nvidia.com", "user": "deployer@example.com"}),
		"admitted": true,
	},
	"a new MIG profile's class, as the program writes it": {
		"request": cluster_object("DeviceClass", mig_class("3g.40gb", "3g.40gb"), {"name": "gpu-platform-mig-3g.40gb.nvidia.com", "user": "deployer@example.com"}),
		"admitted": true,
	},
	"the platform's class rewritten to select every device": {
		"request": cluster_object("DeviceClass", object.union(platform_gpu_class, {"selectors": [{"cel": {"expression": "true"}}]}), {"name": "gpu-platform-gpu.nvidia.com", "operation": "UPDATE"}),
		"refused": [`DeviceClass "gpu-platform-gpu.nvidia.com" is the platform's own (it serves nvidia.com/gpu)`, "change the stack rather than the class"],
	},
	"a MIG profile's class that selects another profile": {
		"request": cluster_object("DeviceClass", mig_class("1g.10gb", "7g.80gb"), {"name": "gpu-platform-mig-1g.10gb.nvidia.com"}),
		"refused": [`DeviceClass "gpu-platform-mig-1g.10gb.nvidia.com" is the platform's own (it serves nvidia.com/mig-1g.10gb)`],
	},
	"NVIDIA's class written by the monitoring stack's ServiceAccount": {
		"request": cluster_object("DeviceClass", select_nvidia, {"user": "system:serviceaccount:monitoring:kube-prometheus-stack-operator", "name": "gpu.nvidia.com"}),
		"refused": [`DeviceClass "gpu.nvidia.com"`, "only the platform's own classes and NVIDIA's"],
	},
	# resource names that resolve to a device class
	"NVIDIA's class asked for by its own resource name": {
		"request": teams.queued(teams.gated(t.binpack([class_container("gpu.nvidia.com")], {})), teams.managed),
		"refused": [
			`pod "research/train-0": container "main" requests deviceclass.resource.kubernetes.io/gpu.nvidia.com, which Kubernetes serves from the devices of the device class "gpu.nvidia.com"`,
			"request nvidia.com/gpu (or nvidia.com/mig-<profile>) in resources.limits instead",
		],
	},
	"the platform's class asked for by its own resource name, on the default scheduler": {
		"request": claim_pod({"containers": [class_container("gpu-platform-gpu.nvidia.com")]}, {"namespace": "research"}),
		"refused": [`requests deviceclass.resource.kubernetes.io/gpu-platform-gpu.nvidia.com`, "spec.schedulerName"],
		"mutate": {"refused": [`the device class "gpu-platform-gpu.nvidia.com"`]},
	},
	# claims: device taints, opaque configuration, the claims the platform's own parts make
	"a claim tolerating the driver's taint of a failed GPU": {
		"request": claim(requesting({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "tolerations": [{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}]}})),
		"refused": [`ResourceClaim "team-a/gpus" tolerates device taints (gpu.nvidia.com/xid) on NVIDIA's devices`, "remove tolerations"],
	},
	"a claim template tolerating every device taint among alternatives": {
		"request": claim_template(requesting({"name": "any", "firstAvailable": [{"name": "a", "deviceClassName": "gpu-platform-gpu.nvidia.com", "tolerations": [{"operator": "Exists"}]}]})),
		"refused": ["tolerates device taints (every key)"],
	},
	"a claim sharing its GPU by time-slicing": {
		"request": claim(with_config(gpu_claim, "gpu.nvidia.com", {"kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}})),
		"admitted": true,
	},
	"a claim joining a ComputeDomain of its own naming": {
		"request": claim(with_config(
			requesting({"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}),
			"compute-domain.nvidia.com", {"kind": "ComputeDomainChannelConfig", "domainID": "0d6e3c44-another-teams"},
		)),
		"refused": [`ResourceClaim "team-a/gpus": its configuration for compute-domain.nvidia.com (kind ComputeDomainChannelConfig) joins a ComputeDomain`],
	},
	"the compute-domain controller's claim template": {
		"request": t.review(
			{"spec": with_config(
				requesting({"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}),
				"compute-domain.nvidia.com", {"kind": "ComputeDomainChannelConfig", "domainID": "5e1f"},
			)},
			{"kind": "ResourceClaimTemplate", "group": "resource.k8s.io", "name": "gpus", "user": "system:serviceaccount:gpu-operator:nvidia-dra-driver-controller"},
		),
		"admitted": true,
	},
	"a claim made from that template by the resource-claim controller": {
		"request": t.review(
			with_config(
				requesting({"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}),
				"compute-domain.nvidia.com", {"kind": "ComputeDomainChannelConfig", "domainID": "5e1f"},
			),
			{"kind": "ResourceClaim", "group": "resource.k8s.io", "name": "gpus", "user": "system:serviceaccount:kube-system:resource-claim-controller"},
		),
		"admitted": true,
	},
	"a claim with configuration of a kind NVIDIA's driver has no sharing for": {
		"request": claim(with_config(gpu_claim, "gpu.nvidia.com", {"kind": "VfioDeviceConfig"})),
		"refused": [`its configuration for gpu.nvidia.com is of kind "VfioDeviceConfig"`],
	},
	"the claim the scheduler makes for a pod's nvidia.com/gpu": {
		"request": t.review(requesting({"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu-platform-gpu.nvidia.com", "count": 2}}), {
			"kind": "ResourceClaim", "group": "resource.k8s.io", "generateName": "train-0-extended-resources-",
			"namespace": "research", "user": "system:serviceaccount:gpu-scheduler:gpu-binpack-scheduler",
			"metadata": {"annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}},
		}),
		"admitted": true,
	},
	"the DCGM exporter's monitoring claim, in the operator's namespace": {
		"request": t.review(requesting({"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": true}}), {
			"kind": "ResourceClaim", "group": "resource.k8s.io", "name": "dcgm-exporter", "namespace": "gpu-operator",
			"user": "system:serviceaccount:gpu-operator:nvidia-dcgm-exporter",
		}),
		"admitted": true,
	},
	# Kueue's hold on a team's pods with claims, and on Jobs whose GPUs come from claims
	"a held pod with claims released by its user": {
		"request": teams.team_pod(object.union(t.binpack([plain], with_claim), {}), {
			"operation": "UPDATE", "oldSpec": teams.gated(t.binpack([plain], with_claim)),
			"oldMetadata": teams.managed, "metadata": teams.managed,
		}),
		"refused": ["only Kueue lifts its scheduling gate kueue.x-k8s.io/admission"],
	},
	"a held pod with claims released by Kueue": {
		"request": teams.team_pod(t.binpack([plain], with_claim), {
			"operation": "UPDATE", "oldSpec": teams.gated(t.binpack([plain], with_claim)),
			"oldMetadata": teams.managed, "metadata": teams.admitted_by_kueue, "user": teams.kueue,
		}),
		"admitted": true,
	},
	"a queued Job whose GPUs come from claim templates, started by a user": {
		"request": teams.workload("Job", "batch", {"suspend": false}, {"template": {"spec": object.union({"restartPolicy": "Never", "containers": [plain]}, with_claim)}}, {"operation": "UPDATE", "old": {"suspend": true}}),
		"refused": [`Job "research/train": only Kueue starts a Job of namespace "research"`],
	},
	"a Job whose GPUs come from claim templates, created running by a user": {
		"request": teams.workload("Job", "batch", {"suspend": false}, {"template": {"spec": object.union({"restartPolicy": "Never", "containers": [plain]}, with_claim)}}, {}),
		"refused": [`Job "research/train" requests resource claims (gpus) but was not suspended at creation`],
	},
	# DeviceTaintRules: only the users the stack lists take NVIDIA's devices out of service
	"a DeviceTaintRule evicting from every device of NVIDIA's driver": {
		"request": taint_rule({"driver": "gpu.nvidia.com"}, "NoExecute", {}),
		"refused": [`DeviceTaintRule "mine" taints the devices of NVIDIA's driver gpu.nvidia.com with example.com/maintenance (effect NoExecute: the pods that use them are evicted)`, "admission.deviceTaintWriters"],
	},
	"a DeviceTaintRule on one GPU, updated": {
		"request": taint_rule({"driver": "gpu.nvidia.com", "pool": "gpu-node-2", "device": "gpu-3"}, "NoSchedule", {"operation": "UPDATE"}),
		"refused": ["effect NoSchedule: no claim is given them"],
	},
	"a DeviceTaintRule with an empty selector": {
		"request": taint_rule({}, "NoSchedule", {}),
		"refused": ["taints the devices of every driver, NVIDIA's among them"],
	},
	"a DeviceTaintRule that only informs": {
		"request": taint_rule({"driver": "gpu.nvidia.com"}, "None", {}),
		"admitted": true,
	},
	"another driver's DeviceTaintRule": {
		"request": taint_rule({"driver": "nic.example.com"}, "NoExecute", {}),
		"admitted": true,
	},
}

# A class the stack lists (admission.deviceClasses) is claimed, or asked for by its own resource
# name, whatever a claim's selector narrows; NVIDIA's classes stay refused on the device plugin
# path. A user the stack lists (admission.deviceTaintWriters) may taint NVIDIA's devices.
admission_lists := {name: object.union({"stack": "admission_lists"}, c) | some name, c in {
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
	"a listed class asked for by its own resource name": {
		"request": t.pod({"containers": [class_container("nic.example.com")]}),
		"admitted": true,
	},
	"a DeviceTaintRule on NVIDIA's devices by a user the stack lists": {
		"request": taint_rule({"driver": "gpu.nvidia.com"}, "NoExecute", {"user": "ops@example.com"}),
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

select_other_driver := {"selectors": [{"cel": {"expression": "device.driver == 'fake.example.com'"}}]}

# The platform's classes as the program declares them (components/gpu_operator/dra.py).
platform_gpu_class := {
	"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
	"extendedResourceName": "nvidia.com/gpu",
}

mig_class(profile, selected) := {
	"selectors": [{"cel": {"expression": sprintf("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' && device.attributes['gpu.nvidia.com'].profile == '%s'", [selected])}}],
	"extendedResourceName": sprintf("nvidia.com/mig-%s", [profile]),
}

# A container that asks for a device class's devices by the class's own resource name.
class_container(class) := t.container("main", t.limits({sprintf("deviceclass.resource.kubernetes.io/%s", [class]): "1"}))

# A claim's spec with opaque configuration for `driver`.
with_config(spec, driver, parameters) := object.union(spec, {"devices": {"config": [{"opaque": {
	"driver": driver,
	"parameters": object.union({"apiVersion": "resource.nvidia.com/v1beta1"}, parameters),
}}]}})

# A DeviceTaintRule "mine" selecting `selector`, with a taint of `effect`.
taint_rule(selector, effect, o) := cluster_object(
	"DeviceTaintRule", {
		"deviceSelector": selector,
		"taint": {"key": "example.com/maintenance", "effect": effect},
	},
	o,
)

dra_plugin := "system:serviceaccount:gpu-operator:nvidia-dra-driver-kubeletplugin"

test_cases if t.all_decided(cases)
