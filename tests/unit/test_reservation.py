"""Reservation by attrition, as a run plans it and as the stack ships it: which node is reserved
for which waiting pod and when it is released, and the CronJob's modules running from the
ConfigMap's layout alone."""


import pytest

from components import gpu_operator
from components.gpu_operator import values as gpu_operator_values
from components.gpu_reservation import TAINT_KEY, actor_config
from components.gpu_reservation.actor.gpu_reservation import (
    Config,
    NodeView,
    Waiting,
    plan,
    tolerates,
)
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.stacks import with_changes

HOUR = 3600.0
NOW = 100 * HOUR
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def reservation_inputs():
    settings = StackSettings.model_validate(with_changes(reservation={"enabled": True}))
    return component_inputs(settings).reservation


@pytest.fixture(scope="module")
def config():
    return actor_config(reservation_inputs())


def node(name: str, used: int, gpus: int = 8, **fields) -> NodeView:
    return NodeView(**{"name": name, "gpus": gpus, "used": used, "schedulable": True,
                       "taints": (GPU_TAINT,), "reserved_for": None, "reserved_pod": None,
                       "reserved_until": None, "frees_at": None, "serving": 0, "newest_start": 0.0,
                       **fields})


def waiting(name: str, gpus: int = 8, waited: float = HOUR, limit: float | None = None,
            let_onto: str = "") -> Waiting:
    """A pod waiting `waited`; `limit`: its activeDeadlineSeconds; `let_onto`: the uid of the
    pod whose reserved node a run let it onto."""
    onto = ({"key": TAINT_KEY, "operator": "Equal", "value": let_onto, "effect": "NoSchedule"},
            ) if let_onto else ()
    return Waiting(f"uid-{name}", "ml", name, gpus, NOW - waited, (GPU_TOLERATION, *onto),
                   limit)


def reserved(steps) -> dict[str, str]:
    return {s.node: s.pod.name for s in steps if s.action == "reserve" and s.pod}


def test_a_whole_node_pod_that_waited_gets_the_node_with_fewest_gpus_in_use(config):
    steps = plan(config, [node("a", 6), node("b", 2), node("c", 7)], [waiting("big")], NOW)
    assert reserved(steps) == {"b": "big"}
    assert steps[0].until == NOW + 3 * HOUR         # expireAfter, the default 3h


def test_declared_run_time_limits_rank_first(config):
    """A node whose pods all declare when they end is chosen by that end, before any node
    whose pods may run on."""
    nodes = [node("a", 2), node("b", 6, frees_at=NOW + 600), node("c", 4, frees_at=NOW + 60)]
    assert reserved(plan(config, nodes, [waiting("big")], NOW)) == {"c": "big"}


def test_a_node_holding_a_serving_pod_ranks_after_nodes_of_batch_pods_only(config):
    """A Deployment's replica ends only when scaled down: its node may never empty."""
    nodes = [node("serving", 1, serving=1), node("batch", 5)]
    assert reserved(plan(config, nodes, [waiting("big")], NOW)) == {"batch": "big"}


def test_a_reservation_moves_to_a_node_that_has_come_to_hold_fewer_gpus(config):
    """Pods ended elsewhere: that node will free sooner than the one kept, whose end the
    moved reservation keeps."""
    kept = node("kept", 5, reserved_for="uid-big", reserved_pod="ml/big",
                reserved_until=NOW + HOUR)
    steps = plan(config, [kept, node("emptier", 2), node("busy", 7)], [waiting("big")], NOW)
    assert [(s.action, s.node, s.until) for s in steps] == [
        ("release", "kept", None), ("reserve", "emptier", NOW + HOUR)]
    assert plan(config, [kept, node("as-busy", 5)], [waiting("big")], NOW) == []


def test_no_reservation_before_the_wait_for_small_pods_or_where_a_node_is_free(config):
    nodes = [node("a", 6), node("b", 2)]
    assert plan(config, nodes, [waiting("young", waited=14 * 60)], NOW) == []
    assert plan(config, nodes, [waiting("small", gpus=4)], NOW) == []
    assert plan(config, [*nodes, node("free", 0)], [waiting("big")], NOW) == []


def test_a_pod_no_node_could_hold_is_reported_not_reserved_for(config):
    steps = plan(config, [node("a", 6), node("b", 2)], [waiting("huge", gpus=16)], NOW)
    assert [(s.action, s.pod) for s in steps] == [("report", waiting("huge", gpus=16))]
    assert "no GPU node holds 16 GPUs (the largest holds 8)" in steps[0].why


def test_cordoned_nodes_and_taints_the_pod_does_not_tolerate_are_passed_over(config):
    other = {"key": "maintenance", "value": "", "effect": "NoSchedule"}
    nodes = [node("cordoned", 1, schedulable=False), node("tainted", 1, taints=(GPU_TAINT, other)),
             node("open", 5)]
    assert reserved(plan(config, nodes, [waiting("big")], NOW)) == {"open": "big"}


def test_at_most_max_nodes_and_max_share_are_reserved_oldest_waiting_first(config):
    """The defaults: 2 nodes, a quarter of the GPU nodes."""
    pods = [waiting("third", waited=HOUR), waiting("first", waited=3 * HOUR),
            waiting("second", waited=2 * HOUR)]
    eight = [node(f"n{i}", i % 7 + 1) for i in range(8)]
    assert sorted(reserved(plan(config, eight, pods, NOW)).values()) == ["first", "second"]
    four = eight[:4]
    assert list(reserved(plan(config, four, pods, NOW)).values()) == ["first"]
    held = [node("n0", 1, reserved_for="uid-first", reserved_until=NOW + HOUR), *eight[1:]]
    assert list(reserved(plan(config, held, pods, NOW)).values()) == ["second"]


def test_a_reservation_is_released_once_its_pod_landed_or_expired(config):
    nodes = [node("a", 3, reserved_for="uid-gone", reserved_pod="ml/gone",
                  reserved_until=NOW + HOUR),
             node("b", 3, reserved_for="uid-late", reserved_pod="ml/late", reserved_until=NOW)]
    steps = plan(config, nodes, [waiting("late", waited=4 * HOUR)], NOW)
    assert [(s.action, s.node, s.why) for s in steps] == [
        ("release", "a", "ml/gone landed or is gone"), ("release", "b", "expired after 3h")]


def kept_for_big(used: int, frees_at: float | None) -> NodeView:
    return node("kept", used, reserved_for="uid-big", reserved_pod="ml/big",
                reserved_until=NOW + 3 * HOUR, frees_at=frees_at)


def backfilled(steps) -> dict[str, str]:
    return {s.pod.name: s.node for s in steps if s.action == "backfill" and s.pod}


def test_pods_that_end_before_the_reserved_node_empties_use_its_free_gpus(config):
    """5 of the kept node's 8 GPUs in use until NOW + 2h: a pod whose limit ends by then is
    let on while GPUs are left; one that would outlast the node's pods, or declares no limit,
    is not."""
    pods = [waiting("big"), waiting("short", gpus=2, limit=HOUR, waited=50 * 60),
            waiting("outlasts", gpus=1, limit=3 * HOUR, waited=40 * 60),
            waiting("undeclared", gpus=1, waited=30 * 60),
            waiting("too-many", gpus=2, limit=HOUR, waited=20 * 60),
            waiting("last-gpu", gpus=1, limit=2 * HOUR, waited=10 * 60)]
    steps = plan(config, [kept_for_big(5, NOW + 2 * HOUR), node("other", 7)], pods, NOW)
    assert backfilled(steps) == {"short": "kept", "last-gpu": "kept"}
    assert {s.reserved_for for s in steps} == {"uid-big"}
    assert "ends by" in steps[0].why and "before the node's pods end" in steps[0].why


def test_no_backfill_where_a_pod_on_the_node_declares_no_limit_or_when_turned_off(config):
    pods = [waiting("big"), waiting("short", gpus=1, limit=60.0)]
    assert plan(config, [kept_for_big(5, None)], pods, NOW) == []
    off = Config(**{**config, "backfill": False})
    assert plan(off, [kept_for_big(5, NOW + HOUR)], pods, NOW) == []


def test_pods_let_on_that_have_not_landed_hold_their_gpus_and_the_reservation_in_place(config):
    """A pod let on earlier still waits: its GPUs are spoken for, and the reservation does not
    move to a node that empties sooner (the pod could land there and outlast it)."""
    pods = [waiting("big"), waiting("earlier", gpus=3, limit=60.0, let_onto="uid-big"),
            waiting("later", gpus=1, limit=60.0)]
    steps = plan(config, [kept_for_big(5, NOW + HOUR), node("emptier", 1)], pods, NOW)
    assert steps == []


def test_the_gpu_operators_daemonsets_tolerate_reservations_and_gpu_pods_do_not():
    """A DaemonSet pod recreated on a reserved node is not held back; the tolerations the
    platform gives GPU pods (the GPU taints) do not let them onto a reserved node."""
    settings = StackSettings.model_validate(with_changes(reservation={"enabled": True}))
    operator = component_inputs(settings).gpu_operator
    values = gpu_operator_values.operator_values(operator)
    reserved = {"key": TAINT_KEY, "value": "uid-1", "effect": "NoSchedule"}
    assert tolerates(tuple(values["daemonsets"]["tolerations"]), reserved)
    assert tolerates(tuple(values["node-feature-discovery"]["worker"]["tolerations"]), reserved)
    assert not tolerates(tuple(gpu_operator.gpu_node_tolerations(operator)), reserved)


def test_tolerations_match_as_the_scheduler_matches_them():
    taint = {"key": TAINT_KEY, "value": "uid-1", "effect": "NoSchedule"}
    assert tolerates(({"key": TAINT_KEY, "operator": "Equal", "value": "uid-1"},), taint)
    assert not tolerates(({"key": TAINT_KEY, "operator": "Equal", "value": "uid-2"},), taint)
    assert tolerates(({"operator": "Exists"},), taint)
    assert not tolerates(({"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},),
                         taint)
    assert tolerates((), {**taint, "effect": "PreferNoSchedule"})
