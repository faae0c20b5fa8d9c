# Admission policy: no pod gets a GPU, or a place on a GPU node, unless the binpack scheduler
# decides where it runs. The principle: on a GPU node, a GPU is reached only through the GPU
# resource, as the binpack scheduler places it. Every way a pod may get onto a GPU node counts
# (asking for GPUs, tolerating the GPU taint, being bound to a node by name), and a pod that may
# get there is given no other way to a GPU (device paths: privilege, the capabilities the NVIDIA
# container toolkit treats as privilege, host devices and driver files, the host's processes,
# device-injecting annotations). docs/concepts/admission.md has the threat model, and says where
# each rule lives: one folder per group of rules, all of them in this package.
#
# The webhooks send only the requests a rule can be about (their matchConditions); the policy
# checks again so that it is correct on its own. Its parameters are OPA data at
# data.gpuplatform.params: OPA loads them when it starts, with these files, from the same
# ConfigMap (opa-admission-policy, key params.json).
#
# This file holds the two decisions, one per webhook, both complete admission.k8s.io/v1
# AdmissionReviews, made of every group's violations and hints:
#   review    (validating) enforce: refuse any violation; mutate: refuse what the mutating
#             webhook cannot fix; audit: admit with a warning per violation.
#   mutation  (mutating; mutate and audit modes) mutate: set the scheduler and the GPU
#             tolerations; audit: label the pod so the dashboard can count it.
package gpuplatform.admission

# Undefined without the parameters: the decision is then undefined too, and the API server
# applies the webhook's failure policy instead of guessing.
params := data.gpuplatform.params if is_object(data.gpuplatform.params)

well_formed if {
	is_object(params)
	is_string(input.request.uid)
}

review := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": validation_response,
} if well_formed

mutation := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": mutation_response,
} if well_formed

refused contains v.message if {
	params.mode == "enforce"
	some v in violations
}

refused contains v.message if {
	params.mode == "mutate"
	some v in violations
	not v.fixable
}

warned contains sprintf("gpu-platform audit: %s", [v.message]) if {
	params.mode == "audit"
	some v in violations
}

warned contains h.message if {
	params.mode != "mutate"
	some h in hints
}

validation_response := {"uid": input.request.uid, "allowed": false, "status": {
	"code": 403,
	"reason": "Forbidden",
	"message": concat("; ", sort(refused)),
}} if count(refused) > 0

validation_response := {"uid": input.request.uid, "allowed": true, "warnings": sort(warned)} if {
	count(refused) == 0
	count(warned) > 0
	count(audited) == 0
}

# audit: the violations also go to the API server's audit log (as
# <webhook name>/violations), whatever the request: a Job's, a claim's, a debug container's.
validation_response := {
	"uid": input.request.uid, "allowed": true, "warnings": sort(warned),
	"auditAnnotations": {"violations": concat("; ", sort(audited))},
} if {
	count(refused) == 0
	count(audited) > 0
}

audited contains v.message if {
	params.mode == "audit"
	some v in violations
}

validation_response := {"uid": input.request.uid, "allowed": true} if {
	count(refused) == 0
	count(warned) == 0
}

mutation_response := {
	"uid": input.request.uid,
	"allowed": true,
	"patchType": "JSONPatch",
	"patch": base64.encode(json.marshal(patch)),
} if count(patch) > 0

mutation_response := {"uid": input.request.uid, "allowed": true} if count(patch) == 0

# mutate: what the violations' fixes and the missing tolerations need, in a fixed order.
patch := array.concat(scheduler_patch, toleration_patch) if params.mode == "mutate"

# audit: one label on a pod with violations, which kube-state-metrics exports.
patch := audit_label_patch if params.mode == "audit"

patch := [] if params.mode == "enforce"

scheduler_patch := [{"op": "add", "path": "/spec/schedulerName", "value": params.schedulerName}] if {
	some v in violations
	v.rule == "scheduler"
	v.fixable
} else := []

toleration_patch := [{"op": "add", "path": "/spec/tolerations", "value": missing_tolerations}] if {
	count(missing_tolerations) > 0
	not is_array(object.get(pod_spec, "tolerations", null))
} else := [{"op": "add", "path": "/spec/tolerations/-", "value": t} | some t in missing_tolerations] if {
	count(missing_tolerations) > 0
} else := []

missing_tolerations := [toleration_for(taint) |
	is_create
	gpu_pod
	not kueue_managed
	some taint in params.gpuTaints
	not tolerated(pod_spec, taint)
]

audit_label_patch := [{"op": "add", "path": "/metadata/labels", "value": {params.auditLabel: "violation"}}] if {
	count(violations) > 0
	not is_object(object.get(input.request.object.metadata, "labels", null))
} else := [{"op": "add", "path": concat("", ["/metadata/labels/", replace(params.auditLabel, "/", "~1")]), "value": "violation"}] if {
	count(violations) > 0
} else := []
