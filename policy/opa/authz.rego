# OPA's own API authorization (opa run --authentication=token --authorization=basic).
#
# Loaded at OPA's start from a file, with its data (data.opa_server) from the pod's Secret:
# the token kube-mgmt presents, and the paths of the admission decisions.
package system.authz

default allow := false

# kube-mgmt holds the token: only it may read or write policies and data.
allow if {
	is_string(data.opa_server.kube_mgmt_token)
	count(data.opa_server.kube_mgmt_token) >= 32
	input.identity == data.opa_server.kube_mgmt_token
}

# The API server calls anonymously, and may ask for the admission decisions and nothing else.
allow if {
	input.method == "POST"
	input.path in data.opa_server.admission_decision_paths
}

# Kubelet probes and Prometheus read health and metrics anonymously; neither reveals policy or
# data.
allow if {
	input.method == "GET"
	input.path[0] in {"health", "metrics"}
}
