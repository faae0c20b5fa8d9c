"""Monitoring: kube-prometheus-stack, the DCGM exporter's ServiceMonitor and the GPU dashboard."""

import pulumi
import pulumi_random as random

from ..base import charts, manifests
from ..base.component import Component, declare
from ..base.validation import Subject
from . import rules
from .inputs import MonitoringInputs
from .monitors import (
    COMPONENT,
    component_monitors,
    dashboard_config_map,
    dcgm_service_monitor,
    grafana_admin_secret,
)
from .values import CHART, chart_values, check_chart_values, grafana_service
from .zz_generated_args import MonitoringArgs


class Monitoring(Component[MonitoringInputs]):
    """kube-prometheus-stack first; then, as its CRDs and Grafana's sidecar come from the chart,
    the scrape configuration of the DCGM exporter and of each component, the GPU dashboard, and
    the GPU recording rules and alerts, each component's among them."""

    grafana_url: str
    "Grafana's address inside the cluster."
    grafana_port_forward: str
    "The kubectl command that opens Grafana on localhost:3000, on the stack's context."
    grafana_admin_password: pulumi.Output[str] | None = None
    "Grafana's admin password (a secret); none for an existing stack's Grafana."

    def __init__(self, name: str, args: MonitoringArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _check(self, inputs: MonitoringInputs, subject: Subject) -> None:
        check_chart_values(inputs, subject)

    def _declare(self, name: str, inputs: MonitoringInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        mon = inputs.monitoring
        # What joins the stack waits for its CRDs and Grafana's sidecar: the chart's, when the
        # program installs it; an existing stack has them already.
        stack = [self._install_chart(inputs)] if mon.stack == "install" else []
        self.service_monitor = declare(dcgm_service_monitor(inputs), self, stack)
        self.dashboard = declare(dashboard_config_map(inputs), self, stack)
        self.rules = declare(rules.prometheus_rule(inputs), self, stack)
        self.component_monitors = [declare(monitor, self, stack)
                                   for monitor in component_monitors(inputs)]

        service, port = grafana_service(inputs)
        self.grafana_url = f"http://{service}.{mon.namespace}.svc:{port}"
        self.grafana_port_forward = inputs.cluster.kubectl(
            "-n", mon.namespace, "port-forward", f"svc/{service}", f"3000:{port}")
        self.register_outputs({"grafanaUrl": self.grafana_url,
                               "grafanaPortForward": self.grafana_port_forward,
                               "grafanaAdminPassword": self.grafana_admin_password})

    def _install_chart(self, inputs: MonitoringInputs) -> pulumi.Resource:
        """kube-prometheus-stack in its namespace, with Grafana's admin Secret."""
        mon = inputs.monitoring
        namespace = declare(manifests.namespace(mon.namespace, "privileged", COMPONENT), self)
        if mon.grafana.admin_password:
            password = pulumi.Output.secret(mon.grafana.admin_password)
        else:
            password = random.RandomPassword(
                self.child_name("grafana-admin"), length=32, special=False,
                opts=pulumi.ResourceOptions(parent=self)).result
        admin = declare(grafana_admin_secret(inputs, password), self, [namespace])
        self.grafana_admin_password = password
        self.release = charts.release(
            mon.release_name, chart=CHART, version=mon.chart_version, repository=mon.repository,
            namespace=mon.namespace,
            values=charts.values_input(chart_values(inputs), inputs.secret_values),
            parent=self, protection=mon.protection, chart_path=mon.chart_path,
            depends_on=[namespace, admin])
        return self.release
