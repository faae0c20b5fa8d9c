# OPA's own API authorization (opa run --authentication=token --authorization=basic).
#
# Loaded at OPA's start from a file, with its data (data.opa_server): the paths of the admission
# decisions. OPA loads every policy and data document from files when it starts, so nobody may
# read or write them through the API.
package system.authz

default allow := false

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
