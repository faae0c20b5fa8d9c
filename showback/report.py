"""`venv/bin/python -m showback --prometheus URL --month 2026-10 [--by team] [--format csv]`:
each team's or namespace's GPU-hours allocated, used and idle over the range, and their cost
where the stack prices the GPU model, as Prometheus answers the dashboard's own queries at the
range's end."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests

from components.base.validation import duration_seconds
from components.monitoring.usage import NODE_PRICE, range_gpu_hours

TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Report:
    by: str
    start: datetime
    end: datetime
    columns: list[str]
    rows: dict[str, dict[str, float]]     # team or namespace -> column -> value
    warnings: list[str]


class Prometheus:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def get(self, path: str, **params: Any) -> Any:
        try:
            reply = requests.get(f"{self.url}{path}", params=params, timeout=TIMEOUT_SECONDS)
        except requests.RequestException as error:
            raise SystemExit(f"--prometheus {self.url}: cannot reach it: {error}") from None
        answer = reply.json() if reply.headers.get("content-type", "").startswith(
            "application/json") else {}
        if reply.status_code != 200 or answer.get("status") != "success":
            raise SystemExit(f"--prometheus {self.url}: {path} answered HTTP "
                             f"{reply.status_code}: {answer.get('error', reply.text[:200])}")
        return answer["data"]

    def vector(self, query: str, at: datetime) -> list[dict]:
        return self.get("/api/v1/query", query=query, time=at.timestamp())["result"]

    def retention_seconds(self) -> float | None:
        """How far back Prometheus keeps samples (its --storage.tsdb.retention.time); None where
        it does not say or keeps them by size only."""
        flags = self.get("/api/v1/status/flags")
        return duration_seconds(flags.get("storage.tsdb.retention.time", "")) or None


def report(prometheus: Prometheus, by: str, start: datetime, end: datetime,
           now: datetime) -> Report:
    seconds = int((end - start).total_seconds())
    # Priced where some GPU had a price at some point of the range.
    priced = bool(prometheus.vector(f"count(last_over_time({NODE_PRICE}[{seconds}s]))", end))
    queries = range_gpu_hours(by, "", f"{seconds}s", priced)
    rows: dict[str, dict[str, float]] = {}
    for column, query in queries.items():
        for series in prometheus.vector(query, end):
            rows.setdefault(series["metric"].get(by, ""), {})[column] = float(series["value"][1])
    warnings = []
    retention = prometheus.retention_seconds()
    if retention is not None and (now - start).total_seconds() > retention:
        warnings.append(f"the range starts {format_time(start)}, before the oldest samples "
                        f"Prometheus keeps (retention {retention / 86400:g} days before now): "
                        f"the figures count only what it still has")
    if not priced:
        warnings.append("no GPU had a price over the range (monitoring.usage.pricePerGpuHour, "
                        "nodeGroupPrices): GPU-hours only")
    return Report(by, start, end, list(queries), rows, warnings)


def format_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def as_csv(result: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([result.by, "from", "to", *result.columns])
    for key, values in sorted(result.rows.items()):
        writer.writerow([key, format_time(result.start), format_time(result.end),
                         *(f"{values[c]:.2f}" if c in values else "" for c in result.columns)])
    return out.getvalue()


def as_json(result: Report) -> str:
    return json.dumps({"by": result.by, "from": format_time(result.start),
                       "to": format_time(result.end), "warnings": result.warnings,
                       "rows": [{result.by: key, **{c: round(v, 4) for c, v in values.items()}}
                                for key, values in sorted(result.rows.items())]}, indent=1)


def as_table(result: Report) -> str:
    header = [result.by, *result.columns]
    lines = [[key, *(f"{values[c]:.2f}" if c in values else "-" for c in result.columns)]
             for key, values in sorted(result.rows.items())]
    widths = [max(len(str(row[i])) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(str(cell).rjust(width) if i else str(cell).ljust(width)
                               for i, (cell, width) in enumerate(zip(row, widths, strict=True)))
                     for row in [header, *lines]) + "\n"


def month(text: str) -> tuple[datetime, datetime]:
    try:
        start = datetime.strptime(text, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a month; allowed: YYYY-MM") from None
    end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return start, end


def moment(text: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time; allowed: ISO 8601, e.g. 2026-10-01 or "
            f"2026-10-01T00:00:00Z") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(prog="python -m showback", description=__doc__,
                                      formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_argument("--prometheus", required=True,
                         help="the Prometheus HTTP API the platform's rules run in, e.g. "
                              "http://localhost:9090 through a port-forward")
    when = command.add_mutually_exclusive_group(required=True)
    when.add_argument("--month", type=month, help="a calendar month (UTC), YYYY-MM")
    when.add_argument("--from", dest="start", type=moment, help="the range's start (with --to)")
    command.add_argument("--to", dest="end", type=moment, help="the range's end")
    command.add_argument("--by", choices=("team", "namespace"), default="team")
    command.add_argument("--format", choices=("table", "csv", "json"), default="table")
    return command


def main(argv: list[str], now: datetime | None = None) -> None:
    args = parser().parse_args(argv)
    start, end = args.month if args.month else (args.start, args.end)
    if end is None:
        raise SystemExit("--from needs --to: the range's end")
    if end <= start:
        raise SystemExit(f"--to {format_time(end)}: not after --from {format_time(start)}")
    result = report(Prometheus(args.prometheus), args.by, start, end,
                    now or datetime.now(UTC))
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print({"table": as_table, "csv": as_csv, "json": as_json}[args.format](result), end="")
