"""What a reclaim run does with the pods it evicts that a Kueue Workload holds, against an API
server stand-in that records every call: the whole workload goes back to its queue (found up the
pod's controllers, through the kinds Kueue admits), once its disruption budgets allow it; and a
pod gone since the run listed it does not stop the run."""

import pytest

from components import gpu_reclaim
from components.gpu_reclaim.actor import gpu_reclaim as actor
from tests.unit.test_reclaim import HOUR, NOW, config_of, pod, stamp


class FakeApi(actor.Api):
    """The API server as a run sees it: a team namespace's Workloads, whose quota Kueue frees
    once one is deactivated; every call recorded."""

    def __init__(self, workloads: list[dict] | None, budget_refuses: bool = False,
                 gone: frozenset[str] = frozenset(), owners: tuple[dict, ...] = ()):
        """`workloads`: None where no Kueue serves them; `gone`: pods deleted since the run
        listed them; `owners`: the objects above the pods (Jobs, JobSets...), by their API
        paths."""
        self.gone = gone
        self.owners = {owner_path(o): o for o in owners}
        self.serves_workloads = workloads is not None
        self.workloads = {w["metadata"]["name"]: w for w in workloads or []}
        self.budget_refuses = budget_refuses
        self.calls: list[tuple[str, str, dict | None]] = []

    def call(self, method: str, path: str, body: dict | None = None,
             content_type: str = "application/json") -> tuple[int, dict]:
        self.calls.append((method, path, body))
        name = path.rpartition("/")[2]
        if method == "PATCH" and name in self.gone:
            return 404, {"message": f'pods "{name}" not found'}
        if path.endswith("/eviction?dryRun=All") or path.endswith("/eviction"):
            return (429, {"message": "Cannot evict pod as it would violate the pod's "
                                     "disruption budget."}) if self.budget_refuses else (201, {})
        if path.endswith("/workloads"):
            return ((200, {"items": list(self.workloads.values())}) if self.serves_workloads
                    else (404, {"message": "404 page not found"}))
        if method == "PATCH" and name in self.workloads:
            assert body is not None
            workload = self.workloads[name]
            workload["spec"].update(body["spec"])
            if body["spec"].get("active") is False:     # Kueue evicts it
                workload["status"]["conditions"] = [{"type": "QuotaReserved",
                                                     "status": "False"}]
            return 200, workload
        if method == "GET" and name in self.workloads:
            return 200, self.workloads[name]
        if method == "GET":
            return (200, self.owners[path]) if path in self.owners else \
                (404, {"message": f"{path} not found"})
        return 201, {}


def owner_path(obj: dict) -> str:
    resource = {"Job": "jobs", "JobSet": "jobsets", "TrainJob": "trainjobs",
                "LeaderWorkerSet": "leaderworkersets", "StatefulSet": "statefulsets"}
    meta = obj["metadata"]
    return (f"/apis/{obj['apiVersion']}/namespaces/{meta['namespace']}/"
            f"{resource[obj['kind']]}/{meta['name']}")


def owned(api_version: str, kind: str, name: str, owner: dict | None = None) -> dict:
    """An object of the team namespace, controlled by `owner`."""
    meta: dict = {"name": name, "namespace": "research", "uid": f"{kind}-{name}-uid"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True}]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}



def admitted_workload(owner_uid: str = "train-uid", name: str = "job-train-1a2b") -> dict:
    return {"metadata": {"name": name, "namespace": "research", "uid": f"{name}-uid",
                         "ownerReferences": [{"kind": "Job", "name": "train",
                                              "uid": owner_uid}]},
            "spec": {"active": True},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}


def evict(api, pods: list[dict]) -> list[str]:
    config, requeued = config_of(), set()
    return [actor.act(api, config, actor.Decision(
        p["metadata"]["namespace"], p["metadata"]["name"], "evict",
        "idle after its grace period", 1, NOW - 5 * HOUR), p, NOW, requeued) for p in pods]


def test_a_team_pod_kueue_admitted_goes_back_to_the_queue_with_its_workload_once():
    api = FakeApi([admitted_workload()])
    outcomes = evict(api, [pod("train-0"), pod("train-1")])
    assert outcomes == ["requeued with its workload"] * 2
    writes = [(m, p.rpartition("/")[2], b) for m, p, b in api.calls if m in ("POST", "PATCH")
              and "events" not in p]
    # A dry-run eviction first (the budgets), then off the queue and back, once for both pods.
    assert writes == [
        ("POST", "eviction?dryRun=All", writes[0][2]),
        ("PATCH", "job-train-1a2b", {"metadata": {"annotations": {
            gpu_reclaim.REQUEUED_ANNOTATION: stamp(NOW)}}, "spec": {"active": False}}),
        ("PATCH", "job-train-1a2b", {"metadata": {"annotations": {
            gpu_reclaim.REQUEUED_ANNOTATION: None}}, "spec": {"active": True}})]


def test_a_disruption_budget_keeps_a_team_pod_and_its_workload():
    api = FakeApi([admitted_workload()], budget_refuses=True)
    assert evict(api, [pod("train-0")]) == ["eviction refused by a disruption budget"]
    assert not [c for c in api.calls if c[0] == "PATCH"]


@pytest.mark.parametrize("workloads", [[admitted_workload(owner_uid="another-job")], None],
                         ids=["another job's", "no Kueue"])
def test_a_pod_no_workload_of_its_namespace_holds_is_evicted(workloads):
    api = FakeApi(workloads)
    assert evict(api, [pod("train-0")]) == ["evicted"]
    assert [p for m, p, _ in api.calls if m == "POST" and "eviction" in p] == [
        "/api/v1/namespaces/research/pods/train-0/eviction"]


def test_a_bare_pod_that_owns_its_workload_is_evicted_not_requeued():
    """Kueue's pod integration: the Workload belongs to the pod, and would go with it; the pod
    is evicted through the eviction API and Kueue ends the Workload."""
    notebook = pod("notebook-0", owner=None)
    api = FakeApi([admitted_workload(owner_uid=notebook["metadata"]["uid"])])
    assert evict(api, [notebook]) == ["evicted"]
    assert [p for m, p, _ in api.calls if m in ("POST", "PATCH") and "events" not in p] == [
        "/api/v1/namespaces/research/pods/notebook-0/eviction"]


def test_a_workload_a_run_left_off_its_queue_is_put_back_by_the_next():
    left = admitted_workload()
    left["metadata"]["annotations"] = {gpu_reclaim.REQUEUED_ANNOTATION: stamp(NOW - 600)}
    left["spec"]["active"] = False
    left["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False"}]
    api = FakeApi([left])
    assert actor.put_back_left(api, config_of()) == ["research/job-train-1a2b"]
    assert left["spec"]["active"] is True


@pytest.mark.parametrize("action", ["report", "clear"])
def test_a_pod_deleted_after_the_run_listed_it_does_not_stop_the_run(action):
    api = FakeApi(None, gone=frozenset({"notebook"}))
    decision = actor.Decision("research", "notebook", action, "idle", 1, NOW)
    outcome = actor.act(api, config_of(), decision, pod("notebook"), NOW, set())
    assert outcome.startswith("gone before")


def test_a_pod_of_a_framework_goes_back_to_the_queue_with_the_workload_up_its_controllers():
    # A TrainJob's pod: its Job's controller is a JobSet, whose controller is the TrainJob,
    # which Kueue's Workload belongs to.
    trainjob = owned("trainer.kubeflow.org/v1alpha1", "TrainJob", "finetune")
    jobset = owned("jobset.x-k8s.io/v1alpha2", "JobSet", "finetune", trainjob)
    job = owned("batch/v1", "Job", "train", jobset)
    api = FakeApi([admitted_workload(owner_uid="TrainJob-finetune-uid",
                                     name="trainjob-finetune")], owners=(job, jobset))
    assert evict(api, [pod("train-0")]) == ["requeued with its workload"]
    assert [p.rpartition("/")[2] for m, p, _ in api.calls if m == "PATCH"] == [
        "trainjob-finetune", "trainjob-finetune"]


def test_a_pod_whose_owner_has_several_workloads_is_evicted_alone():
    # A LeaderWorkerSet's group: its owner holds one Workload per group.
    lws = owned("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "serve")
    statefulset = owned("apps/v1", "StatefulSet", "serve-0", lws)
    pod_ = pod("serve-0-1")
    pod_["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                            "name": "serve-0", "uid": "StatefulSet-serve-0-uid",
                                            "controller": True}]
    api = FakeApi([admitted_workload(owner_uid="LeaderWorkerSet-serve-uid",
                                     name=f"lws-serve-{group}")
                   for group in (0, 1)], owners=(statefulset,))
    assert evict(api, [pod_]) == ["evicted"]
    assert not [c for c in api.calls if c[0] == "PATCH"]


def test_owners_of_kinds_kueue_does_not_admit_are_not_followed():
    api = FakeApi([admitted_workload(owner_uid="elsewhere")])
    pod_ = pod("train-0")
    pod_["metadata"]["ownerReferences"][0] |= {"apiVersion": "example.com/v1", "kind": "Custom"}
    assert evict(api, [pod_]) == ["evicted"]
    assert not [c for c in api.calls if c[0] == "GET" and "example.com" in c[1]]
