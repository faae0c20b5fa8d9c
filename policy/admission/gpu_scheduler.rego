# Admission policy: a pod that asks for a GPU must be scheduled by the binpack scheduler.
#
# The webhook sends only pod CREATE requests that mention a GPU resource (matchConditions); the
# policy checks again so that it is correct on its own. Its parameters are OPA data, loaded by
# kube-mgmt from the ConfigMap gpu-platform-admission-params (key params.json) into
# data.<namespace>.<configmap>.<key>; the namespace is a stack setting, so the policy finds the
# document by ConfigMap name and key.
package gpuplatform.admission

params_documents contains doc if {
	some namespace
	doc := data[namespace]["gpu-platform-admission-params"]["params.json"]
}

# Undefined unless exactly one parameter document is loaded: the decision is then undefined too,
# and the API server applies the webhook's failure policy instead of guessing.
params := doc if {
	count(params_documents) == 1
	some doc in params_documents
}

# The decision the webhook asks for: a complete admission.k8s.io/v1 AdmissionReview.
review := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": response,
} if {
	is_object(params)
	is_string(input.request.uid)
}

response := {"uid": input.request.uid, "allowed": true} if count(deny) == 0

response := {
	"uid": input.request.uid,
	"allowed": false,
	"status": {"code": 403, "reason": "Forbidden", "message": concat("; ", sort(deny))},
} if count(deny) > 0

deny contains msg if {
	is_pod_create
	not exempt
	spec := input.request.object.spec
	scheduler := object.get(spec, "schedulerName", "default-scheduler")
	scheduler != params.schedulerName
	some field, label in container_fields
	some container in array_at(spec, field)
	resources := gpu_resources(container)
	count(resources) > 0
	msg := sprintf(
		"pod %q: %s %q requests %s but spec.schedulerName is %q; GPU pods must set spec.schedulerName: %s",
		[pod_name, label, object.get(container, "name", ""), concat(", ", sort(resources)), scheduler, params.schedulerName],
	)
}

container_fields := {
	"containers": "container",
	"initContainers": "init container",
	"ephemeralContainers": "ephemeral container",
}

is_pod_create if {
	input.request.operation == "CREATE"
	input.request.kind.group == ""
	input.request.kind.kind == "Pod"
	is_object(input.request.object.spec)
}

exempt if input.request.namespace in params.exemptNamespaces

pod_name := sprintf("%s/%s", [input.request.namespace, name]) if {
	name := input.request.object.metadata.name
	name != ""
} else := sprintf("%s/%s*", [input.request.namespace, input.request.object.metadata.generateName])

array_at(obj, key) := value if {
	value := obj[key]
	is_array(value)
} else := []

# The guarded resources a container names in its requests or limits.
gpu_resources(container) := {name |
	is_object(container)
	some section in ["requests", "limits"]
	some name, _ in container.resources[section]
	guarded(name)
}

guarded(name) if {
	some pattern in params.gpuResourceNames
	not endswith(pattern, "*")
	name == pattern
}

guarded(name) if {
	some pattern in params.gpuResourceNames
	endswith(pattern, "*")
	startswith(name, trim_suffix(pattern, "*"))
}
