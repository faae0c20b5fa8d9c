"""Fault remediation as the declared Deployment runs it, and what it reads: its objects applied
(but the Deployment, whose passes the tests start themselves, one at a time), one pass of its
pod (cron_job_run, with --once), the real Prometheus scraping a DCGM exporter stand-in per GPU
node, as the platform's ServiceMonitor would, time compressed as prometheus_server.py says."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from components import gpu_remediation
from components.base import metrics_http
from components.base.gpu_faults import by_name
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.cron_job_run import cron_job_run
from tests.kit.cluster.declared_objects import apply_declared
from tests.kit.cluster.nodes_and_pods import gpu_uuid
from tests.kit.cluster.prometheus_server import PrometheusServer, scrape_target

GPUS_PER_NODE = 8
H100 = "NVIDIA H100 80GB HBM3"


def remediation_settings(settings: StackSettings, **changes) -> StackSettings:
    remediation = settings.remediation.model_copy(update={"mode": "drain", **changes})
    return settings.model_copy(update={"remediation": remediation})


def declared_remediation(settings: StackSettings) -> list[dict]:
    return gpu_remediation.remediation_objects(component_inputs(settings).remediation)


class FaultExporter:
    """Serves /metrics/<node> as the DCGM exporter would on each GPU node: each GPU's last XID
    (0 until one is set). A silenced node answers 503, as an exporter that is down."""

    def __init__(self):
        self.xids: dict[tuple[str, int], int] = {}
        self.silent: set[str] = set()
        self.lock = threading.Lock()
        self.server = metrics_http.serve(self.answer, "127.0.0.1")
        self.port = self.server.server_address[1]

    def answer(self, path: str) -> tuple[int, str]:
        node = path.rsplit("/", 1)[-1]
        with self.lock:
            silent = node in self.silent
        return (503, "") if silent else (200, self.metrics(node))

    def metrics(self, node: str) -> str:
        lines = ["# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
                 "# TYPE DCGM_FI_DEV_XID_ERRORS gauge"]
        with self.lock:
            for gpu in range(GPUS_PER_NODE):
                labels = (f'gpu="{gpu}",UUID="{gpu_uuid(node, gpu)}",device="nvidia{gpu}",'
                          f'modelName="{H100}",Hostname="{node}",'
                          f'DCGM_FI_DRIVER_VERSION="595.91.07"')
                lines.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} "
                             f"{self.xids.get((node, gpu), 0)}")
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Remediating:
    """Remediation as a stack declares it, applied, with Prometheus scraping the stand-in: what
    a test breaks a GPU with, waits for Prometheus to see, then runs a pass of."""

    cp: ControlPlane
    settings: StackSettings
    objects: list[dict]
    exporter: FaultExporter
    prometheus: PrometheusServer

    def set_xid(self, node: str, gpu: int, code: int) -> None:
        with self.exporter.lock:
            self.exporter.xids[(node, gpu)] = code

    def silence(self, node: str) -> None:
        with self.exporter.lock:
            self.exporter.silent.add(node)

    def faulty(self) -> set[str]:
        """The nodes Prometheus answers a fatal XID for, as a pass asks."""
        codes = self.settings.monitoring.alerts.fatal_xid_codes
        return {s["metric"]["node"]
                for s in self.prometheus.query(by_name("fatal-xid").node_expr(codes))}

    def wait_until_seen(self, node: str) -> None:
        wait_until(lambda: node in self.faulty(), f"Prometheus to see {node}'s fault",
                   timeout=30, interval=0.5)

    def wait_until_clear(self, node: str) -> None:
        wait_until(lambda: node not in self.faulty(), f"Prometheus to see {node} clear",
                   timeout=30, interval=0.5)

    def run(self) -> str:
        remediation = self.settings.remediation
        return cron_job_run(self.cp, self.objects, remediation.name, remediation.namespace,
                            "remediation", "--once", f"--prometheus-url={self.prometheus.url}")


@contextmanager
def remediating(cp: ControlPlane, settings: StackSettings, nodes: list[str]
                ) -> Iterator[Remediating]:
    """Remediation of `settings` applied on `cp` (its Deployment left out), and Prometheus
    scraping a stand-in for each of `nodes`, stopped when done."""
    objects = declared_remediation(settings)
    apply_declared(cp.admin, [o for o in objects if o["kind"] != "Deployment"])
    exporter = FaultExporter()
    try:
        prometheus = PrometheusServer(cp, [scrape_target(exporter.port, node,
                                                         f"/metrics/{node}") for node in nodes],
                                      [])
        try:
            yield Remediating(cp, settings, objects, exporter, prometheus)
        finally:
            prometheus.process.stop()
    finally:
        exporter.stop()
