"""The GPU platform's Grafana dashboard: who uses how many GPUs and how hard, and where there
is room.

Joins, as the pinned exporters label their series:
- DCGM exporter series carry `namespace`, `pod` and `container` of the pod a GPU is allocated to
  (the ServiceMonitor honours them over the exporter pod's own), `gpu`, `UUID`, `modelName`, and
  `node` (added by the ServiceMonitor from the exporter pod's node).
- kube-state-metrics names extended resources with non-alphanumerics replaced by `_`
  (nvidia.com/gpu -> `nvidia_com_gpu`); requests carry `namespace`, `pod`, `node`.
"""

from __future__ import annotations

import re

from .settings import GPU_RESOURCE

UID = "gpu-platform-gpus"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def ksm_resource(name: str) -> str:
    """The `resource` label kube-state-metrics gives an extended resource."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def queries() -> dict[str, str]:
    """Every PromQL expression of the dashboard, by panel key."""
    gpu = ksm_resource(GPU_RESOURCE)
    # Requests of pods that hold their GPUs now: bound to a node and running.
    allocated = (f'(kube_pod_container_resource_requests{{resource="{gpu}", node!=""}} '
                 f'* on (namespace, pod) group_left () '
                 f'max by (namespace, pod) (kube_pod_status_phase{{phase="Running"}} == 1))')
    allocatable = f'kube_node_status_allocatable{{resource="{gpu}"}}'
    ns_filter = 'namespace=~"$namespace"'
    return {
        "allocated_total": f"sum({allocated})",
        "allocatable_total": f"sum({allocatable})",
        "allocated_by_namespace": f"sum by (namespace) ({allocated})",
        "used_by_namespace": f'count by (namespace) (DCGM_FI_DEV_GPU_UTIL{{{ns_filter}, pod!=""}})',
        "util_by_namespace": f'avg by (namespace) (DCGM_FI_DEV_GPU_UTIL{{{ns_filter}, pod!=""}})',
        "allocated_by_pod": f"sum by (namespace, pod) ({allocated})",
        "util_by_pod": f'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{{ns_filter}, pod!=""}})',
        "fb_used_by_pod": f'sum by (namespace, pod) (DCGM_FI_DEV_FB_USED{{{ns_filter}, pod!=""}})',
        "util_per_gpu": 'DCGM_FI_DEV_GPU_UTIL{node=~"$node"}',
        "fb_used_ratio_per_gpu": ('DCGM_FI_DEV_FB_USED{node=~"$node"} / '
                                  '(DCGM_FI_DEV_FB_USED{node=~"$node"} + '
                                  'DCGM_FI_DEV_FB_FREE{node=~"$node"})'),
        "temperature_per_gpu": 'DCGM_FI_DEV_GPU_TEMP{node=~"$node"}',
        "power_per_gpu": 'DCGM_FI_DEV_POWER_USAGE{node=~"$node"}',
        # Nodes with no GPU pods have no request series: count them as zero allocated.
        "free_by_node": (f'sum by (node) ({allocatable}) - '
                         f'(sum by (node) ({allocated}) or sum by (node) ({allocatable}) * 0)'),
    }


def _panel(key: str, title: str, kind: str, grid: tuple[int, int, int, int], legend: str,
           unit: str = "short", description: str = "") -> dict:
    x, y, w, h = grid
    panel = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": "A", "datasource": DATASOURCE, "expr": queries()[key],
                     "legendFormat": legend, "instant": kind in ("table", "bargauge", "stat")}],
    }
    return panel


def _variable(name: str, label: str, query: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"},
            "allValue": ".*", "sort": 1}


def dashboard() -> dict:
    panels = [
        _panel("allocated_total", "GPUs allocated", "stat", (0, 0, 6, 4), "allocated",
               description="GPUs requested by running pods, cluster-wide."),
        _panel("allocatable_total", "GPUs allocatable", "stat", (6, 0, 6, 4), "allocatable",
               description="GPUs the nodes advertise to the scheduler."),
        _panel("free_by_node", "Free GPUs per node", "bargauge", (12, 0, 12, 8), "{{node}}",
               description="Allocatable minus allocated: the largest GPU pod each node can "
                           "take now."),
        _panel("allocated_by_namespace", "GPUs allocated by namespace", "timeseries",
               (0, 8, 12, 8), "{{namespace}}"),
        _panel("used_by_namespace", "GPUs in use by namespace", "timeseries", (12, 8, 12, 8),
               "{{namespace}}", description="GPUs the DCGM exporter sees attached to pods."),
        _panel("util_by_namespace", "GPU utilization by namespace", "timeseries",
               (0, 16, 12, 8), "{{namespace}}", unit="percent"),
        _panel("allocated_by_pod", "GPUs allocated by pod", "table", (12, 16, 12, 8),
               "{{namespace}}/{{pod}}"),
        _panel("util_by_pod", "GPU utilization by pod", "timeseries", (0, 24, 12, 8),
               "{{namespace}}/{{pod}}", unit="percent"),
        _panel("fb_used_by_pod", "GPU memory used by pod", "timeseries", (12, 24, 12, 8),
               "{{namespace}}/{{pod}}", unit="decmbytes"),
        _panel("util_per_gpu", "Utilization per GPU", "timeseries", (0, 32, 12, 8),
               "{{node}} gpu{{gpu}} {{modelName}}", unit="percent"),
        _panel("fb_used_ratio_per_gpu", "Memory used per GPU", "timeseries", (12, 32, 12, 8),
               "{{node}} gpu{{gpu}}", unit="percentunit"),
        _panel("temperature_per_gpu", "Temperature per GPU", "timeseries", (0, 40, 12, 8),
               "{{node}} gpu{{gpu}}", unit="celsius"),
        _panel("power_per_gpu", "Power per GPU", "timeseries", (12, 40, 12, 8),
               "{{node}} gpu{{gpu}}", unit="watt"),
    ]
    for panel_id, panel in enumerate(panels, start=1):
        panel["id"] = panel_id
    return {
        "uid": UID,
        "title": "GPU platform: allocation, usage and free capacity",
        "tags": ["gpu", "gpu-platform"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "editable": False,
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {"text": "Prometheus", "value": "prometheus"}},
            _variable("namespace", "Namespace", "label_values(DCGM_FI_DEV_GPU_UTIL, namespace)"),
            _variable("node", "Node", "label_values(DCGM_FI_DEV_GPU_UTIL, node)"),
        ]},
        "panels": panels,
    }
