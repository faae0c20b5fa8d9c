package system.health_test

import data.system.health

test_not_ready_without_the_admission_policy if {
	not health.ready
}

test_ready_once_the_decision_is_defined if {
	health.ready with data.gpuplatform.admission.review as {"response": {"uid": "readiness"}}
}
