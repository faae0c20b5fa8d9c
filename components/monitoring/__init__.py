"""Monitoring: kube-prometheus-stack, the scraping of the DCGM exporter, OPA, the binpack
scheduler and Kueue, the GPU recording rules and alerts, and the GPU dashboard."""

from .component import Monitoring
from .inputs import MonitoringInputs
from .monitors import (
    dashboard_config_map,
    dcgm_service_monitor,
    grafana_admin_secret,
    scheduler_service_monitor,
)
from .values import chart_values, check_chart_values

__all__ = ["Monitoring", "MonitoringInputs", "chart_values", "check_chart_values",
           "dashboard_config_map", "dcgm_service_monitor", "grafana_admin_secret",
           "scheduler_service_monitor"]
