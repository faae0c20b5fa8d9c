"""What the GpuRemediation component takes."""

from __future__ import annotations

from pydantic import Field

from ..base.model import PulledImages, section
from .settings import RemediationSettings


class GpuRemediationInputs(PulledImages):
    """Fault remediation, with the Prometheus it reads, what makes an XID fatal, the GPU nodes'
    taint and, for the drain, where GPUs are counted and which workloads go back to a queue."""

    remediation: RemediationSettings = section(RemediationSettings, switched=True)
    prometheus_url: str = Field(
        description="The Prometheus HTTP API it queries, as its pod reaches it (the "
                    "Monitoring component's Prometheus, or `monitoring.prometheusUrl`).")
    fatal_xid_codes: list[int] = Field(
        description="XID codes that take a GPU node out of service "
                    "(`monitoring.alerts.fatalXidCodes`: what GpuFatalXidError fires on).")
    gpu_taint_key: str = Field(
        description="The key of the GPU taint every GPU node carries: the nodes counted for "
                    "`maxShare`.")
    dra_driver: str | None = Field(
        default=None,
        description="On the DRA path, the driver whose claims say which pods hold a node's "
                    "GPUs; unset on the device plugin path.")
    team_namespaces: list[str] = Field(
        default_factory=list,
        description="The team namespaces: there a drained pod's Kueue workload goes back to "
                    "its queue whole.")
    workload_owners: dict[str, str] = Field(
        default_factory=dict,
        description="The kinds Kueue admits in team namespaces (`group/Kind`), with their API "
                    "resources: followed up from a pod to its Workload.")
