# Teams: a team's GPUs are reached only through its queue.
package gpuplatform.admission

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
# Deployments, StatefulSets and LeaderWorkerSets), or one the Job controller or a framework's
# controller (KubeRay's, the training operator's) creates for a workload Kueue started: Kueue
# writes its admission, with the pod set's label, into the workload's templates, and only Kueue
# starts a team's workload (below).
kueue_managed if {
	kueue_gated
	count(queue_bypass) == 0
}

kueue_managed if {
	some creator in array.concat(params.teams.jobControllers, params.teams.workloadControllers)
	input.request.userInfo.username == creator
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
		[pod_name, gate, team, input.request.namespace, params.teams.queue],
	),
} if {
	team := team_of_namespace
	not by_kueue
	some gate in lifted_gates
}

# Kueue's release of a pod is decided too: the pod is scheduled the moment its gates are gone,
# so one that may hold GPUs must then be the binpack scheduler's (its name cannot change, but a
# pod created while OPA did not answer, or in audit mode, may name another).
violations contains {
	"rule": "scheduler",
	"fixable": false,
	"message": sprintf(
		"pod %q is released from Kueue's gate %s with spec.schedulerName %q, but it requests %s; GPU pods must set spec.schedulerName: %s (delete it and create it again with it)",
		[pod_name, concat(", ", sort(lifted_gates)), scheduler, concat(", ", sort(requested_gpu_resources)), params.schedulerName],
	),
} if {
	team_of_namespace
	count(lifted_gates) > 0
	scheduler := object.get(pod_spec, "schedulerName", "default-scheduler")
	scheduler != params.schedulerName
}

# The gates of Kueue's that an update of a team's GPU pod lifts.
lifted_gates contains gate.name if {
	is_pod_update
	gpu_pod
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

# Nor does anyone but Kueue narrow where a pod it holds may run (the API server lets a gated
# pod's node selector and required node affinity be added to): Kueue chose the pod's flavor (and,
# with a topology, its node) from the selection the pod was created with and compares only
# containers and tolerations later, so the pod could never run where Kueue placed it, and would
# hold its share of the team's quota until waitForPodsReady took it back.
violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"pod %q: its %s changed while Kueue holds it for team %q (gate %s): Kueue placed it by the selection it was created with and would not read the change, so the pod would hold quota and never run; delete the pod and create it again with the selection (on its workload's pod template)",
		[pod_name, concat(" and ", sort(node_selection_changed)), team, concat(", ", sort(held_by_gates))],
	),
} if {
	is_pod_update
	gpu_pod
	team := team_of_namespace
	not by_kueue
	count(held_by_gates) > 0
	count(node_selection_changed) > 0
}

held_by_gates contains gate.name if {
	some gate in array_at(old_spec, "schedulingGates")
	gate.name in params.teams.gates
}

node_selection_changed contains "spec.nodeSelector" if {
	object.get(pod_spec, "nodeSelector", {}) != object.get(old_spec, "nodeSelector", {})
}

node_selection_changed contains "spec.affinity.nodeAffinity" if {
	object.get(pod_spec, ["affinity", "nodeAffinity"], {}) != object.get(old_spec, ["affinity", "nodeAffinity"], {})
}

kueue_metadata_changed contains sprintf("%s %s", [trim_suffix(field, "s"), key]) if {
	some field in ["labels", "annotations"]
	new := metadata_of(input.request.object, field)
	old := metadata_of(input.request.oldObject, field)
	some key in (object.keys(new) | object.keys(old))
	startswith(key, params.teams.metadataPrefix)
	object.get(new, key, null) != object.get(old, key, null)
}

# Jobs, JobSets and the frameworks' workloads (TrainJobs, PyTorchJobs, RayJobs, RayClusters):
# Kueue suspends each at creation in a team namespace and starts it when it admits it, writing
# the admission into its pod templates; the pods made from them are admitted for that (above).
# So only Kueue may start one, and a running Job may not grow behind Kueue's back. The
# frameworks' controllers create and start the Jobs, JobSets and RayClusters of a workload Kueue
# admitted, and are trusted with that by name (params.teams.workloadControllers).
team_workload := {"kind": input.request.kind.kind, "spec": input.request.object.spec, "suspend": path} if {
	path := params.teams.suspendedKinds[workload_kind]
	is_object(input.request.object.spec)
	not exempt
	team_of_namespace
}

workload_gpu_resources contains name if {
	team_workload
	some t in pod_templates(input.request.object)
	some field, _ in container_fields
	some c in array_at(t.template.spec, field)
	is_object(c)
	some name in gpu_resources(c)
}

# On the DRA path a template's resource claims may hold GPUs, as a pod's may.
workload_gpu_resources contains sprintf("resource claims (%s)", [concat(", ", sort({object.get(claim, "name", "") | some claim in array_at(t.template.spec, "resourceClaims")}))]) if {
	params.gpuPath == "dra"
	team_workload
	some t in pod_templates(input.request.object)
	count(array_at(t.template.spec, "resourceClaims")) > 0
}

# A kind whose pod templates the workload does not carry (a TrainJob's are its runtime's) may
# hold GPUs whatever it says.
workload_gpu_resources contains "the GPUs its runtime gives it" if {
	team_workload
	not params.workloadTemplates[workload_kind]
}

workload_name := sprintf("%s %q", [team_workload.kind, sprintf("%s/%s", [input.request.namespace, object.get(input.request.object.metadata, "name", "")])])

suspended(obj) if object.get(obj, team_workload.suspend, false) == true

by_workload_controller if input.request.userInfo.username in params.teams.workloadControllers

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
	not suspended(input.request.object)
	not by_kueue
	not by_workload_controller
}

violations contains {
	"rule": "team-queue",
	"fixable": false,
	"message": sprintf(
		"%s: only Kueue starts a %s of namespace %q (team %q), once it admits it against the team's quota; leave %s to Kueue",
		[workload_name, team_workload.kind, input.request.namespace, team_of_namespace, concat(".", team_workload.suspend)],
	),
} if {
	input.request.operation == "UPDATE"
	count(workload_gpu_resources) > 0
	suspended(input.request.oldObject)
	not suspended(input.request.object)
	not by_kueue
	not by_workload_controller
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
	not suspended(input.request.object)
	old_parallelism := object.get(input.request.oldObject.spec, "parallelism", 1)
	object.get(team_workload.spec, "parallelism", 1) > old_parallelism
	not by_kueue
	not by_workload_controller
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
