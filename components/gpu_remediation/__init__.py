"""Fault remediation: a Deployment that quarantines GPU nodes whose GPUs show a fault that takes
them out of service, drains them on `drain`, and returns them once labelled repaired."""

from .component import GpuRemediation
from .inputs import GpuRemediationInputs
from .manifests import (
           REASON_ANNOTATION,
           REPAIRED_LABEL,
           SINCE_ANNOTATION,
           TAINT_KEY,
           actor_config,
           remediation_objects,
)

__all__ = ["REASON_ANNOTATION", "REPAIRED_LABEL", "SINCE_ANNOTATION", "TAINT_KEY",
           "GpuRemediation", "GpuRemediationInputs", "actor_config", "remediation_objects"]
