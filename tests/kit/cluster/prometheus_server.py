"""The real Prometheus (built from the module of the suite's promtool), scraping stand-ins of the
exporters as the platform's ServiceMonitors would: the DCGM exporter's job name, and each
target's `node` as the monitor takes it from the exporter pod's node. Compressed in time: it
scrapes every second and evaluates rules every 2 s."""

from __future__ import annotations

import requests
import yaml

from components.base.gpu_faults import DCGM_JOB
from tests.kit import tools
from tests.kit.cluster.controlplane import ControlPlane, free_port, wait_until


def scrape_target(port: int, node: str, path: str = "/metrics") -> dict:
    """A DCGM exporter stand-in on `port` serving `node`'s GPUs at `path`."""
    return {"targets": [f"127.0.0.1:{port}"],
            "labels": {"node": node, "__metrics_path__": path}}


class PrometheusServer:
    def __init__(self, cp: ControlPlane, targets: list[dict], rule_groups: list[dict]):
        directory = cp.dir / "prometheus"
        rules = cp.write("prometheus/rules.yaml", yaml.safe_dump({"groups": rule_groups}))
        config = cp.write("prometheus/prometheus.yaml", yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "2s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": DCGM_JOB, "static_configs": targets}]}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = cp.start_process("prometheus", [
            str(tools.prometheus()), f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}"])
        wait_until(self.ready, "Prometheus to be ready", timeout=60, explain=self.process.tail)

    def ready(self) -> bool:
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def query(self, query: str) -> list[dict]:
        """The instant vector Prometheus answers now."""
        answer = requests.get(f"{self.url}/api/v1/query", params={"query": query},
                              timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]
