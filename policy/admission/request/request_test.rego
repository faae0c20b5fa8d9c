# What counts as asking for a GPU, which containers and names a refusal speaks of, and what is
# none of the policy's business. A GPU pod shows here as one the default scheduler may not place.
package gpuplatform.admission_test.request

import data.gpuplatform.admission_test as t

cases := {
	# every container counts, and a request without a limit too
	"gpu request without limit": {
		"request": t.pod({"containers": [t.container("main", t.requests(t.gpu))]}),
		"refused": [`container "main" requests nvidia.com/gpu`],
		"mutate": {"admitted": true},
	},
	"gpu in an init container": {
		"request": t.pod({
			"containers": [t.container("main", t.requests(t.cpu))],
			"initContainers": [t.container("warmup", t.limits(t.gpu))],
		}),
		"refused": [`init container "warmup" requests nvidia.com/gpu`],
		"mutate": {"admitted": true},
	},
	"gpu in an ephemeral container": {
		"request": t.pod({
			"containers": [t.container("main", t.requests(t.cpu))],
			"ephemeralContainers": [t.container("debug", t.limits(t.gpu))],
		}),
		"refused": [`ephemeral container "debug" requests nvidia.com/gpu`],
		"mutate": {"admitted": true},
	},
	"generated name": {
		"request": t.review({"containers": [t.gpu_container]}, {"generateName": "job-"}),
		"refused": [`pod "team-a/job-*"`],
		"mutate": {"admitted": true},
	},
	# MIG slices, renamed and other NVIDIA resources (nvidia.com/* by default)
	"mig slice on the default scheduler": {
		"request": t.pod({"containers": [t.container("main", t.limits(t.mig))]}),
		"refused": ["requests nvidia.com/mig-1g.10gb"],
		"mutate": {"admitted": true},
	},
	"mig slice on the binpack scheduler": {
		"request": t.pod(t.binpack([t.container("main", t.limits(t.mig))], {})),
		"admitted": true,
	},
	"time-sliced GPU renamed to nvidia.com/gpu.shared": asking_for("nvidia.com/gpu.shared"),
	"shared MIG slice": asking_for("nvidia.com/mig-1g.10gb.shared"),
	"vGPU type": asking_for("nvidia.com/GRID_A100-4C"),
	"passthrough GPU": asking_for("nvidia.com/GA102GL_A10"),
	"NIC-only pod on the binpack scheduler with the gpu toleration": {
		"request": t.pod(t.binpack([t.container("main", t.limits(nic))], {})),
		"admitted": true,
	},
	"NIC-only pod on the default scheduler": {
		"request": t.pod({"containers": [t.container("main", t.limits(nic))]}),
		"refused": ["requests nvidia.com/rdma_shared_device_a but spec.schedulerName"],
		"mutate": {"admitted": true},
	},
	# zero asks for nothing: such a pod is a pod without GPUs
	"zero GPUs on the default scheduler": {
		"request": t.pod({"containers": [t.container("main", t.limits(t.zero_gpus))]}),
		"admitted": true,
	},
	"zero GPUs tolerating the gpu taint": {
		"request": t.pod({"tolerations": [t.gpu_toleration], "containers": [t.container("main", t.limits(t.zero_gpus))]}),
		"refused": ["requests no GPU but tolerates the GPU node taint"],
	},
	"zero GPUs naming the nvidia runtime class": {
		"request": t.pod({"runtimeClassName": "nvidia", "containers": [t.container("main", t.limits(t.zero_gpus))]}),
		"refused": [`spec.runtimeClassName is "nvidia"`],
	},
	"zero GPUs pinned to a gpu node": {
		"request": t.pod({"nodeName": "gpu-node-1", "containers": [t.container("main", t.limits(t.zero_gpus))]}),
		"refused": ["it is a GPU node"],
	},
	"a zero and a one: a GPU pod": {
		"request": t.pod({"containers": [t.container("main", t.limits(object.union(t.zero_gpus, t.mig)))]}),
		"refused": ["requests nvidia.com/mig-1g.10gb but spec.schedulerName"],
		"mutate": {"admitted": true},
	},
	# what is not the policy's business
	"cpu-only pod": {
		"request": t.pod({"containers": [t.container("main", {"resources": {"requests": t.cpu, "limits": t.cpu}})]}),
		"admitted": true,
	},
	"pod without resources": {
		"request": t.pod({"containers": [{"name": "c", "image": "x"}]}),
		"admitted": true,
	},
	"unguarded extended resource": {
		"request": t.pod({"containers": [t.container("main", t.limits({"example.com/fpga": "1"}))]}),
		"admitted": true,
	},
	"exempt namespace kube-system": {
		"request": t.review({"containers": [t.gpu_container]}, {"namespace": "kube-system"}),
		"admitted": true,
	},
	"exempt GPU Operator namespace (its validator pods request GPUs)": {
		"request": t.review({"containers": [t.gpu_container]}, {"namespace": "gpu-operator"}),
		"admitted": true,
	},
	"not a pod": {
		"request": t.review(
			{"template": {"spec": {"containers": [t.gpu_container]}}},
			{"kind": "Deployment", "group": "apps"},
		),
		"admitted": true,
	},
	"pod UPDATE": {
		"request": t.review(t.binpack([t.gpu_container], {}), {"operation": "UPDATE", "oldSpec": t.binpack([t.gpu_container], {})}),
		"admitted": true,
	},
	"pod DELETE": {
		"request": t.review(null, {"operation": "DELETE"}),
		"admitted": true,
	},
	"containers not a list": {
		"request": t.pod({"containers": {"main": t.gpu_container}}),
		"admitted": true,
	},
	"container not an object": {
		"request": t.pod({"containers": ["main"]}),
		"admitted": true,
	},
	"limits not an object": {
		"request": t.pod({"containers": [{"name": "c", "resources": {"limits": "nvidia.com/gpu"}}]}),
		"admitted": true,
	},
}

nic := {"nvidia.com/rdma_shared_device_a": "1"}

# A pod asking for one of `resource` on the default scheduler.
asking_for(resource) := {
	"request": t.pod({"containers": [t.container("main", t.limits({resource: "1"}))]}),
	"refused": [sprintf("requests %s", [resource])],
	"mutate": {"admitted": true},
}

test_cases if t.all_decided(cases)
