"""Monitoring: kube-prometheus-stack, the scraping of the DCGM exporter, the GPU recording rules
and alerts, and the GPU dashboard; with them each component's alerts and scrapes (its mixin,
made in its own package), which it collects without knowing the component."""

from .component import Monitoring
from .inputs import MonitoringInputs
from .monitors import (
    component_monitors,
    dashboard_config_map,
    dcgm_service_monitor,
    grafana_admin_secret,
)
from .values import chart_values, check_chart_values

__all__ = ["Monitoring", "MonitoringInputs", "chart_values", "check_chart_values",
           "component_monitors", "dashboard_config_map", "dcgm_service_monitor",
           "grafana_admin_secret"]
