"""Regression guard for the binpack benchmark: on a small trace, replayed against the real
kube-scheduler, the project's profile places more GPU-time and fragments less than the default
profile, and no scheduler beats the offline reference. (The fragmentation example is in
test_scheduling.py; the full benchmark is `bash tests/run benchmark`.)"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmark"))
import binpack  # noqa: E402

NODES = binpack.CLUSTERS["homogeneous"](4)
TRACE = binpack.generate_trace(seed=1, jobs=64, total_gpus=32, load=0.9)


def test_the_shipped_profile_beats_the_default_profile_on_a_small_trace(example_settings):
    configs = binpack.profiles(example_settings)
    shipped_name = example_settings.scheduler.name
    shipped = binpack.replay(shipped_name, configs[shipped_name], TRACE, NODES,
                             example_settings)
    default = binpack.replay("default", configs[binpack.DEFAULT_PROFILE], TRACE, NODES,
                             example_settings)
    best = binpack.reference(TRACE, NODES)
    print(f"\nGPU-time placed: shipped {shipped.placed_share:.1%}, default "
          f"{default.placed_share:.1%}, reference {best.placed_share:.1%}; fragmentation "
          f"failures: shipped {shipped.fragmentation_failures}, default "
          f"{default.fragmentation_failures}")
    assert shipped.placed_share > default.placed_share
    assert shipped.fragmentation_failures < default.fragmentation_failures
    assert best.placed_share >= shipped.placed_share
