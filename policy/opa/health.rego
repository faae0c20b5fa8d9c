# Readiness of an OPA pod (GET /health/ready on the diagnostic port).
#
# A pod is ready exactly when it can decide: the admission decision is defined for a request.
# OPA loads the policy and its parameters from files before it serves anything, so a running
# OPA whose files loaded is ready; one that answered without them would make the API server
# apply the webhook's failure policy to every GPU pod.
package system.health

default ready := false

ready if data.gpuplatform.admission.review.response.uid == "readiness"
	with input as {"request": {"uid": "readiness"}}

default live := true
