"""The GPU Operator's monitoring: its namespace's critical-pods quota (its GPU health is the
DCGM exporter's, which Monitoring scrapes)."""

from ..base.mixin import AlertSettings, Mixin
from .inputs import GpuOperatorInputs


def mixin(inputs: GpuOperatorInputs, alerts: AlertSettings, _component: object = None) -> Mixin:
    return Mixin(critical_pods_namespaces=[inputs.gpu_operator.namespace])
