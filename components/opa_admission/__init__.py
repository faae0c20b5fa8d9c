"""Admission: OPA behind the webhooks that keep every GPU, and every place on a GPU node,
behind the binpack scheduler. The policy itself is in policy/admission."""

from .component import OpaAdmission
from .inputs import OpaAdmissionInputs
from .policy import (
    PARAMS_KEY,
    PARAMS_ROOT,
    POLICY_CONFIGMAP,
    POLICY_DIR,
    POLICY_MOUNT,
    SERVER_DATA_KEY,
    SERVER_DATA_ROOT,
    SERVER_POLICY_CONFIGMAP,
    policy_files,
    policy_params,
    rego_files,
)
from .server import (
    DIAGNOSTIC_PORT,
    TLS_SECRET,
    deployment,
    generation,
    generation_name,
    opa_args,
    policy_config_maps,
    service,
    service_account,
    service_dns_names,
)
from .webhooks import REACHABILITY_PROBE, mutating_webhook_configuration, webhook_configuration

__all__ = ["DIAGNOSTIC_PORT", "OpaAdmission", "OpaAdmissionInputs", "PARAMS_KEY", "PARAMS_ROOT",
           "POLICY_CONFIGMAP", "POLICY_DIR", "POLICY_MOUNT", "REACHABILITY_PROBE",
           "SERVER_DATA_KEY", "SERVER_DATA_ROOT", "SERVER_POLICY_CONFIGMAP", "TLS_SECRET",
           "deployment", "generation", "generation_name", "mutating_webhook_configuration",
           "opa_args", "policy_config_maps", "policy_files", "policy_params", "rego_files",
           "service", "service_account", "service_dns_names", "webhook_configuration"]
