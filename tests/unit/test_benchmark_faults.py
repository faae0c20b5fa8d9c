"""The failure replay's model (benchmark/faults.py): which failures a seed draws, what a hung
pod keeps and loses, the settings each mode replays with, and the page it renders."""

import pytest

from benchmark import faults, report, workload
from benchmark.binpack import PodRecord
from benchmark.workload import BatchJob, Task
from tests.kit.harness import example_settings

NODES = [f"gpu-{index:02d}" for index in range(16)]


def trace(seed: int = 1):
    return workload.generate("synthetic", seed, 256, 128, 0.8, 0.25)


def test_a_seed_draws_its_failures_apart_from_the_trace_and_the_same_each_time():
    drawn = faults.draw_failures(trace(), NODES, 1)
    assert drawn == faults.draw_failures(trace(), NODES, 1)
    assert drawn != faults.draw_failures(trace(2), NODES, 2)
    assert len(drawn) == faults.FAILURES_PER_REPLAY
    horizon = trace().horizon
    assert all(0.1 * horizon <= f.at <= 0.8 * horizon for f in drawn)
    assert [f.at for f in drawn] == sorted(f.at for f in drawn)
    # A node fails again only after it could have been repaired.
    for first in drawn:
        for second in drawn:
            if first is not second and first.node == second.node:
                assert abs(first.at - second.at) > 2 * faults.REPAIR_HOURS


def test_a_hung_pod_keeps_its_work_up_to_its_last_checkpoint_before_it_hung():
    record = PodRecord("job-1-0", Task(4, 16000, 65536), 0.0,
                       job=BatchJob(1, Task(4, 16000, 65536), 0.0, 10.0), started=2.0)
    kept, lost = faults.stopped_work(record, hung_at=3.7, checkpoint_every=0.5)
    assert kept == 1.5 and lost == pytest.approx(0.2)


def test_remediation_replays_at_its_defaults_and_a_person_without_the_limit():
    settings = example_settings()
    drain = faults.remediation_settings(settings, faults.MODES[-1]).remediation
    assert (drain.mode, drain.max_nodes, drain.max_share) == ("drain", 2, 0.1)
    person = faults.remediation_settings(settings, faults.MODES[0]).remediation
    assert (person.max_nodes, person.max_share) == (1000, 1.0)


def test_the_page_scales_the_cost_per_failure_to_the_published_rate():
    row = {"mix": "synthetic", "nodes": 16, "gpus": 128, "load": 0.8, "mode": "drain",
           "failures": 6, "taken_out": 6, "out_after_mean": 0.05, "hung_gpu_hours": 3.0,
           "lost_work_gpu_hours": 9.0, "jobs_hit": 10, "hit_completion_mean": 5.0,
           "wait_mean": 0.2, "wait_p95": 1.0, "wait_p95_8": 2.0}
    page = report.faults_page([row])
    # 12 GPU-hours over 6 failures: 2 per failure; at 0.278 failures per 1000 GPU-days, 0.6.
    assert "| drain | 1 | 6 (6) | 3 | 3 | 9 | 2.0 | 0.6 | 10 | 5.0 | 12 / 60 | 120 |" in page
    assert round(faults.PUBLISHED_GPU_FAILURES_PER_1000_GPU_DAYS, 3) == 0.278
