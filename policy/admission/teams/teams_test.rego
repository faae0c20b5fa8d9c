# Teams: in a team's namespace GPU work runs only as Kueue releases it against the team's quota
# (gates and labels only Kueue changes, Jobs only Kueue starts), and where the stack says so, GPU
# pods run only in the teams' namespaces.
package gpuplatform.admission_test.teams

import data.gpuplatform.admission_test as t

cases := object.union({name: object.union({"stack": "teams"}, c) | some name, c in team_cases}, outside_teams)

team_cases := {
	# at creation: outside the queue, and gates Kueue would never lift on the quota's terms
	"a GPU pod in a team namespace outside its queue": {
		"request": team_pod(ungated, {}),
		"refused": [`namespace "research" of team "research"`, "LocalQueue research/default"],
	},
	"a pod Kueue holds for the team's quota, without the toleration Kueue will give it": {
		"request": queued({"schedulerName": "gpu-binpack-scheduler", "containers": [t.gpu_container]}, managed),
		"admitted": true,
	},
	"a gate and a controller of the user's own making": {
		"request": team_pod(gated_gpu_pod, {"metadata": {"ownerReferences": [t.job_owner]}}),
		"refused": ["it carries Kueue's gate, but Kueue's webhook did not take it over", "LocalQueue research/default"],
	},
	"a parent's annotation on a pod a user made": {
		"request": team_pod(gated_gpu_pod, {"metadata": {
			"annotations": {"kueue.x-k8s.io/pod-suspending-parent": "leaderworkerset"},
			"labels": {"leaderworkerset.sigs.k8s.io/name": "x"},
		}}),
		"refused": ["it claims a parent Kueue holds (annotation kueue.x-k8s.io/pod-suspending-parent), but the ReplicaSet or StatefulSet controller did not create it"],
	},
	"a Deployment's pod, held for its parent": {
		"request": team_pod(gated_gpu_pod, {
			"metadata": object.union(managed, {"annotations": {"kueue.x-k8s.io/pod-suspending-parent": "deployment"}}),
			"user": "system:serviceaccount:kube-system:replicaset-controller",
		}),
		"admitted": true,
	},
	"a StatefulSet's pod, held for its parent": {
		"request": team_pod(gated_gpu_pod, {
			"metadata": {"annotations": {"kueue.x-k8s.io/pod-suspending-parent": "statefulset"}},
			"user": "system:serviceaccount:kube-system:statefulset-controller",
		}),
		"admitted": true,
	},
	"a pod group of bare pods": {
		"request": queued({"schedulerName": "gpu-binpack-scheduler", "containers": [t.gpu_container]}, {
			"labels": object.union(managed.labels, {"kueue.x-k8s.io/pod-group-name": "gang"}),
			"annotations": {"kueue.x-k8s.io/role-hash": "a1b2c3d4"},
		}),
		"refused": [`it joins the Kueue pod group "gang"`, "run the group as a Job, JobSet or StatefulSet"],
	},
	# a Job's pods: the Job controller creates them for a Job Kueue started
	"a Job's pod, made by the Job controller with the podset label Kueue wrote": {
		"request": team_pod(ungated, {"metadata": job_pod, "user": "system:serviceaccount:kube-system:job-controller"}),
		"admitted": true,
	},
	"a pod with the podset label, made by a user": {
		"request": team_pod(ungated, {"metadata": job_pod}),
		"refused": ["it is not held by Kueue's admission gate"],
	},
	# later: gates and Kueue's labels belong to Kueue
	"Kueue letting a pod go": {
		# At admission Kueue removes its gates, adds the flavor's node labels and tolerations, and
		# its own labels and annotation (one merge patch, by its ServiceAccount).
		"request": team_pod(
			t.binpack([t.gpu_container], {"nodeSelector": {"nvidia.com/gpu.present": "true"}}),
			{"operation": "UPDATE", "oldSpec": gated_gpu_pod, "metadata": admitted_by_kueue, "oldMetadata": managed, "user": kueue},
		),
		"admitted": true,
	},
	"Kueue letting go a pod that names another scheduler": {
		# A pod created while OPA did not answer: Kueue's release is decided all the same.
		"request": team_pod(
			object.union(ungated, {"schedulerName": "default-scheduler"}),
			{"operation": "UPDATE", "oldSpec": gated(object.union(ungated, {"schedulerName": "default-scheduler"})), "metadata": admitted_by_kueue, "oldMetadata": managed, "user": kueue},
		),
		"refused": [
			`pod "research/train-0" is released from Kueue's gate kueue.x-k8s.io/admission, kueue.x-k8s.io/topology with spec.schedulerName "default-scheduler"`,
			"GPU pods must set spec.schedulerName: gpu-binpack-scheduler",
		],
	},
	"the admission gate lifted by the user": {
		"request": team_pod(ungated, {"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": managed, "metadata": managed}),
		"refused": [`pod "research/train-0": only Kueue lifts its scheduling gate kueue.x-k8s.io/admission, once it admits the pod against the quota of team "research"`],
	},
	"the managed label removed by the user": {
		"request": team_pod(gated_gpu_pod, {"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": managed, "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "default"}}}),
		"refused": ["only Kueue changes its label kueue.x-k8s.io/managed"],
	},
	"a Job pod's podset label changed by the user": {
		"request": team_pod(ungated, {"operation": "UPDATE", "oldSpec": ungated, "oldMetadata": job_pod, "metadata": {"labels": {"kueue.x-k8s.io/podset": "other"}}}),
		"refused": ["only Kueue changes its label kueue.x-k8s.io/podset"],
	},
	"a group's total count annotated by the user": {
		"request": team_pod(gated_gpu_pod, {
			"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": managed,
			"metadata": object.union(managed, {"annotations": {"kueue.x-k8s.io/pod-group-total-count": "1"}}),
		}),
		"refused": ["only Kueue changes its annotation kueue.x-k8s.io/pod-group-total-count"],
	},
	"a label of the user's own changed on a held pod": {
		"request": team_pod(gated_gpu_pod, {
			"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": managed,
			"metadata": {"labels": object.union(managed.labels, {"app": "trainer"})},
		}),
		"admitted": true,
	},
	"a node selector added to a held pod by its user": {
		"request": team_pod(object.union(gated_gpu_pod, {"nodeSelector": {"example.com/rack": "b"}}), {
			"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": managed, "metadata": managed,
		}),
		"refused": [`pod "research/train-0": its spec.nodeSelector changed while Kueue holds it for team "research" (gate kueue.x-k8s.io/admission, kueue.x-k8s.io/topology)`, "delete the pod and create it again"],
	},
	"a required node affinity narrowed on a held pod": {
		"request": team_pod(object.union(gated_gpu_pod, {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": ["b"]}]}]}}}}), {
			"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": managed, "metadata": managed,
		}),
		"refused": ["its spec.affinity.nodeAffinity changed while Kueue holds it"],
	},
	"the node Kueue placed a held pod on, written by Kueue": {
		# With a topology Kueue lifts its topology gate with the node's label as selector.
		"request": team_pod(object.union(gated_gpu_pod, {"nodeSelector": {"kubernetes.io/hostname": "gpu-1"}}), {
			"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": managed, "metadata": managed, "user": kueue,
		}),
		"admitted": true,
	},
	"a node selector changed on a running pod's old spec without gates": {
		# The API server refuses such a change to a scheduled pod; no gate, nothing for Kueue.
		"request": team_pod(object.union(ungated, {"nodeSelector": {"example.com/rack": "b"}}), {
			"operation": "UPDATE", "oldSpec": ungated, "oldMetadata": admitted_by_kueue, "metadata": admitted_by_kueue,
		}),
		"admitted": true,
	},
	"a finalizer removed by a controller": {
		"request": team_pod(ungated, {
			"operation": "UPDATE", "oldSpec": ungated, "oldMetadata": admitted_by_kueue, "metadata": admitted_by_kueue,
			"user": "system:serviceaccount:kube-system:generic-garbage-collector",
		}),
		"admitted": true,
	},
	"Kueue's labels written by Kueue on a StatefulSet's pod": {
		"request": team_pod(gated_gpu_pod, {
			"operation": "UPDATE", "oldSpec": gated_gpu_pod, "oldMetadata": {},
			"metadata": {"labels": object.union(managed.labels, {"kueue.x-k8s.io/pod-group-name": "web"})},
			"user": kueue,
		}),
		"admitted": true,
	},
	# Jobs and JobSets: only Kueue starts one, and a running Job does not grow
	"a GPU Job created running by a user": {
		"request": job({"suspend": false}, {}),
		"refused": [`Job "research/train" requests nvidia.com/gpu but was not suspended at creation`, "remove metadata.ownerReferences"],
	},
	"a GPU Job created suspended": {
		"request": job({"suspend": true}, {}),
		"admitted": true,
	},
	"a JobSet's Job created running by JobSet's controller": {
		"request": job({"suspend": false}, {"user": "system:serviceaccount:jobset-system:jobset-controller-manager"}),
		"admitted": true,
	},
	"a GPU Job started by a user": {
		"request": job({"suspend": false}, {"operation": "UPDATE", "old": {"suspend": true}}),
		"refused": [`Job "research/train": only Kueue starts a Job of namespace "research" (team "research")`, "leave spec.suspend to Kueue"],
	},
	"a GPU Job started by Kueue": {
		"request": job({"suspend": false}, {"operation": "UPDATE", "old": {"suspend": true}, "user": kueue}),
		"admitted": true,
	},
	"a running GPU Job grown by a user": {
		"request": job({"suspend": false, "parallelism": 4}, {"operation": "UPDATE", "old": {"suspend": false, "parallelism": 1}}),
		"refused": ["spec.parallelism 1 -> 4 would run more GPU pods than Kueue admitted"],
	},
	"a running GPU Job shrunk by a user": {
		"request": job({"suspend": false, "parallelism": 1}, {"operation": "UPDATE", "old": {"suspend": false, "parallelism": 4}}),
		"admitted": true,
	},
	"a GPU JobSet started by a user": {
		"request": workload(
			"JobSet", "jobset.x-k8s.io", {"suspend": false}, {"replicatedJobs": [{
				"name": "workers", "replicas": 2,
				"template": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [t.gpu_container]}}}},
			}]},
			{"operation": "UPDATE", "old": {"suspend": true}},
		),
		"refused": [`JobSet "research/train": only Kueue starts a JobSet`],
	},
	# the frameworks' workloads: only Kueue starts one; their controllers create and start
	# what a workload Kueue admitted is made of
	"a GPU RayJob created running by a user": {
		"request": workload("RayJob", "ray.io", {"suspend": false}, ray_cluster_spec, {}),
		"refused": [`RayJob "research/train" requests nvidia.com/gpu but was not suspended at creation`],
	},
	"a GPU RayJob started by a user": {
		"request": workload("RayJob", "ray.io", {"suspend": false}, ray_cluster_spec, {"operation": "UPDATE", "old": {"suspend": true}}),
		"refused": [`RayJob "research/train": only Kueue starts a RayJob`, "leave spec.suspend to Kueue"],
	},
	"a GPU RayJob started by Kueue": {
		"request": workload("RayJob", "ray.io", {"suspend": false}, ray_cluster_spec, {"operation": "UPDATE", "old": {"suspend": true}, "user": kueue}),
		"admitted": true,
	},
	"a RayJob without GPUs created running": {
		"request": workload("RayJob", "ray.io", {"suspend": false}, {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": [t.container("head", t.requests(t.cpu))]}}}}}, {}),
		"admitted": true,
	},
	"a GPU RayCluster created running by a user": {
		"request": workload("RayCluster", "ray.io", {"suspend": false}, ray_cluster_spec.rayClusterSpec, {}),
		"refused": [`RayCluster "research/train" requests nvidia.com/gpu but was not suspended at creation`],
	},
	"a RayJob's RayCluster created running by KubeRay's operator": {
		"request": workload("RayCluster", "ray.io", {"suspend": false}, ray_cluster_spec.rayClusterSpec, {"user": kuberay}),
		"admitted": true,
	},
	"a Ray worker made by KubeRay's operator with the pod set's label Kueue wrote": {
		"request": team_pod(ungated, {"metadata": job_pod, "user": kuberay}),
		"admitted": true,
	},
	"a Ray worker made by KubeRay's operator for a RayCluster Kueue never admitted": {
		"request": team_pod(ungated, {"user": kuberay}),
		"refused": ["it is not held by Kueue's admission gate", "LocalQueue research/default"],
	},
	"a GPU PyTorchJob started by a user": {
		"request": workload("PyTorchJob", "kubeflow.org", {"runPolicy": {"suspend": false}}, {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [t.gpu_container]}}}}}, {"operation": "UPDATE", "old": {"runPolicy": {"suspend": true}}}),
		"refused": [`PyTorchJob "research/train": only Kueue starts a PyTorchJob`, "leave spec.runPolicy.suspend to Kueue"],
	},
	"a TrainJob created running by a user, its GPUs left to its runtime": {
		"request": workload("TrainJob", "trainer.kubeflow.org", {"suspend": false}, {"runtimeRef": {"name": "torch-distributed"}}, {}),
		"refused": [`TrainJob "research/train" requests the GPUs its runtime gives it but was not suspended at creation`],
	},
	"a TrainJob's JobSet started by Kubeflow Trainer": {
		"request": workload(
			"JobSet", "jobset.x-k8s.io", {"suspend": false}, {"replicatedJobs": [{
				"name": "node", "replicas": 1,
				"template": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [t.gpu_container]}}}},
			}]},
			{"operation": "UPDATE", "old": {"suspend": true}, "user": "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"},
		),
		"admitted": true,
	},
	"a Job without GPUs created running": {
		"request": workload("Job", "batch", {"suspend": false}, job_template(t.container("main", t.limits(t.cpu))), {}),
		"admitted": true,
	},
	# what needs no queue
	"a pod without GPUs in a team namespace": {
		"request": team_pod({"containers": [t.container("main", t.requests(t.cpu))]}, {}),
		"admitted": true,
	},
}

# Where the stack says so (its default), GPU pods run only in the teams' namespaces; the example
# stack admits them elsewhere during a migration.
outside_teams := {
	"a GPU pod in a namespace of no team": {
		"request": t.pod(ungated),
		"stack": "teams",
		"refused": [`namespace "team-a", which belongs to no team`, "(research, vision)"],
	},
	"a GPU pod in a namespace of no team, on a stack that admits them there": {
		"request": t.pod(ungated),
		"admitted": true,
	},
}

kueue := "system:serviceaccount:kueue-system:kueue-controller-manager"

team_pod(spec, o) := t.review(spec, object.union({"namespace": "research"}, o))

# A pod spec as Kueue's webhook leaves it: held by its admission and topology gates.
gated(spec) := object.union(spec, {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}, {"name": "kueue.x-k8s.io/topology"}]})

managed := {"labels": {"kueue.x-k8s.io/managed": "true", "kueue.x-k8s.io/queue-name": "default"}}

# A bare GPU pod as Kueue's webhook leaves it in a team namespace: gated, with `metadata`.
queued(spec, metadata) := team_pod(gated(spec), {"metadata": metadata})

gated_gpu_pod := gated({"schedulerName": "gpu-binpack-scheduler", "containers": [t.gpu_container]})

ungated := t.binpack([t.gpu_container], {})

job_pod := {"labels": {"kueue.x-k8s.io/podset": "main"}}

admitted_by_kueue := {
	"labels": object.union(managed.labels, {"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "default"}),
	"annotations": {"kueue.x-k8s.io/workload": "pod-train-0-3b9f"},
}

kuberay := "system:serviceaccount:default:kuberay-operator"

ray_cluster_spec := {"rayClusterSpec": {
	"headGroupSpec": {"template": {"spec": {"containers": [t.container("head", t.requests(t.cpu))]}}},
	"workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": {"spec": {"containers": [t.gpu_container]}}}],
}}

job(spec, o) := workload("Job", "batch", spec, job_template(t.gpu_container), o)

job_template(container) := {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}

# A workload "research/train" of `kind` with its pods' templates `pods` in its spec; on an update
# ("old" in `o`) its old spec is `o.old` with the same templates.
workload(kind, group, spec, pods, o) := t.review(object.union(spec, pods), object.union_n([
	{"namespace": "research", "kind": kind, "group": group, "name": "train"},
	{"oldSpec": object.union(o.old, pods) | o.old},
	object.remove(o, ["old"]),
]))

test_cases if t.all_decided(cases)
