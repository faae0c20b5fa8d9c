package system.health_test

import data.system.health

test_not_ready_before_the_policy_is_loaded if {
	not health.ready
}

test_ready_once_parameters_are_loaded if {
	health.ready with data.gpuplatform.admission.params as {"schedulerName": "gpu-binpack-scheduler"}
}
