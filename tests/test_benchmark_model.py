"""The binpack benchmark's model, without a control plane: the workload generator is seeded and
has the documented shape, and the offline reference really is the best packing."""

import itertools
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmark"))
import binpack  # noqa: E402


def test_the_same_seed_gives_the_same_trace_and_another_seed_another():
    assert binpack.generate_trace(7, 200, 64, 0.9) == binpack.generate_trace(7, 200, 64, 0.9)
    assert binpack.generate_trace(7, 200, 64, 0.9) != binpack.generate_trace(8, 200, 64, 0.9)


def test_request_sizes_follow_the_documented_mix():
    trace = binpack.generate_trace(1, 20000, 128, 0.9)
    counts = Counter(job.gpus for job in trace)
    for gpus, share in binpack.SIZE_MIX.items():
        assert counts[gpus] / len(trace) == pytest.approx(share, abs=0.015)


@pytest.mark.parametrize("load", [0.5, 0.9, 1.2])
def test_arrivals_offer_the_requested_load(load):
    trace = binpack.generate_trace(3, 20000, 128, load)
    span = trace[-1].arrival - trace[0].arrival
    offered = sum(job.gpu_hours for job in trace) / (128 * span)
    assert offered == pytest.approx(load, rel=0.1)


def test_gpus_are_freed_before_they_are_asked_for_at_the_same_time():
    first = binpack.Job(0, 2, 0.0, 1.0)
    second = binpack.Job(1, 2, 1.0, 1.0)
    assert [(kind, job.id) for _, kind, job in binpack.events([second, first])] == \
        [(1, 0), (0, 0), (1, 1), (0, 1)]


def exhaustive_fit(sizes, nodes) -> bool:
    capacity = list(nodes.values())
    for assignment in itertools.product(range(len(capacity)), repeat=len(sizes)):
        used = [0] * len(capacity)
        for size, node in zip(sizes, assignment):
            used[node] += size
        if all(u <= c for u, c in zip(used, capacity)):
            return True
    return False


def test_best_fit_decreasing_packs_whenever_any_packing_exists():
    rng = random.Random(0)
    for _ in range(300):
        nodes = {f"n{i}": rng.choice([4, 8]) for i in range(rng.randint(1, 3))}
        sizes = [rng.choice([1, 2, 4, 8]) for _ in range(rng.randint(1, 6))]
        assert (binpack.best_fit_decreasing(sizes, nodes) is not None) == \
            exhaustive_fit(sizes, nodes), (sizes, nodes)


def test_the_fragmentation_example_fits_only_when_packed():
    nodes = {"node-1": 4, "node-2": 4}
    assert binpack.best_fit_decreasing([2, 2, 1, 1, 2], nodes) is not None
    spread = binpack.Ledger(nodes)
    for job, node in zip([binpack.Job(i, g, 0, 1) for i, g in enumerate([2, 2, 1, 1])],
                         ["node-1", "node-2", "node-1", "node-2"]):
        spread.add(job, node)
    assert spread.free_total() == 2 and spread.stranded() == 2 and spread.free_big_nodes() == 0


def test_the_reference_places_at_least_what_a_scheduler_without_moves_places():
    nodes = binpack.CLUSTERS["mixed"](6)
    trace = binpack.generate_trace(5, 300, sum(nodes.values()), 1.0)

    def first_fit(job, ledger):
        return next((n for n in sorted(ledger.capacity)
                     if ledger.capacity[n] - ledger.used[n] >= job.gpus), None)

    greedy = binpack.simulate("first fit", trace, binpack.Ledger(nodes), first_fit)
    best = binpack.reference(trace, nodes)
    assert best.placed_share >= greedy.placed_share
    assert greedy.refused > 0, "the trace should be loaded enough to refuse something"


def test_on_equal_nodes_the_reference_refuses_only_for_want_of_gpus():
    nodes = binpack.CLUSTERS["homogeneous"](4)
    best = binpack.reference(binpack.generate_trace(2, 300, 32, 1.2), nodes)
    assert best.refused > 0 and best.fragmentation_failures == 0
