# Workloads' pod templates: each is decided as the pod its controller would create from it, and
# what that pod would be refused for, or would wait for, comes back as a warning on the workload
# (naming the template's path, the rule and the fix), in every mode; the workload itself is
# never refused here.
package gpuplatform.admission_test.templates

import data.gpuplatform.admission_test as t

cases := {name: object.union({"decision": "templates"}, c) | some name, c in template_cases}

template_cases := {
	# the pod rules, on the template
	"a Deployment whose template asks for a GPU on the default scheduler": {
		"request": workload("apps", "Deployment", {"replicas": 2, "template": template({"tolerations": [t.gpu_toleration], "containers": [t.gpu_container]})}),
		"warned": [
			`Deployment "team-a/serve": the pods made from spec.template`, `the rule "scheduler"`,
			`pod "team-a/serve-*": container "main" requests nvidia.com/gpu but spec.schedulerName is "default-scheduler"`,
			"GPU pods must set spec.schedulerName: gpu-binpack-scheduler",
		],
		# The mutating webhook sets the scheduler on each pod.
		"mutate": {"admitted": true},
	},
	"a Deployment whose template asks for a GPU on the default scheduler, without the toleration": {
		"request": workload("apps", "Deployment", {"template": template({"containers": [t.gpu_container]})}),
		"warned": [`the rule "scheduler"`, `spec.template would wait (the rule "gpu-toleration")`, "add the toleration"],
		"mutate": {"admitted": true},
	},
	"a Job template with a privileged GPU container": {
		"request": workload("batch", "Job", {"template": template(t.binpack([t.privileged(t.gpu_container)], {"restartPolicy": "Never"}))}),
		"warned": [`Job "team-a/serve": the pods made from spec.template`, `the rule "device-path"`, `container "main" is privileged`, "run it unprivileged"],
		"mutate": {"warned": [`the rule "device-path"`, "run it unprivileged"]},
	},
	"a CronJob's job template sharing the host's IPC namespace": {
		"request": workload("batch", "CronJob", {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template(t.binpack([t.gpu_container], {"hostIPC": true}))}}}),
		"warned": [`the pods made from spec.jobTemplate.spec.template`, "spec.hostIPC shares the node's shared memory"],
		"mutate": {"warned": ["leave hostIPC unset"]},
	},
	"a StatefulSet template naming its node": {
		"request": workload("apps", "StatefulSet", {"template": template(t.binpack([t.gpu_container], {"nodeName": "gpu-node-1"}))}),
		"warned": [`the rule "node-name"`, `spec.nodeName "gpu-node-1" skips the scheduler`],
		"mutate": {"warned": [`the rule "node-name"`]},
	},
	"a ReplicaSet template that is fine": {
		"request": workload("apps", "ReplicaSet", {"template": template(t.binpack([t.gpu_container], {}))}),
		"admitted": true,
	},
	"a JobSet template that is fine": {
		"request": workload("jobset.x-k8s.io", "JobSet", {"replicatedJobs": [
			{"name": "driver", "template": {"spec": {"template": template({"containers": [t.container("main", t.requests(t.cpu))]})}}},
			{"name": "workers", "template": {"spec": {"template": template(t.binpack([t.gpu_container], {}))}}},
		]}),
		"admitted": true,
	},
	"a JobSet's second job asking for GPUs on the default scheduler": {
		"request": workload("jobset.x-k8s.io", "JobSet", {"replicatedJobs": [
			{"name": "driver", "template": {"spec": {"template": template({"containers": [t.container("main", t.requests(t.cpu))]})}}},
			{"name": "workers", "template": {"spec": {"template": template({"tolerations": [t.gpu_toleration], "containers": [t.gpu_container]})}}},
		]}),
		"warned": [`JobSet "team-a/serve": the pods made from spec.replicatedJobs[1].template.spec.template`, `the rule "scheduler"`],
		"mutate": {"admitted": true},
	},
	# node agents: a DaemonSet's pods may tolerate the GPU taint, but get no device path
	"a DaemonSet node agent tolerating every taint": {
		"request": workload("apps", "DaemonSet", {"template": template({"tolerations": t.every_taint, "containers": [t.container("agent", {})]})}),
		"admitted": true,
	},
	"a privileged DaemonSet node agent tolerating every taint": {
		"request": workload("apps", "DaemonSet", {"template": template({"tolerations": t.every_taint, "containers": [t.privileged(t.container("agent", {}))]})}),
		"warned": [`DaemonSet "team-a/serve"`, `the rule "device-path"`, `container "agent" is privileged`, "node agents that need it belong in an exempt namespace"],
		"mutate": {"warned": [`the rule "device-path"`]},
	},
	"a node agent of the built-in node-critical class tolerating every taint": {
		# The API server gives its pods the class's priority, 2000001000.
		"request": workload("apps", "DaemonSet", {"template": template({"tolerations": t.every_taint, "priorityClassName": "system-node-critical", "containers": [t.container("agent", {})]})}),
		"warned": [`the rule "priority"`, `priorityClassName "system-node-critical" gives it priority 2000001000`],
		"mutate": {"warned": [`the rule "priority"`]},
	},
	"a Deployment of pods without GPUs tolerating the GPU taint": {
		"request": workload("apps", "Deployment", {"template": template({"tolerations": [t.gpu_toleration], "containers": [t.container("web", t.requests(t.cpu))]})}),
		"warned": [`the rule "gpu-node-without-gpu"`, "requests no GPU but tolerates the GPU node taint"],
		"mutate": {"warned": [`the rule "gpu-node-without-gpu"`]},
	},
	"a Deployment of pods without GPUs": {
		"request": workload("apps", "Deployment", {"template": template({"containers": [t.container("web", t.requests(t.cpu))]})}),
		"admitted": true,
	},
	"a Job template with a memory-backed /dev/shm": {
		"request": workload("batch", "Job", {"template": template(t.binpack([object.union(t.gpu_container, {"volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]})], {"volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]}))}),
		"admitted": true,
	},
	# frameworks
	"a RayCluster worker group asking for GPUs without the toleration": {
		"request": workload("ray.io", "RayCluster", {
			"headGroupSpec": {"rayStartParams": {}, "template": template({"containers": [t.container("ray-head", t.requests(t.cpu))]})},
			"workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": template({"schedulerName": "gpu-binpack-scheduler", "containers": [t.container("ray-worker", t.limits(t.gpu))]})}],
		}),
		# enforce: admitted, but no node would take the pods; mutate adds the toleration to them.
		"warned": [`RayCluster "team-a/serve": the pods made from spec.workerGroupSpecs[0].template would wait (the rule "gpu-toleration")`, "so no node will take it", "add the toleration"],
		"mutate": {"admitted": true},
	},
	"a RayJob's cluster asking for GPUs on the default scheduler": {
		"request": workload("ray.io", "RayJob", {"entrypoint": "python train.py", "rayClusterSpec": {
			"headGroupSpec": {"template": template({"containers": [t.container("ray-head", t.requests(t.cpu))]})},
			"workerGroupSpecs": [{"groupName": "gpu", "template": template({"tolerations": [t.gpu_toleration], "containers": [t.container("ray-worker", t.limits(t.gpu))]})}],
		}}),
		"warned": [`RayJob "team-a/serve": the pods made from spec.rayClusterSpec.workerGroupSpecs[0].template`, `the rule "scheduler"`],
		"mutate": {"admitted": true},
	},
	"a RayJob's submitter setting NVIDIA_VISIBLE_DEVICES": {
		"request": workload("ray.io", "RayJob", {"entrypoint": "python train.py", "submitterPodTemplate": template({"containers": [t.container("submit", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})]})}),
		"warned": [`the pods made from spec.submitterPodTemplate`, `the rule "visible-devices"`],
		"mutate": {"warned": [`the rule "visible-devices"`]},
	},
	"a LeaderWorkerSet whose workers ask for GPUs on the default scheduler": {
		"request": workload("leaderworkerset.x-k8s.io", "LeaderWorkerSet", {"leaderWorkerTemplate": {
			"size": 4,
			"leaderTemplate": template(t.binpack([t.gpu_container], {})),
			"workerTemplate": template({"tolerations": [t.gpu_toleration], "containers": [t.gpu_container]}),
		}}),
		"warned": [`LeaderWorkerSet "team-a/serve": the pods made from spec.leaderWorkerTemplate.workerTemplate`, `the rule "scheduler"`],
		"mutate": {"admitted": true},
	},
	"a PyTorchJob worker with a SYS_ADMIN sidecar": {
		"request": workload("kubeflow.org", "PyTorchJob", {"pytorchReplicaSpecs": {
			"Master": {"replicas": 1, "template": template(t.binpack([t.gpu_container], {}))},
			"Worker": {"replicas": 3, "template": template(t.binpack([t.gpu_container, t.adding_capabilities(t.container("sidecar", {}), ["SYS_ADMIN"])], {}))},
		}}),
		"warned": [`PyTorchJob "team-a/serve": the pods made from spec.pytorchReplicaSpecs.Worker.template`, "adds the capability SYS_ADMIN"],
		"mutate": {"warned": ["adds the capability SYS_ADMIN"]},
	},
	# updates: only a changed template is decided again
	"a Deployment scaled, its template unchanged": {
		"request": t.review(
			{"replicas": 3, "template": template({"containers": [t.gpu_container]})},
			{"kind": "Deployment", "group": "apps", "name": "serve", "operation": "UPDATE", "oldSpec": {"replicas": 2, "template": template({"containers": [t.gpu_container]})}},
		),
		"admitted": true,
	},
	"a Deployment's template changed into one asking for a GPU on the default scheduler": {
		"request": t.review(
			{"template": template({"tolerations": [t.gpu_toleration], "containers": [t.gpu_container]})},
			{"kind": "Deployment", "group": "apps", "name": "serve", "operation": "UPDATE", "oldSpec": {"template": template({"containers": [t.container("web", {})]})}},
		),
		"warned": [`the rule "scheduler"`],
		"mutate": {"admitted": true},
	},
	"a privileged GPU Deployment in an exempt namespace": {
		"request": t.review({"template": template(t.binpack([t.privileged(t.gpu_container)], {}))}, {"kind": "Deployment", "group": "apps", "name": "serve", "namespace": "kube-system"}),
		"admitted": true,
	},
	# teams: Kueue's hold and the tolerations it adds come later, with the pods or at admission
	"a team's suspended Job without the toleration Kueue will give it": {
		"stack": "teams",
		"request": t.review({"suspend": true, "template": template(t.binpack([t.gpu_container], {"tolerations": []}))}, {"kind": "Job", "group": "batch", "name": "train", "namespace": "research"}),
		"admitted": true,
	},
	# teams with a topology: only pod sets that ask for GPUs may ask for a domain
	"a JobSet whose CPU launcher asks for a rack": {
		"stack": "topology",
		"request": launcher_and_workers("example.com/rack"),
		"warned": [
			`JobSet "research/allreduce": the pods made from spec.replicatedJobs[0].template.spec.template ask for no GPU but for one domain of example.com/rack (kueue.x-k8s.io/podset-required-topology)`,
			"annotate the GPU pod sets only",
		],
		"mutate": {"warned": ["annotate the GPU pod sets only"]},
	},
	"a JobSet whose GPU workers alone ask for a rack": {
		"stack": "topology",
		"request": launcher_and_workers(null),
		"admitted": true,
	},
	"a CPU launcher that asks for one node": {
		"stack": "topology",
		"request": launcher_and_workers("kubernetes.io/hostname"),
		"admitted": true,
	},
	"a GPU Deployment in a namespace of no team": {
		"stack": "teams",
		"request": workload("apps", "Deployment", {"template": template(t.binpack([t.gpu_container], {}))}),
		"warned": [`the rule "team-namespace"`, `in namespace "team-a", which belongs to no team`],
		"mutate": {"warned": [`the rule "team-namespace"`]},
	},
}

# An MPI-style JobSet in a team namespace: a CPU launcher asking Kueue for one domain of
# `launcher_level` (none: null) and GPU workers asking for a rack.
launcher_and_workers(launcher_level) := t.review(
	{"suspend": true, "replicatedJobs": [
		{"name": "launcher", "template": {"spec": {"template": {
			"metadata": {"annotations": {k: launcher_level | k := "kueue.x-k8s.io/podset-required-topology"; launcher_level != null}},
			"spec": {"restartPolicy": "Never", "containers": [t.container("mpirun", {})]},
		}}}},
		{"name": "workers", "template": {"spec": {"template": {
			"metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "example.com/rack"}},
			"spec": t.binpack([t.gpu_container], {"restartPolicy": "Never", "tolerations": []}),
		}}}},
	]},
	{"kind": "JobSet", "group": "jobset.x-k8s.io", "name": "allreduce", "namespace": "research"},
)

# A workload "team-a/serve" of `kind` created by a user.
workload(group, kind, spec) := t.review(spec, {"kind": kind, "group": group, "name": "serve"})

template(spec) := {"metadata": {"labels": {"app": "serve"}}, "spec": spec}

test_cases if t.all_decided(cases)
