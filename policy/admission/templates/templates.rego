# Workloads' pod templates: a Deployment, Job or framework object whose pods would be refused is
# itself admitted (its controller makes the pods later), so the refusal would show only in the
# controller's events. Each pod template is decided here as the pod its controller would create
# from it, by the pod rules themselves (input replaced by that pod's CREATE review), and what
# would be refused or would wait comes back as a warning on the workload, in every mode: the
# templates webhook never refuses.
package gpuplatform.admission

templates := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": template_response,
} if well_formed

template_response := {"uid": input.request.uid, "allowed": true, "warnings": sort(template_warnings)} if {
	count(template_warnings) > 0
} else := {"uid": input.request.uid, "allowed": true}

# The workload's kind, as params.workloadTemplates names it.
workload_kind := concat("/", [input.request.kind.group, input.request.kind.kind])

# Each pod template of `workload` as {path, template, creator, owner}.
pod_templates(workload) := {object.union(t, {"path": path, "template": template}) |
	some t in params.workloadTemplates[workload_kind]
	some [path, template] in templates_at(workload, t)
}

templates_at(workload, t) := ({[concat(".", t.at), template] |
	t.each == ""
	template := object.get(workload, t.at, null)
	is_object(template)
} | {[sprintf("%s[%d].%s", [concat(".", t.at), i, concat(".", t.then)]), template] |
	t.each == "item"
	some i, item in array_at({"items": object.get(workload, t.at, [])}, "items")
	template := object.get(item, t.then, null)
	is_object(template)
}) | {[sprintf("%s.%s.%s", [concat(".", t.at), key, concat(".", t.then)]), template] |
	t.each == "value"
	items := object.get(workload, t.at, {})
	is_object(items)
	some key, item in items
	template := object.get(item, t.then, null)
	is_object(template)
}

# The templates a request writes: all of them at creation; on an update, those it changes.
written_templates := pod_templates(input.request.object) if {
	input.request.operation == "CREATE"
} else := pod_templates(input.request.object) - pod_templates(input.request.oldObject) if {
	input.request.operation == "UPDATE"
	is_object(input.request.oldObject)
}

decided_templates := written_templates if {
	is_object(input.request.object.spec)
	not exempt
	not input.request.subResource
} else := set()

# The CREATE of a pod made from the template, as its creator sends it: named after the
# workload, owned by the controller the template's kind has, with the priority the API server
# gives a class every cluster has (other classes' priorities are the cluster's, unknown here).
template_pod(entry) := {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
	"uid": input.request.uid,
	"operation": "CREATE",
	"namespace": input.request.namespace,
	"kind": {"group": "", "version": "v1", "kind": "Pod"},
	"resource": {"group": "", "version": "v1", "resource": "pods"},
	"userInfo": {"username": entry.creator},
	"object": {
		"metadata": object.union(object.remove(object.get(entry.template, "metadata", {}), ["name"]), {
			"namespace": input.request.namespace,
			"generateName": concat("", [workload_name_only, "-"]),
			"ownerReferences": [object.union(entry.owner, {"name": workload_name_only, "controller": true})],
		}),
		"spec": object.union(object.get(entry.template, "spec", {}), resolved_priority(object.get(entry.template, "spec", {}))),
	},
}}

resolved_priority(spec) := {"priority": params.builtinPriorityClasses[spec.priorityClassName]} if {
	is_string(spec.priorityClassName)
	params.builtinPriorityClasses[spec.priorityClassName]
} else := {}

workload_name_only := object.get(input.request.object.metadata, "name", "")

template_owner := sprintf("%s %q", [input.request.kind.kind, sprintf("%s/%s", [input.request.namespace, workload_name_only])])

# What the pod rules say of each template's pod: the violations a pod made from it would be
# refused for (in mutate, those the mutating webhook cannot fix on the pod), and the hints of
# a pod that would wait. Not Kueue's hold (its gate and labels come with the pod, or into a
# Job's template when Kueue admits it), nor, in a team namespace, the tolerations Kueue adds.
template_warnings contains sprintf("%s: the pods made from %s %s: %s", [template_owner, entry.path, template_consequence(v.rule), v.message]) if {
	some entry in decided_templates
	pod_violations := violations with input as template_pod(entry)
	some v in pod_violations
	not v.rule == "team-queue"
	not mutate_fixes(v)
}

template_warnings contains sprintf("%s: the pods made from %s would wait (the rule %q): %s", [template_owner, entry.path, h.rule, h.message]) if {
	params.mode != "mutate"
	not team_of_namespace
	some entry in decided_templates
	pod_hints := hints with input as template_pod(entry)
	some h in pod_hints
}

# With a topology, a team's pod set that asks for no GPU is placed by the node alone (the flavor
# its pods count on has no other level), so one that asks Kueue for a domain above the node gets
# a GPU flavor, with the GPU nodes' toleration, and its pods would be refused for it.
template_warnings contains sprintf("%s: the pods made from %s ask for no GPU but for one domain of %s (%s): Kueue keeps only pod sets that ask for GPUs to such a domain and would give these the GPU nodes' toleration, which a pod without GPUs is refused; remove the annotation from this template (annotate the GPU pod sets only)", [template_owner, entry.path, level, key]) if {
	team_of_namespace
	some entry in decided_templates
	some key in params.teams.topologyRequests
	level := object.get(object.get(object.get(entry.template, "metadata", {}), "annotations", {}), key, "")
	level in params.teams.topologyLevels
	not gpu_pod with input as template_pod(entry)
}

mutate_fixes(v) if {
	params.mode == "mutate"
	v.fixable
}

template_consequence(rule) := sprintf("break the rule %q (admitted in audit mode, refused in enforce mode)", [rule]) if params.mode == "audit"

else := sprintf("would be refused by the rule %q", [rule])
