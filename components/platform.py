"""The whole GPU platform: five components wired by the dependencies of the design."""

from __future__ import annotations

from typing import Any, Mapping

import pulumi
from pulumi.runtime import config as runtime_config

from . import gpu_operator, monitoring
from .binpack_scheduler import BinpackScheduler
from .gpu_nodes import GpuNodes
from .gpu_operator import GpuOperator
from .monitoring import Monitoring
from .opa_admission import OpaAdmission
from .settings import CONFIG_NAMESPACE, StackSettings, load_settings


def stack_config() -> dict[str, Any]:
    """The stack's `gpu-platform:` config, keys without the prefix.

    Every key is read, not only known ones, so that a misspelt setting is reported rather than
    silently ignored. The engine hands config over either in the PULUMI_CONFIG environment or
    through the runtime's config map; both are read.
    """
    prefix = f"{CONFIG_NAMESPACE}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    return {key[len(prefix):]: runtime_config.get_config(key)
            for key in sorted(keys) if key.startswith(prefix)}


class GpuPlatform(pulumi.ComponentResource):
    def __init__(self, name: str, settings: StackSettings,
                 opts: pulumi.ResourceOptions | None = None):
        # Chart values are merged (and refused extra values raised) before anything is
        # registered, so a bad stack leaves the run with nothing declared.
        operator_values = gpu_operator.chart_values(settings)
        monitoring_values = monitoring.chart_values(settings)
        super().__init__("gpu-platform:index:GpuPlatform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # Taint the nodes before the operator's DaemonSets and the first GPU pods arrive.
        self.gpu_nodes = GpuNodes("gpu-nodes", settings, opts=child)
        self.gpu_operator = GpuOperator("gpu-operator", settings, operator_values,
                                        after=[self.gpu_nodes], opts=child)
        self.scheduler = BinpackScheduler("binpack-scheduler", settings, opts=child)
        # Never force GPU pods onto a scheduler that is not running.
        self.admission = OpaAdmission("opa-admission", settings, after=[self.scheduler],
                                      opts=child)
        # The DCGM exporter Service the ServiceMonitor selects is created by the operator.
        self.monitoring = Monitoring("monitoring", settings, monitoring_values,
                                     after=[self.gpu_operator], opts=child)

        self.outputs = {
            "schedulerName": self.scheduler.scheduler_name,
            "webhookName": self.admission.webhook_name,
            "caCertificate": self.admission.ca_certificate,
            "grafanaUrl": self.monitoring.grafana_url,
            "grafanaPortForward": self.monitoring.grafana_port_forward,
            "grafanaAdminPassword": self.monitoring.grafana_admin_password,
            "gpuNodes": self.gpu_nodes.node_names,
        }
        self.register_outputs(self.outputs)


def deploy(config: Mapping[str, Any]) -> GpuPlatform:
    """Validate the settings, then declare the platform and export its outputs."""
    platform = GpuPlatform("gpu-platform", load_settings(config))
    for key, value in platform.outputs.items():
        pulumi.export(key, value)
    return platform
