package system.authz_test

import data.system.authz

server := {
	"kube_mgmt_token": "0123456789abcdef0123456789abcdef",
	"admission_decision_paths": [
		["v0", "data", "gpuplatform", "admission", "review"],
		["v0", "data", "gpuplatform", "admission", "mutation"],
	],
}

test_kube_mgmt_token_may_write_policies if {
	authz.allow with input as {"identity": server.kube_mgmt_token, "method": "PUT", "path": ["v1", "policies", "x"]}
		with data.opa_server as server
}

test_anonymous_may_ask_for_the_admission_decisions if {
	every path in server.admission_decision_paths {
		authz.allow with input as {"method": "POST", "path": path}
			with data.opa_server as server
	}
}

test_anonymous_may_not_ask_for_other_rules if {
	not authz.allow with input as {"method": "POST", "path": ["v0", "data", "gpuplatform", "admission", "params"]}
		with data.opa_server as server
}

test_anonymous_may_not_write_policies if {
	not authz.allow with input as {"method": "PUT", "path": ["v1", "policies", "x"]}
		with data.opa_server as server
}

test_anonymous_may_not_read_data if {
	not authz.allow with input as {"method": "GET", "path": ["v1", "data"]}
		with data.opa_server as server
}

test_wrong_token_is_refused if {
	not authz.allow with input as {"identity": "guess", "method": "PUT", "path": ["v1", "data", "x"]}
		with data.opa_server as server
}

test_short_token_is_never_accepted if {
	not authz.allow with input as {"identity": "", "method": "PUT", "path": ["v1", "data", "x"]}
		with data.opa_server as {"kube_mgmt_token": "", "admission_decision_paths": []}
}

test_probes_may_read_health_and_metrics if {
	authz.allow with input as {"method": "GET", "path": ["health", "ready"]}
		with data.opa_server as server
	authz.allow with input as {"method": "GET", "path": ["metrics"]}
		with data.opa_server as server
}
