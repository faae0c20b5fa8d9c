"""Idle reclaim per team and with a warning first: each namespace's policy (its action, grace
period, keep rights and keep-alives, the stack's where it sets none), what it refuses, the rights
each policy needs; the deadline a reported pod carries and the keep-alive that moves it (the
actor's own `decide` and `act`, against an API server that records the calls)."""

import pytest

from components import gpu_reclaim
from components.base.validation import SettingsError
from components.gpu_reclaim.actor import gpu_reclaim as actor
from tests.unit.test_reclaim import (
    HOUR,
    NOW,
    config_of,
    decided,
    inputs_of,
    pod,
    settings_of,
    stamp,
)

# --- a policy per team or namespace ---------------------------------------------------------

# research on evict with a short grace and no keeping; serving on report; vision off.
POLICIES = {"action": "report", "teams": ["research", "vision"], "policies": [
    {"teams": ["research"], "action": "evict", "gracePeriod": "1h", "allowKeep": False},
    {"teams": ["vision"], "action": "off"}]}


def test_a_team_on_evict_beside_a_namespace_on_report():
    config = config_of(**POLICIES)
    assert config["policies"] == {
        "research": {"action": "evict", "gracePeriod": "1h", "gracePeriodSeconds": 3600.0,
                     "allowKeep": False, "keepAlives": 1},
        "serving": {"action": "report", "gracePeriod": "4h", "gracePeriodSeconds": 14400.0,
                    "allowKeep": True, "keepAlives": 1}}
    old = NOW - 2 * HOUR
    idle = {(ns, name): 1 for ns in ("research", "serving", "vision")
            for name in ("p", "kept")}
    pods = [pod(name, ns, reported=old, keep="true" if name == "kept" else None)
            for ns in ("research", "serving", "vision") for name in ("p", "kept")]
    assert decided(config, idle, pods) == {
        "research/kept": ("evict", "idle after its grace period"),
        "research/p": ("evict", "idle after its grace period"),
        "serving/kept": ("skip", "kept by its owner (gpu-platform.io/keep-gpus)"),
        "serving/p": ("skip", "reported already (action: report)")}
    decision = actor.Decision("research", "p", "report", "idle", 1, NOW)
    note = actor.report_note(config, decision, pod("p"))
    assert "it will be evicted if still idle after 1h" in note
    assert "does not honour gpu-platform.io/keep-gpus" in note


def test_only_a_team_on_evict_has_its_workloads_read_and_requeued():
    """A run lists Workloads only where it may (it has no right to on report)."""
    config = config_of(action="report", teams=["research", "vision"],
                       policies=[{"teams": ["research"], "action": "evict"}])
    assert sorted(config["policies"]) == ["research", "serving", "vision"]
    assert config["teamNamespaces"] == ["research"]


def test_each_namespace_gets_the_rights_its_policy_needs_and_an_off_team_none():
    objects = gpu_reclaim.reclaim_objects(inputs_of(**POLICIES))
    roles = {o["metadata"]["namespace"]: {r for rule in o["rules"] for r in rule["resources"]}
             for o in objects if o["kind"] == "Role"}
    assert sorted(roles) == ["research", "serving"], "vision's policy is off"
    assert {"pods/eviction", "workloads"} <= roles["research"]
    assert roles["serving"] == {"pods", "events"}


@pytest.mark.parametrize(("policies", "setting", "message"), [
    ([{"teams": ["vision"], "action": "evict"}], "reclaim.policies[0].teams[0]",
     '"vision": a team that did not opt in to reclaim; allowed: a team of reclaim.teams '
     '(research)'),
    ([{"teams": ["research"], "action": "evict"}, {"teams": ["research"], "action": "off"}],
     "reclaim.policies[1].teams[0]", '"research": a team with a policy already '
     '(reclaim.policies[0]); allowed: one policy per team'),
    ([{"teams": ["research"], "action": "evict"}, {"namespaces": ["research"], "action": "off"}],
     "reclaim.policies[1].namespaces[0]", '"research": a namespace with a policy already '
     '(reclaim.policies[0], through team research); allowed: one policy per namespace'),
    ([{"namespaces": ["serving"], "action": "evict"}, {"namespaces": ["serving"],
                                                       "allowKeep": False}],
     "reclaim.policies[1].namespaces[0]", '"serving": a namespace with a policy already '
     '(reclaim.policies[0], by name)'),
    ([{"namespaces": ["elsewhere"], "action": "evict"}], "reclaim.policies[0].namespaces[0]",
     '"elsewhere": a namespace that did not opt in to reclaim'),
    ([{"action": "evict"}], "reclaim.policies[0].teams", "[]: a policy for no team and no "
     "namespace"),
    ([{"teams": ["research"]}], "reclaim.policies[0].action", "null: a policy that changes "
     "nothing; allowed: at least one of action, gracePeriod, allowKeep and keepAlives"),
    ([{"teams": ["research"], "action": "delete"}], "reclaim.policies[0].action", "'off', "
     "'report' or 'evict'"),
])
def test_a_policy_that_names_what_it_may_not_is_refused(policies, setting, message):
    with pytest.raises(SettingsError) as refused:
        settings_of(policies=policies)
    assert f"gpu-platform:{setting} = " in str(refused.value), str(refused.value)
    assert message in str(refused.value)


def keep_alive(pod_: dict, used: int | None = None) -> dict:
    annotations = pod_["metadata"]["annotations"]
    annotations[gpu_reclaim.KEEP_ALIVE_ANNOTATION] = "true"
    if used is not None:
        annotations[gpu_reclaim.KEEP_ALIVES_ANNOTATION] = str(used)
    return pod_


def test_a_keep_alive_restarts_the_grace_period_as_often_as_the_policy_allows():
    config = config_of(keepAlives=2)
    due = NOW - 5 * HOUR
    idle = {("research", name): 1 for name in ("first", "last", "spent", "report")}
    pods = [keep_alive(pod("first", reported=due)), keep_alive(pod("last", reported=due), 1),
            keep_alive(pod("spent", reported=due), 2)]
    assert decided(config, idle, pods) == {
        "research/first": ("keep-alive", "kept alive by its owner (1 of 2)"),
        "research/last": ("keep-alive", "kept alive by its owner (2 of 2)"),
        "research/spent": ("evict", "idle after its grace period")}
    # On report nothing is evicted, so there is nothing to keep alive from.
    assert decided(config_of(action="report"), idle, [keep_alive(
        pod("report", reported=due))]) == {
        "research/report": ("skip", "reported already (action: report)")}
    # Where the policy allows none, the annotation changes nothing.
    assert decided(config_of(keepAlives=0), idle, [keep_alive(pod("first", reported=due))]) \
        == {"research/first": ("evict", "idle after its grace period")}


class Recorded(actor.Api):
    """An API server that accepts every call, recording it."""

    def __init__(self):
        self.calls: list[tuple[str, str, dict | None]] = []

    def call(self, method: str, path: str, body: dict | None = None,
             content_type: str = "application/json") -> tuple[int, dict]:
        self.calls.append((method, path, body))
        return 200, {}


def test_the_owner_reads_the_deadline_on_the_pod_and_a_keep_alive_moves_it():
    config, api = config_of(), Recorded()
    [report] = actor.decide(config, {("research", "nb"): 1}, [pod("nb")], NOW)
    assert actor.act(api, config, report, pod("nb"), NOW, set()) == "reported"
    kept = keep_alive(pod("nb", reported=NOW - HOUR))
    [renewal] = actor.decide(config, {("research", "nb"): 1}, [kept], NOW + HOUR)
    assert actor.act(api, config, renewal, kept, NOW + HOUR, set()) == \
        "kept alive: grace period restarted"
    patches = [body["metadata"]["annotations"] for method, _, body in api.calls
               if method == "PATCH" and body]
    assert patches == [
        {gpu_reclaim.REPORTED_ANNOTATION: stamp(NOW),
         gpu_reclaim.DEADLINE_ANNOTATION: stamp(NOW + 4 * HOUR)},
        {gpu_reclaim.REPORTED_ANNOTATION: stamp(NOW + HOUR),
         gpu_reclaim.DEADLINE_ANNOTATION: stamp(NOW + 5 * HOUR),
         gpu_reclaim.KEEP_ALIVE_ANNOTATION: None, gpu_reclaim.KEEP_ALIVES_ANNOTATION: "1"}]
    events = [body for method, path, body in api.calls if method == "POST" and body]
    assert {e["reason"] for e in events} == {"GpuIdle", "GpuIdleKeptAlive"}
    assert "kept it alive (1 of 1). It will be evicted if still idle after 4h (from " \
           f"{stamp(NOW + 5 * HOUR)})" in events[-1]["note"]
    # Reported before the namespace was on evict (or with another grace period): the next run
    # writes the deadline the policy gives now.
    waiting = pod("nb", reported=NOW - HOUR)
    [skip] = actor.decide(config, {("research", "nb"): 1}, [waiting], NOW)
    assert skip.why == f"in its grace period until {stamp(NOW + 3 * HOUR)}"
    actor.act(api, config, skip, waiting, NOW, set())
    assert api.calls[-1][2] == {"metadata": {"annotations": {
        gpu_reclaim.DEADLINE_ANNOTATION: stamp(NOW + 3 * HOUR)}}}
    # Active again: the report, the deadline and the count go.
    [clear] = actor.decide(config, {}, [pod("nb", reported=NOW)], NOW)
    actor.act(api, config, clear, pod("nb"), NOW, set())
    assert api.calls[-1][2] == {"metadata": {"annotations": {
        gpu_reclaim.REPORTED_ANNOTATION: None, gpu_reclaim.DEADLINE_ANNOTATION: None,
        gpu_reclaim.KEEP_ALIVES_ANNOTATION: None}}}
