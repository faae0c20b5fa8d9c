"""Regression guard for the binpack benchmark: a small trace of batch Jobs and scaling inference
Deployments behind Services, replayed with queueing against the real kube-scheduler and
kube-controller-manager. The project's profile starts more GPU-time on arrival, keeps 8-GPU jobs
waiting less and delivers more GPU-time than the default profile. (The fragmentation example is
in test_scheduling.py, owned workloads in test_workloads.py; the full benchmark is
`bash tests/run benchmark`.)"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmark"))
import binpack  # noqa: E402
import workload  # noqa: E402

NODES = workload.CLUSTERS["homogeneous"](4)
TRACE = workload.generate("synthetic", seed=1, jobs=64, total_gpus=32, load=0.9)


def test_the_shipped_profile_beats_the_default_profile_on_a_small_queued_trace(example_settings):
    configs = binpack.profiles(example_settings)
    shipped = binpack.replay("shipped", configs[example_settings.scheduler.name], TRACE, NODES,
                             example_settings)
    default = binpack.replay("default", configs[binpack.DEFAULT_PROFILE], TRACE, NODES,
                             example_settings)
    owned = [r for r in shipped.records if r.service is not None]
    assert owned, "no inference replica was created by its Deployment"
    print(f"\nstarted on arrival: shipped {shipped.started_on_arrival():.1%}, default "
          f"{default.started_on_arrival():.1%}; 8-GPU wait p95 (simulated hours): shipped "
          f"{shipped.wait(8, 0.95):.2f}, default {default.wait(8, 0.95):.2f}; GPU-hours "
          f"delivered: shipped {shipped.delivered_gpu_hours():.0f}, default "
          f"{default.delivered_gpu_hours():.0f}")
    assert shipped.started_on_arrival() > default.started_on_arrival()
    assert shipped.wait(8, 0.95) < default.wait(8, 0.95)
    assert shipped.delivered_gpu_hours() > default.delivered_gpu_hours()
