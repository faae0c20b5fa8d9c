# Readiness of an OPA pod (GET /health/ready on the diagnostic port).
#
# A pod is ready once kube-mgmt has loaded the admission policy and its parameters. Before that
# the admission decision is undefined, and a pod that took traffic would make the API server
# apply the webhook's failure policy to every GPU pod.
package system.health

default ready := false

ready if is_string(data.gpuplatform.admission.params.schedulerName)

default live := true
