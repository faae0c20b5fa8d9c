package system.authz_test

import data.system.authz

server := {"admission_decision_paths": [
	["v0", "data", "gpuplatform", "admission", "review"],
	["v0", "data", "gpuplatform", "admission", "mutation"],
	["v0", "data", "gpuplatform", "admission", "templates"],
]}

test_anonymous_may_ask_for_the_admission_decisions if {
	every path in server.admission_decision_paths {
		authz.allow with input as {"method": "POST", "path": path}
			with data.opa_server as server
	}
}

test_anonymous_may_not_ask_for_other_rules if {
	not authz.allow with input as {"method": "POST", "path": ["v0", "data", "gpuplatform", "params"]}
		with data.opa_server as server
}

test_nobody_may_write_policies_or_data if {
	not authz.allow with input as {"method": "PUT", "path": ["v1", "policies", "x"]}
		with data.opa_server as server
	not authz.allow with input as {"identity": "any-token", "method": "PUT", "path": ["v1", "data", "x"]}
		with data.opa_server as server
}

test_nobody_may_read_data_or_policies if {
	not authz.allow with input as {"method": "GET", "path": ["v1", "data"]}
		with data.opa_server as server
	not authz.allow with input as {"method": "GET", "path": ["v1", "policies"]}
		with data.opa_server as server
}

test_probes_may_read_health_and_metrics if {
	authz.allow with input as {"method": "GET", "path": ["health", "ready"]}
		with data.opa_server as server
	authz.allow with input as {"method": "GET", "path": ["metrics"]}
		with data.opa_server as server
}
