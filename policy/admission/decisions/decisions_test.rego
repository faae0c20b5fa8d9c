# The decisions: complete AdmissionReviews in every mode, the mutating webhook's patch, the audit
# label, and no decision at all for a malformed review or without the parameters (the API server
# then applies the webhook's failure policy). Every group's cases check each mode too
# (testing/reviews_test.rego); these are what the modes do beyond them.
package gpuplatform.admission_test.decisions

import data.gpuplatform.admission
import data.gpuplatform.admission_test as t
import data.gpuplatform.admission_test.rendered

# Pods that need no fix: admitted in every mode, and neither patched nor labelled.
cases := {
	"a GPU pod already right, in another namespace": {
		"request": t.review(t.binpack([t.gpu_container], {}), {"namespace": "team-b"}),
		"admitted": true,
	},
	"a pod asking for CPU only": {
		"request": t.pod({"containers": [t.container("main", t.requests(t.cpu))]}),
		"admitted": true,
	},
	"a rule-abiding pod with labels of its own": {
		"request": t.review(t.binpack([t.gpu_container], {}), {"metadata": {"labels": {"app": "x"}}}),
		"admitted": true,
	},
}

test_cases if t.all_decided(cases)

# mutate: the patch names the binpack scheduler and adds the GPU taint's toleration after the
# pod's own; the validating webhook admits the pod it makes, and a second call (the webhook may
# be reinvoked) fixes nothing more.
mutate_fixes := {
	"no scheduler, no tolerations": {"containers": [t.gpu_container]},
	"default scheduler, other tolerations": {
		"schedulerName": "default-scheduler", "containers": [t.container("main", t.limits(t.mig))],
		"tolerations": [{"key": "dedicated", "operator": "Exists"}],
	},
	"binpack scheduler, no tolerations": {"schedulerName": "gpu-binpack-scheduler", "containers": [t.gpu_container]},
}

test_mutate_fixes_a_gpu_pod_so_that_the_validating_webhook_admits_it if {
	unfixed := {name | some name, spec in mutate_fixes; not fixed_by_mutate(spec)}
	print("not fixed:", unfixed)
	count(unfixed) == 0
}

fixed_by_mutate(spec) if {
	c := {"request": t.pod(spec)}
	patch := t.mutation_patch(c, "mutate")
	count(patch) > 0
	fixed := t.patched(c, patch)
	fixed.request.object.spec.schedulerName == "gpu-binpack-scheduler"
	t.gpu_toleration in fixed.request.object.spec.tolerations
	own := object.get(spec, "tolerations", [])
	array.slice(fixed.request.object.spec.tolerations, 0, count(own)) == own
	t.admitted(c, t.validation(c, fixed, "mutate"))
	t.mutation_patch({"request": fixed}, "mutate") == []
}

# audit: the label joins the pod's own.
test_audit_label_joins_the_pods_labels if {
	c := {"request": t.review({"containers": [t.gpu_container]}, {"metadata": {"labels": {"app": "x"}}})}
	labels := t.patched(c, t.mutation_patch(c, "audit")).request.object.metadata.labels
	labels == {"app": "x", "gpu-platform.io/admission-audit": "violation"}
}

test_no_decision_for_a_malformed_review if {
	every review in [{"kind": "NotAReview"}, {"request": {"operation": "CREATE", "kind": {"group": "", "kind": "Pod"}}}, "just a string"] {
		not admission.review with input as review with data.gpuplatform.params as rendered.params.example
		not admission.mutation with input as review with data.gpuplatform.params as rendered.params.example
	}
}

test_no_decision_without_the_parameters if {
	request := t.pod({"containers": [t.gpu_container]})
	not admission.review with input as request
	not admission.review with input as request with data.gpuplatform.params as "not an object"
}
