# What the rule groups' tests share: AdmissionReviews as the API server sends them, and the check
# that a case is decided in every mode as its verdict says.
#
# A case: {"request": an AdmissionReview, "stack": the stack whose parameters decide it (a key of
# rendered.params; "example" when absent), and one verdict in enforce mode: "admitted": true,
# "refused": [fragments of the refusal's message] or "warned": [fragments of its warnings]}. A
# refused request that mutate decides otherwise, once the mutating webhook's patch is applied,
# says how in "mutate" ({"admitted": true} or {"refused": [fragments]}); without it, mutate
# refuses it word for word as enforce does. A case with "decision": "templates" is
# decided by the templates webhook's decision (a workload's pod templates; warnings only): its
# "warned" fragments come back in enforce and audit, and its "mutate" says what mutate still
# warns of ({"warned": [fragments]}) or that it warns of nothing ({"admitted": true}). Each
# group's test file keeps its cases in `cases`, which tests/unit/test_policy.py reads as well, to
# check the webhooks' prefilter against them.
package gpuplatform.admission_test

import data.gpuplatform.admission
import data.gpuplatform.admission_test.rendered

# --- requests ----------------------------------------------------------------------------------

user := "alice@example.com"

# An AdmissionReview of a request on an object with `spec` (null: none, as on a DELETE). `o` says
# what differs from a pod "team-a/train-0" created by a user: "namespace", "operation", "kind",
# "group", "name" (or "generateName" instead), "uid", "user", "subResource", "metadata" (added
# to the object's), and on an update "oldSpec" with "oldMetadata" (the same metadata if absent).
review(spec, o) := {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request} if {
	namespace := object.get(o, "namespace", "team-a")
	kind := object.get(o, "kind", "Pod")
	group := object.get(o, "group", "")
	metadata := object.union_n([{"namespace": namespace}, object_name(o), object.get(o, "metadata", {})])
	request := object.union_n([
		{
			"uid": object.get(o, "uid", "3b9f-41d2"),
			"operation": object.get(o, "operation", "CREATE"),
			"namespace": namespace,
			"kind": {"group": group, "version": "v1", "kind": kind},
			# The API server names the resource too (kinds' plurals, as their APIs do).
			"resource": {"group": group, "version": "v1", "resource": plural(kind)},
			"userInfo": {"username": object.get(o, "user", user)},
			"object": object_of(spec, metadata),
		},
		{"subResource": o.subResource | o.subResource},
		{"oldObject": {"metadata": old_metadata(o, metadata, namespace), "spec": o.oldSpec} | o.oldSpec},
	])
}

object_name(o) := {"generateName": o.generateName} if o.generateName

else := {"name": object.get(o, "name", "train-0")}

object_of(null, _) := null

object_of(spec, metadata) := {"metadata": metadata, "spec": spec} if spec != null

old_metadata(o, _, namespace) := object.union({"namespace": namespace, "name": object.get(o, "name", "train-0")}, o.oldMetadata)

old_metadata(o, metadata, _) := metadata if not "oldMetadata" in object.keys(o)

plural(kind) := concat("", [lower(kind), "es"]) if endswith(kind, "s")

else := concat("", [lower(kind), "s"])

# A pod "team-a/train-0" created by a user.
pod(spec) := review(spec, {})

gpu := {"nvidia.com/gpu": "1"}

mig := {"nvidia.com/mig-1g.10gb": "1"}

cpu := {"cpu": "2", "memory": "4Gi"}

zero_gpus := {"nvidia.com/gpu": "0"}

# The toleration of the GPU node taint, as the users' docs have GPU pods write it.
gpu_toleration := {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}

container(name, fields) := object.union({"name": name, "image": "trainer:1", "resources": {}}, fields)

limits(resources) := {"resources": {"limits": resources}}

requests(resources) := {"resources": {"requests": resources}}

gpu_container := container("main", limits(gpu))

privileged(c) := object.union(c, {"securityContext": {"privileged": true}})

adding_capabilities(c, capabilities) := object.union(c, {"securityContext": {"capabilities": {"add": capabilities}}})

host_path(path) := [{"name": "host", "hostPath": {"path": path}}]

# A spec of a pod as the users' docs have GPU pods written: the binpack scheduler and the GPU
# taint's toleration, with `fields` added.
binpack(containers, fields) := object.union(
	{"schedulerName": "gpu-binpack-scheduler", "tolerations": [gpu_toleration], "containers": containers},
	fields,
)

# A DaemonSet's pod as the DaemonSet controller creates it: a node agent tolerating every taint,
# with `fields` in its spec.
daemonset_pod(fields) := review(
	object.union({"tolerations": every_taint, "containers": [container("main", {})]}, fields),
	{"user": daemonset_controller, "metadata": daemonset_owner},
)

daemonset_controller := "system:serviceaccount:kube-system:daemon-set-controller"

daemonset_owner := {"ownerReferences": [{
	"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-exporter", "uid": "d1",
	"controller": true,
}]}

every_taint := [{"operator": "Exists"}]

# The owner reference the Job controller sets on the pods it creates.
job_owner := {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "5d1e", "controller": true}

# --- verdicts ----------------------------------------------------------------------------------

# Every case of a group decided as its verdict says; the names of those that are not are printed
# (opa test shows them when the test fails).
all_decided(cases) if {
	wrong := {name | some name, c in cases; not decided(c)}
	print("decided otherwise than the case says:", wrong)
	count(wrong) == 0
}

# A case decided in every mode as its verdict says: in enforce as it states; in mutate, after the
# mutating webhook's patch, what the patch cannot fix refused as in enforce; in audit, admitted,
# with a refusal's words as warnings and in the audit log, and the pod labelled.
decided(c) if {
	count({verdict | some verdict in ["admitted", "refused", "warned"]; c[verdict]}) == 1
	enforce := validation(c, c.request, "enforce")
	enforced(c, enforce)
	mutate_patch := mutation_patch(c, "mutate")
	mutated(c, enforce, mutate_patch, patched(c, mutate_patch))
	audit_patch := mutation_patch(c, "audit")
	audited(c, enforce, audit_patch, validation(c, c.request, "audit"))
}

admitted(c, response) if response == {"uid": c.request.request.uid, "allowed": true}

enforced(c, response) if {
	c.admitted == true
	admitted(c, response)
}

enforced(c, response) if {
	count(c.refused) > 0
	response.allowed == false
	response.status.code == 403
	response.status.reason == "Forbidden"
	every fragment in c.refused {
		contains(response.status.message, fragment)
	}
}

enforced(c, response) if {
	count(c.warned) > 0
	object.keys(response) == {"uid", "allowed", "warnings"}
	response.allowed == true
	every fragment in c.warned {
		some warning in response.warnings
		contains(warning, fragment)
	}
}

# mutate: what needs no fix is left alone; a missing toleration is added (mutate warns of
# nothing); a refusal is decided as the case says, or else stays word for word. What mutate admits
# once patched, enforce admits too: the patch fixes the pod, not just the verdict.
mutated(c, _, patch, _) if {
	c.admitted == true
	patch == []
}

mutated(c, _, _, fixed) if {
	c.warned
	not c.decision
	fixed_for_good(c, fixed)
}

# A workload's template: the mutating webhook fixes the pods its controller makes, not the
# template, so mutate warns only of what it cannot fix.
mutated(c, _, patch, _) if {
	c.decision == "templates"
	patch == []
	enforced(object.union({"request": c.request}, c.mutate), validation(c, c.request, "mutate"))
}

mutated(c, _, _, fixed) if {
	c.mutate.admitted == true
	fixed_for_good(c, fixed)
}

mutated(c, _, _, fixed) if {
	count(c.mutate.refused) > 0
	enforced(object.union({"request": c.request}, c.mutate), validation(c, fixed, "mutate"))
}

mutated(c, enforce, _, fixed) if {
	c.refused
	not c.mutate
	validation(c, fixed, "mutate").status.message == enforce.status.message
}

fixed_for_good(c, fixed) if {
	admitted(c, validation(c, fixed, "mutate"))
	admitted(c, validation(c, fixed, "enforce"))
}

# audit: nothing is refused; a pod with violations is labelled, which the dashboard counts.
audited(c, enforce, patch, response) if {
	not c.refused
	not c.decision
	response == enforce
	patch == []
}

# A workload's template: audit warns of what enforce does, in its own words (the pods would be
# admitted there).
audited(c, _, patch, response) if {
	c.decision == "templates"
	patch == []
	enforced(c, response)
}

audited(c, _, patch, response) if {
	count(c.refused) > 0
	response.allowed == true
	not response.status
	every fragment in c.refused {
		some warning in response.warnings
		startswith(warning, "gpu-platform audit: ")
		contains(warning, fragment)

		# The API server's audit log records them too, whatever the request.
		contains(response.auditAnnotations.violations, fragment)
	}
	labelled_if_a_pod(c, patch)
}

labelled_if_a_pod(c, _) if c.request.request.kind.kind != "Pod"

labelled_if_a_pod(c, patch) if patched(c, patch).request.object.metadata.labels["gpu-platform.io/admission-audit"] == "violation"

# --- the webhooks' answers ---------------------------------------------------------------------

params_for(c, mode) := object.union(rendered.params[object.get(c, "stack", "example")], {"mode": mode})

# The validating webhook's response to `request` in `mode`, under the case's stack.
validation(c, request, mode) := response(request, decision) if {
	not c.decision
	decision := admission.review with input as request with data.gpuplatform.params as params_for(c, mode)
}

validation(c, request, mode) := response(request, decision) if {
	c.decision == "templates"
	decision := admission.templates with input as request with data.gpuplatform.params as params_for(c, mode)
}

# The mutating webhook's patch for the case's request in `mode` ([] for none).
mutation_patch(c, mode) := patch if {
	decision := admission.mutation with input as c.request with data.gpuplatform.params as params_for(c, mode)
	patch := patch_of(response(c.request, decision))
}

# A complete AdmissionReview, answering the request it was asked about.
response(request, decision) := decision.response if {
	decision.apiVersion == "admission.k8s.io/v1"
	decision.kind == "AdmissionReview"
	decision.response.uid == request.request.uid
}

patch_of(response) := json.unmarshal(base64.decode(response.patch)) if response.patchType == "JSONPatch"

patch_of(response) := [] if {
	response.allowed == true
	not response.patch
}

# The case's request as the validating webhook sees it after the mutating webhook's `patch`,
# applied as RFC 6902 says.
patched(c, patch) := json.patch(c.request, [{
	"op": "replace",
	"path": "/request/object",
	"value": json.patch(c.request.request.object, patch),
}])
