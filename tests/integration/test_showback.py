"""A month's showback report from the real Prometheus (built from the module of the suite's
promtool, the version the stack deploys): a month of series shaped as the DCGM exporter and
kube-state-metrics export them, written as TSDB blocks by promtool, the platform's usage rules
evaluated over the month by promtool's rule backfill (a layer at a time: backfilled rules do not
see each other's output), then `python -m showback --month` against that Prometheus. The CSV is
held to GPU-hours and costs counted by hand from the scenario, within 1%."""

from __future__ import annotations

import csv
import io
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import yaml

from components.monitoring import usage
from components.platform.config import load_settings
from showback import report
from tests.kit import tools
from tests.kit.cluster.controlplane import free_port, wait_until
from tests.kit.harness import monitoring_of
from tests.kit.stacks import raw, with_changes
from tests.unit.test_gpu_usage_rules import (
    A100,
    DEVICE_PLUGIN,
    H100,
    PROFILING,
    TEAMS,
    UTILIZATION,
    exporter,
)

MONTH_START = datetime(2026, 10, 1, tzinfo=UTC)
MONTH_END = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 31 * 24
# The exporter is scraped once a minute, 17 s past it: samples fall between the rules' minutes.
SCRAPE_OFFSET = 17
# Blocks as long as the data allows: the month whole, the rules' output a week a block (a query
# of theirs may span at most 11,000 minute steps); promtool's 2-hour default makes thousands.
MONTH_BLOCK, RULES_BLOCK = "768h", "168h"
SPOT = {"karpenter.sh/capacity-type": "spot"}
RESERVED = {"eks.amazonaws.com/nodegroup": "a100-reserved"}
PRICES = {"pricePerGpuHour": {H100: 2.5}, "nodeGroupPrices": [
    {"nodeSelector": SPOT, "pricePerGpuHour": {H100: 1.1}},
    {"nodeSelector": RESERVED, "pricePerGpuHour": {A100: 1.5}}]}
SETTINGS = load_settings(raw(with_changes(teams=TEAMS, monitoring={"usage": PRICES})))

# The month, counted by hand. research: `train` holds two H100s of an on-demand node (2.5 an
# hour) all month, busy from midnight to noon each day. research-batch: `sweep` holds an H100 of
# a spot node (1.1) for ten days from 5 October 12:00:15 (between two samples), idle. vision:
# `notebook` holds an A100 of a reserved node (1.5; an exporter without the profiling metric,
# utilization only) all month, busy one hour a day. A free H100 of the on-demand node counts for
# no one.
TRAIN = {"allocated": 2 * HOURS, "used": 2 * 12 * 31, "price": 2.5}
SWEEP = {"allocated": 10 * 24, "used": 0, "price": 1.1}
NOTEBOOK = {"allocated": HOURS, "used": 31, "price": 1.5}
EXPECTED = {
    "research": {"GPU-hours allocated": TRAIN["allocated"] + SWEEP["allocated"],
                 "GPU-hours used": TRAIN["used"],
                 "GPU-hours idle": TRAIN["allocated"] - TRAIN["used"] + SWEEP["allocated"],
                 "cost": TRAIN["allocated"] * 2.5 + SWEEP["allocated"] * 1.1,
                 "cost of idle GPUs": (TRAIN["allocated"] - TRAIN["used"]) * 2.5
                 + SWEEP["allocated"] * 1.1},
    "vision": {"GPU-hours allocated": NOTEBOOK["allocated"], "GPU-hours used": NOTEBOOK["used"],
               "GPU-hours idle": NOTEBOOK["allocated"] - NOTEBOOK["used"],
               "cost": NOTEBOOK["allocated"] * 1.5,
               "cost of idle GPUs": (NOTEBOOK["allocated"] - NOTEBOOK["used"]) * 1.5},
}


def openmetrics_series(selector: str) -> str:
    """A promtool-test series selector (`name{a="b", c="d"}`) as OpenMetrics writes it."""
    return selector.replace('", ', '",')


def scrapes(start: datetime, end: datetime) -> Iterator[datetime]:
    moment = start.replace(second=SCRAPE_OFFSET)
    while moment < end:
        yield moment
        moment += timedelta(minutes=1)


def month_of_samples() -> str:
    """The scenario's series, from a little before the month to a little after, as OpenMetrics
    (each family's samples together, in time order)."""
    before, after = MONTH_START - timedelta(minutes=10), MONTH_END + timedelta(minutes=10)
    sweep_start = datetime(2026, 10, 5, 12, 0, 15, tzinfo=UTC)
    gpus = [  # metric, selector, from, to, value at a moment
        (PROFILING, exporter(PROFILING, DEVICE_PLUGIN, gpu, "", pod="train")["series"],
         before, after, lambda at: 0.8 if at.hour < 12 else 0.0) for gpu in (0, 1)]
    gpus += [
        (PROFILING, exporter(PROFILING, DEVICE_PLUGIN, 2, "")["series"], before, after,
         lambda at: 0.0),
        (PROFILING, exporter(PROFILING, DEVICE_PLUGIN, 0, "", pod="sweep",
                             namespace="research-batch", node="n2")["series"],
         sweep_start, sweep_start + timedelta(days=10), lambda at: 0.0),
        (UTILIZATION, exporter(UTILIZATION, DEVICE_PLUGIN, 0, "", pod="notebook",
                               namespace="vision", node="n3", model=A100)["series"],
         before, after, lambda at: 60.0 if at.hour == 9 else 0.0)]
    nodes = {"n1": {}, "n2": SPOT, "n3": RESERVED}
    lines = []
    for metric in (PROFILING, UTILIZATION):
        lines.append(f"# TYPE {metric} gauge")
        for _, selector, start, end, value in (g for g in gpus if g[0] == metric):
            lines += [f"{openmetrics_series(selector)} {value(at)} {at.timestamp():.0f}"
                      for at in scrapes(start, end)]
    lines.append("# TYPE kube_node_labels gauge")
    for node, labels in nodes.items():
        exported = ",".join([f'node="{node}"', 'job="kube-state-metrics"', *(
            f'label_{re.sub(r"[^a-z0-9]", "_", key)}="{value}"'
            for key, value in labels.items())])
        lines += [f"kube_node_labels{{{exported}}} 1 {at.timestamp():.0f}"
                  for at in scrapes(before, after)]
    return "\n".join([*lines, "# EOF", ""])


def layers(rules: list[dict]) -> list[list[dict]]:
    """The rules by how deep they read other recorded rules: a layer reads only earlier ones."""
    depth: dict[str, int] = {}
    for rule in rules:
        read = [depth[name] for name in depth if re.search(rf"{re.escape(name)}\b", rule["expr"])]
        depth[rule["record"]] = max(depth.get(rule["record"], 0), 1 + max(read, default=0))
    by_depth: dict[int, list[dict]] = {}
    for rule in rules:
        by_depth.setdefault(depth[rule["record"]], []).append(rule)
    return [by_depth[level] for level in sorted(by_depth)]


class Prometheus:
    """The real Prometheus over a data directory, scraping nothing."""

    def __init__(self, data: Path, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = data.parent / "prometheus.yaml"
        config.write_text("global: {}\n")
        self.log = log.open("a")
        self.process = subprocess.Popen([
            str(tools.prometheus()), f"--config.file={config}", f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=400d", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(self.ready, "Prometheus to be ready", timeout=120)

    def ready(self) -> bool:
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


@pytest.fixture(scope="module")
def prometheus_with_a_month(tmp_path_factory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("showback")
    data, log = work / "data", work / "prometheus.log"
    samples = work / "month.om"
    samples.write_text(month_of_samples())
    promtool = str(tools.promtool())
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                    f"--max-block-duration={MONTH_BLOCK}", str(samples), str(data)],
                   check=True, capture_output=True)
    group = usage.usage_group(monitoring_of(SETTINGS))
    for index, layer in enumerate(layers(group["rules"])):
        rules = work / f"layer-{index}.yaml"
        rules.write_text(yaml.safe_dump({"groups": [{**group, "rules": layer}]}))
        server = Prometheus(data, log)
        try:
            subprocess.run([promtool, "tsdb", "create-blocks-from", "rules", "--quiet",
                            f"--max-block-duration={RULES_BLOCK}", f"--url={server.url}",
                            f"--output-dir={work / 'rules'}",
                            f"--start={MONTH_START.timestamp() - 7200:.0f}",
                            f"--end={MONTH_END.timestamp():.0f}", str(rules)],
                           check=True, capture_output=True)
        finally:
            server.stop()
        for block in (work / "rules").iterdir():
            block.rename(data / block.name)
    server = Prometheus(data, log)
    try:
        yield server.url
    finally:
        server.stop()


def test_a_months_csv_is_within_one_percent_of_the_hand_count(prometheus_with_a_month, capsys):
    report.main(["--prometheus", prometheus_with_a_month, "--month", "2026-10", "--format",
                 "csv"], now=datetime(2026, 11, 30, tzinfo=UTC))
    captured = capsys.readouterr()
    assert captured.err == ""
    rows = {row["team"]: row for row in csv.DictReader(io.StringIO(captured.out))}
    assert set(rows) == set(EXPECTED)
    for team, columns in EXPECTED.items():
        assert (rows[team]["from"], rows[team]["to"]) == ("2026-10-01T00:00:00Z",
                                                          "2026-11-01T00:00:00Z")
        for column, expected in columns.items():
            got = float(rows[team][column])
            assert abs(got - expected) <= 0.01 * expected, (team, column, got, expected)
