"""The benchmark's experiments whose figures are kept: each its results file under results/ (one
row per replay, so a long run can be split and resumed), the page under docs/benchmarks/ that is
rendered from those rows alone, and the command that renders the page again without replaying.
A new experiment is one entry here (docs/developers/adding-an-experiment.md); the docs test
re-renders every page from its rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmark import report


@dataclass(frozen=True)
class Experiment:
    name: str
    results: str
    page: str
    render: Callable[[list[dict]], str]
    report_command: str


EXPERIMENTS = [
    Experiment("packing", "runs.jsonl", report.RESULTS_PAGE, report.results_page, "--report"),
    Experiment("scheduling", report.SCHEDULING_RESULTS, report.SCHEDULING_PAGE,
               report.scheduling_page, "--scheduling"),
    Experiment("teams", report.TEAMS_RESULTS, report.TEAMS_PAGE, report.teams_page,
               "--teams --report"),
    Experiment("reclaim", report.RECLAIM_RESULTS, report.RECLAIM_PAGE, report.reclaim_page,
               "--reclaim --report"),
    Experiment("contended", report.CONTENDED_RESULTS, report.CONTENDED_PAGE,
               report.contended_page, "--contended 5 --report"),
    Experiment("faults", report.FAULTS_RESULTS, report.FAULTS_PAGE, report.faults_page,
               "--faults --report"),
]
