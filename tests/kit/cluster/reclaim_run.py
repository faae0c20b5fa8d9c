"""Idle reclaim as the declared CronJob runs it, and what it reads: one run of the CronJob's pod
(the script from the declared ConfigMap, with the ServiceAccount's token, as the kubelet would run
it), the real Prometheus (built from the module of the suite's promtool) evaluating the usage
rules, and an exporter stand-in that serves GPUs as the pinned DCGM exporter labels them.

Compressed in time: the exporter is scraped every second, the usage rules evaluate every 2 s
instead of every minute, and `reclaim.idleFor` is set without validation to 40 s (the settings
allow 10 minutes or more). The rules and the query are otherwise what the stack deploys."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from components import gpu_reclaim
from components.base import metrics_http
from components.base.manifests import MODULE_RUN_CONFIG_FILE
from components.monitoring import usage
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.cron_job_run import cron_job_run
from tests.kit.cluster.declared_objects import apply_declared, find
from tests.kit.cluster.prometheus_server import PrometheusServer, scrape_target
from tests.kit.harness import monitoring_of

NODE = "r-gpu-1"
IDLE_FOR = "40s"
H100 = "NVIDIA H100 80GB HBM3"


def reclaim_settings(settings, **changes):
    """The example stack with reclaim on for the team research and the namespace serving, both
    on the stack-wide settings (no policy of their own)."""
    reclaim = settings.reclaim.model_copy(update={
        "enabled": True, "teams": ["research"], "namespaces": ["serving"], "policies": [],
        "idle_for": IDLE_FOR, "max_evictions_per_run": 2, **changes})
    return settings.model_copy(update={"reclaim": reclaim})


def declared_reclaim(settings) -> list[dict]:
    return gpu_reclaim.reclaim_objects(component_inputs(settings).reclaim)


class ExporterStandIn:
    """Serves /metrics as the DCGM exporter would for one node: a GPU per pod, each with its
    engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0..1) and utilization (percent)."""

    def __init__(self):
        self.activity: dict[tuple[str, str], float] = {}
        self.pulsing: set[tuple[str, str]] = set()
        self.lock = threading.Lock()
        self.server = metrics_http.serve(lambda _path: (200, self.metrics()), "127.0.0.1")
        self.port = self.server.server_address[1]

    def set(self, namespace: str, name: str, activity: float) -> None:
        with self.lock:
            self.activity[(namespace, name)] = activity

    def pulse(self, namespace: str, name: str) -> None:
        """The pod's GPU works for 3 s of every 20 s (otherwise idle): never idle for a whole
        window of 40 s."""
        with self.lock:
            self.pulsing.add((namespace, name))

    def metrics(self) -> str:
        working = time.time() % 20 < 3
        with self.lock:
            gpus = sorted((key, 0.6 if key in self.pulsing and working else activity)
                          for key, activity in self.activity.items())
        lines = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": ["# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio "
                                                   "of time the graphics engine is active.",
                                                   "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge"],
                 "DCGM_FI_DEV_GPU_UTIL": ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
                                          "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]}
        for index, ((namespace, name), activity) in enumerate(gpus):
            labels = (f'gpu="{index}",UUID="GPU-{NODE}-{index}",'
                      f'pci_bus_id="00000000:{index + 16:02X}:00.0",device="nvidia{index}",'
                      f'modelName="{H100}",Hostname="{NODE}",'
                      f'DCGM_FI_DRIVER_VERSION="595.91.07",container="main",'
                      f'namespace="{namespace}",pod="{name}"')
            lines["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append(
                f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {activity:.6f}")
            lines["DCGM_FI_DEV_GPU_UTIL"].append(
                f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {round(activity * 100)}")
        return "\n".join(line for block in lines.values() for line in block) + "\n"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus(PrometheusServer):
    """The real Prometheus, scraping the stand-in as the platform's ServiceMonitor would (its
    job name, and `node` from the exporter pod's node) and evaluating the usage rules."""

    def __init__(self, cp: ControlPlane, settings, exporter_port: int):
        group = usage.usage_group(monitoring_of(settings))
        group["interval"] = "2s"        # compressed in time (the module's docstring)
        super().__init__(cp, [scrape_target(exporter_port, NODE)], [group])

    def idle(self, query: str) -> set[tuple[str, str]]:
        return {(s["metric"]["namespace"], s["metric"]["pod"]) for s in self.query(query)}


def reclaim_run(cp: ControlPlane, objects: list[dict], settings, prometheus: Prometheus) -> str:
    """One run of the declared CronJob's pod, as the kubelet would run it: its command with the
    declared ConfigMap's files, the ServiceAccount's token, and Prometheus here rather than at
    its Service."""
    reclaim = settings.reclaim
    return cron_job_run(cp, objects, reclaim.name, reclaim.namespace, "reclaim",
                        f"--prometheus-url={prometheus.url}")


@dataclass
class Reclaiming:
    """Reclaim as a stack declares it, applied, with Prometheus scraping an exporter stand-in:
    what a test sets idle, waits for Prometheus to answer, then runs."""
    cp: ControlPlane
    settings: StackSettings
    objects: list[dict]
    exporter: ExporterStandIn
    prometheus: Prometheus

    def set_idle(self, pods: set[tuple[str, str]]) -> None:
        """The pods' GPUs at no activity, until Prometheus answers them idle."""
        for namespace, pod in pods:
            self.exporter.set(namespace, pod, 0.0)
        config = json.loads(find(self.objects, "ConfigMap", self.settings.reclaim.name)
                            ["data"][MODULE_RUN_CONFIG_FILE])
        wait_until(lambda: pods <= self.prometheus.idle(config["query"]),
                   "Prometheus to answer the idle pods", timeout=120, interval=2)

    def run(self) -> str:
        return reclaim_run(self.cp, self.objects, self.settings, self.prometheus)


@contextmanager
def reclaiming(cp: ControlPlane, settings: StackSettings) -> Iterator[Reclaiming]:
    """Reclaim of `settings` applied on `cp`, and its Prometheus, stopped when done."""
    objects = declared_reclaim(settings)
    apply_declared(cp.admin, objects)
    exporter = ExporterStandIn()
    try:
        prometheus = Prometheus(cp, settings, exporter.port)
        try:
            yield Reclaiming(cp, settings, objects, exporter, prometheus)
        finally:
            prometheus.process.stop()
    finally:
        exporter.stop()
