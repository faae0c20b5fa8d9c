"""The showback report: its queries over a day in Prometheus' own engine (promtool), against
GPU-hours and costs counted by hand from exporter-shaped series; and the command's outputs and
warnings against a Prometheus stand-in."""

import http.server
import json
import threading
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlparse

import pytest

from components.monitoring import usage
from showback import report
from tests.unit.test_alert_rules import run_promtool_tests
from tests.unit.test_gpu_usage_rules import DEVICE_PLUGIN, PROFILING, exporter

# promtool's test engine refuses these queries over a month of minute samples ("would load
# too many samples into memory"), which a Prometheus server's default limit allows: a day it
# holds, and the queries are the same whatever the range.
DAY_MINUTES = 24 * 60
ACTIVE_MINUTES = DAY_MINUTES // 2


def test_a_days_gpu_hours_and_costs_are_what_the_samples_add_up_to(promtool_bin, tmp_path):
    """research's pod holds two H100s (priced 2.5 an hour) all day, busy the first half and
    idle the second: counted by hand, 2 x 24 = 48 GPU-hours allocated, 24 used, 24 idle,
    costing 120 of which 60 idle. vision's pod holds an A100 (no price) all day, idle."""
    busy_then_idle = f"0.9x{ACTIVE_MINUTES} 0x{DAY_MINUTES - ACTIVE_MINUTES - 1}"
    series = [exporter(PROFILING, DEVICE_PLUGIN, gpu, busy_then_idle, pod="train")
              for gpu in (0, 1)]
    series.append(exporter(PROFILING, DEVICE_PLUGIN, 0, f"0x{DAY_MINUTES}", pod="notebook",
                           namespace="vision", node="n2", model="NVIDIA A100-SXM4-80GB"))
    expected = {level: {"research": (48, 24, 24, 120, 60), "vision": (24, 0, 24)}
                for level in ("team", "namespace")}
    tests = []
    for level, rows in expected.items():
        queries = usage.range_gpu_hours(level, "", f"{DAY_MINUTES * 60}s", priced=True)
        for index, query in enumerate(queries.values()):
            tests.append({"expr": query, "eval_time": f"{DAY_MINUTES}m", "exp_samples": [
                {"labels": f'{{{level}="{name}"}}', "value": values[index]}
                for name, values in rows.items() if index < len(values)]})
    run_promtool_tests(promtool_bin, tmp_path, [{"interval": "1m", "input_series": series,
                                                 "promql_expr_test": tests}],
                       settings=DEVICE_PLUGIN)


class StandIn(http.server.BaseHTTPRequestHandler):
    """Prometheus' HTTP API as the report reads it: a price series, the queries' answers and
    the retention flag; every query recorded."""
    answers: dict[str, list[dict]] = {}
    asked: list[tuple[str, float]] = []

    def do_GET(self):
        url = urlparse(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/api/v1/status/flags":
            data: object = {"storage.tsdb.retention.time": "15d"}
        else:
            StandIn.asked.append((params["query"], float(params["time"])))
            data = {"resultType": "vector", "result": StandIn.answers.get(params["query"], [])}
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass


@pytest.fixture
def prometheus():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    queries = usage.range_gpu_hours("team", "", f"{31 * 86400}s", priced=True)
    values = {"GPU-hours allocated": (1440.0, 720.0), "GPU-hours used": (720.0, 0.0),
              "GPU-hours idle": (720.0, 720.0), "cost": (3600.0,),
              "cost of idle GPUs": (1800.0,)}
    priced = f"count(last_over_time({usage.NODE_PRICE}[{31 * 86400}s]))"
    StandIn.answers = {priced: [{"metric": {}, "value": [0, "1"]}]} | {
        query: [{"metric": {"team": team}, "value": [0, str(value)]}
                for team, value in zip(("research", "vision"), values[column], strict=False)]
        for column, query in queries.items()}
    StandIn.asked = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_month_as_csv_asks_the_dashboards_queries_at_the_months_end(prometheus, capsys):
    report.main(["--prometheus", prometheus, "--month", "2026-10", "--format", "csv"],
                now=datetime(2026, 11, 2, tzinfo=UTC))
    assert capsys.readouterr().out == (
        "team,from,to,GPU-hours allocated,GPU-hours used,GPU-hours idle,cost,cost of idle GPUs\n"
        "research,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,1440.00,720.00,720.00,3600.00,"
        "1800.00\n"
        "vision,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,720.00,0.00,720.00,,\n")
    end = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    assert {time for _, time in StandIn.asked} == {end}


def test_a_range_beyond_the_retention_is_reported_with_a_warning(prometheus, capsys):
    report.main(["--prometheus", prometheus, "--month", "2026-10", "--format", "json"],
                now=datetime(2026, 11, 29, tzinfo=UTC))
    captured = capsys.readouterr()
    assert "before the oldest samples Prometheus keeps (retention 15 days before now)" in \
        captured.err
    answer = json.loads(captured.out)
    assert answer["rows"][1] == {"team": "vision", "GPU-hours allocated": 720.0,
                                 "GPU-hours used": 0.0, "GPU-hours idle": 720.0}


@pytest.mark.parametrize(("argv", "message"), [
    (["--month", "2026-13"], "'2026-13' is not a month; allowed: YYYY-MM"),
    (["--from", "2026-10-05"], "--from needs --to"),
    (["--from", "2026-10-05", "--to", "2026-10-01"], "--to 2026-10-01T00:00:00Z: not after"),
])
def test_bad_ranges_are_refused_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as refused:
        report.main(["--prometheus", "http://127.0.0.1:9", *argv])
    assert message in (str(refused.value.code) + capsys.readouterr().err)
