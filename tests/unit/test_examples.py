"""The users' example manifests (docs/users/examples) say what happens to them, and it happens:
each is valid for the example stack's Kubernetes version, and the pod it makes (a controller's
pod for a Job, Deployment or StatefulSet) is admitted or refused by the admission policy in real
OPA, with the policy and parameters of the program's ConfigMaps, as its first line expects."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components.base import facts
from tests.kit import harness
from tests.kit.policy_harness import decide, deployed_policy, review, sent_to_opa

EXAMPLES = harness.ROOT / "docs" / "users" / "examples"
EXPECT = re.compile(r"^# expect: (allowed|refused: (?P<fragment>.+))$")

# Who creates a workload's pods from each of its pod templates (a path: `[]` for each item of a
# list, `{}` for each value of a map), and the owner reference it sets on them: kube-controller-
# manager's controllers with --use-service-account-credentials, the frameworks' operators with
# their own ServiceAccounts (as their charts install them).
KCM = "system:serviceaccount:kube-system:"
JOBS_PODS = (KCM + "job-controller", "batch/v1", "Job")
RAY_PODS = ("system:serviceaccount:default:kuberay-operator", "ray.io/v1", "RayCluster")
CONTROLLERS = {
    ("batch/v1", "Job"): {"spec.template": JOBS_PODS},
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): {
        "spec.replicatedJobs[].template.spec.template": JOBS_PODS},
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): {
        "spec.template.spec.replicatedJobs[].template.spec.template": JOBS_PODS},
    ("apps/v1", "Deployment"): {"spec.template": (KCM + "replicaset-controller", "apps/v1",
                                                  "ReplicaSet")},
    ("apps/v1", "StatefulSet"): {"spec.template": (KCM + "statefulset-controller", "apps/v1",
                                                   "StatefulSet")},
    ("apps/v1", "DaemonSet"): {"spec.template": (KCM + "daemon-set-controller", "apps/v1",
                                                 "DaemonSet")},
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): {
        f"spec.leaderWorkerTemplate.{role}Template": (KCM + "statefulset-controller", "apps/v1",
                                                      "StatefulSet")
        for role in ("leader", "worker")},
    ("ray.io/v1", "RayCluster"): {"spec.headGroupSpec.template": RAY_PODS,
                                  "spec.workerGroupSpecs[].template": RAY_PODS},
    ("ray.io/v1", "RayJob"): {"spec.rayClusterSpec.headGroupSpec.template": RAY_PODS,
                              "spec.rayClusterSpec.workerGroupSpecs[].template": RAY_PODS,
                              "spec.submitterPodTemplate": JOBS_PODS},
    # A TrainJob has no pod template: its pods are its runtime's (a TrainingRuntime above).
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): {},
    ("kubeflow.org/v1", "PyTorchJob"): {"spec.pytorchReplicaSpecs{}.template": (
        "system:serviceaccount:kubeflow:training-operator", "kubeflow.org/v1", "PyTorchJob")},
}
# Kinds that make no pod themselves: a TrainJob that names one does (through a JobSet), so
# nothing is warned of when one is applied.
RUNTIMES = {"TrainingRuntime"}
# Built-in priority classes every cluster has.
SYSTEM_PRIORITIES = {"system-cluster-critical": 2_000_000_000,
                     "system-node-critical": 2_000_001_000}
# Manifests every reader is promised (docs/users/submitting-gpu-workloads.md links them).
PROMISED = {
    "allowed": {"pod", "job", "deployment", "statefulset", "preemptible-checkpointing-job",
                "compaction-deployment", "node-agent-daemonset", "cpu-variant-zero-gpus",
                "jobset", "leaderworkerset", "raycluster", "rayjob", "pytorchjob",
                "trainingruntime", "shared-memory-job"},
    "queued": {"job", "jobset", "deployment", "pod", "rayjob", "pytorchjob"},
    "refused": {"default-scheduler", "node-name", "cpu-pod-tolerating-gpu-taint",
                "nvidia-visible-devices", "nvidia-runtime-class-without-gpu",
                "privileged-gpu-container", "bare-pod-preemptible", "priority-above-zero",
                "privileged-node-agent", "sys-admin-sidecar", "host-devices", "cdi-annotation"},
}


@dataclass(frozen=True)
class Expectation:
    allowed: bool
    fragment: str = ""


def expectation(text: str, name: str = "manifest") -> Expectation:
    """The outcome a manifest's first line states: `# expect: allowed` or
    `# expect: refused: <a fragment of the refusal message>`."""
    first = text.splitlines()[0] if text else ""
    match = EXPECT.match(first)
    assert match, f"{name}: the first line must be '# expect: allowed' or " \
                  f"'# expect: refused: <fragment>', not {first!r}"
    return Expectation(match["fragment"] is None, match["fragment"] or "")


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*/*.yaml"))


def as_created(pod: dict, settings) -> dict:
    """The pod as the validating webhook sees it: the API server has defaulted the scheduler
    name and resolved priorityClassName to spec.priority (the Priority admission plugin runs
    before webhooks)."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    spec.setdefault("schedulerName", "default-scheduler")
    classes = {**SYSTEM_PRIORITIES, settings.scheduler.preemptible_class.name:
               settings.scheduler.preemptible_class.value}
    name = spec.get("priorityClassName")
    if name:
        assert name in classes, f"priority class {name} is not one every cluster has"
        spec["priority"] = classes[name]
    else:
        spec["priority"] = 0
    return pod


def at(obj, path: str) -> list:
    """The values at a dotted path (`[]`: each item of a list, `{}`: each value of a map)."""
    values = [obj]
    for field in path.split("."):
        each = field[-2:] in ("[]", "{}")
        values = [v.get(field[:-2] if each else field) for v in values if isinstance(v, dict)]
        if each:
            values = [item for v in values if v
                      for item in (v.values() if isinstance(v, dict) else v)]
    return [v for v in values if v is not None]


def pod_templates(manifest: dict) -> list[tuple[dict, tuple[str, str, str]]]:
    """Each template of the pods a workload makes, with who makes them and the owner."""
    key = (manifest["apiVersion"], manifest["kind"])
    return [(template, maker) for path, maker in CONTROLLERS[key].items()
            for template in at(manifest, path)]


def asks_for_gpus(template: dict) -> bool:
    return any(name.startswith("nvidia.com/")
               for c in template["spec"].get("containers", [])
               for amounts in c.get("resources", {}).values() for name in amounts)


def as_kueue_leaves_it(manifest: dict, settings) -> dict:
    """A queued workload as Kueue has it when the webhook sees its pods: a pod (bare, or a
    Deployment's or StatefulSet's) held by Kueue's admission gate; a Job's (or JobSet's)
    template carrying the admission Kueue wrote into it, with the flavor's tolerations."""
    manifest = copy.deepcopy(manifest)
    kind = manifest["kind"]
    if kind in ("Pod", "Deployment", "StatefulSet", "LeaderWorkerSet"):
        # Kueue 0.19.2: its pod webhook gates the pod and labels a bare one as managed; the
        # Deployment, StatefulSet and LeaderWorkerSet webhooks mark the templates as held by
        # their parent (and a Deployment's as managed), which the ReplicaSet and StatefulSet
        # controllers then copy.
        pods = [manifest] if kind == "Pod" else [t for t, _ in pod_templates(manifest)]
        for pod in pods:
            pod["spec"]["schedulingGates"] = [{"name": facts.ADMISSION_GATE},
                                              {"name": facts.TOPOLOGY_GATE}]
            metadata = pod.setdefault("metadata", {})
            if kind in ("Pod", "Deployment"):
                metadata.setdefault("labels", {})[facts.MANAGED_LABEL] = "true"
            if kind != "Pod":
                metadata.setdefault("annotations", {})[facts.PARENT_ANNOTATION] = kind.lower()
    else:
        # A pod set that asks for GPUs is admitted on a GPU flavor, whose tolerations Kueue
        # writes into its template; one that asks for none (a Ray head) on the flavor that
        # only counts pods, which has none.
        for template, _ in pod_templates(manifest):
            template.setdefault("metadata", {}).setdefault("labels", {})[
                facts.PODSET_LABEL] = "main"
            if asks_for_gpus(template):
                template["spec"]["tolerations"] = [t.toleration()
                                                   for t in settings.gpu_nodes.taints]
    return manifest


def admission_reviews(manifest: dict, settings, queued: bool = False) -> list[dict]:
    """The AdmissionReviews the API server sends for the objects the manifest makes the webhook
    see: the pod itself, the pods controllers create from a workload's templates (one per
    template), or a claim; with `queued`, once Kueue holds them for their team's queue."""
    if queued:
        manifest = as_kueue_leaves_it(manifest, settings)
    kind = manifest["kind"]
    meta = manifest["metadata"]
    namespace = meta.get("namespace", "default")
    if manifest["apiVersion"].startswith("resource.k8s.io/"):
        return [review(manifest["spec"], kind=kind, group="resource.k8s.io",
                       namespace=namespace, name=meta["name"])]
    if kind == "Pod":
        pod = as_created(manifest, settings)
        return [review(pod["spec"], namespace=namespace, name=meta["name"],
                       metadata={k: v for k, v in pod["metadata"].items()
                                 if k not in ("name", "namespace")})]
    reviews = []
    for template, (maker, owner_version, owner_kind) in pod_templates(manifest):
        template = as_created(template, settings)
        owner = {"apiVersion": owner_version, "kind": owner_kind, "uid": "0b1c-example",
                 "name": meta["name"] if owner_kind != "ReplicaSet"
                 else f"{meta['name']}-6d4cf56db6",
                 "controller": True, "blockOwnerDeletion": True}
        names = ({"name": f"{meta['name']}-0"} if owner_kind == "StatefulSet" else
                 {"name": None, "generate_name": f"{owner['name']}-"})
        reviews.append(review(template["spec"], namespace=namespace, user=maker,
                              metadata={**template.get("metadata", {}),
                                        "ownerReferences": [owner]},
                              **names))
    return reviews


def admission_review(manifest: dict, settings, queued: bool = False) -> dict:
    """The first of admission_reviews: the pod, or a workload's first template's pod."""
    return admission_reviews(manifest, settings, queued)[0]


def workload_review(manifest: dict) -> dict | None:
    """The AdmissionReview of a workload's own creation (None for a pod or a claim)."""
    if manifest["kind"] == "Pod" or manifest["apiVersion"].startswith("resource.k8s.io/"):
        return None
    group = manifest["apiVersion"].rpartition("/")[0]
    meta = manifest["metadata"]
    return review(manifest["spec"], kind=manifest["kind"], group=group,
                  namespace=meta.get("namespace", "default"), name=meta["name"],
                  metadata={k: v for k, v in meta.items() if k not in ("name", "namespace")})


def templates_webhook(deployed) -> dict:
    """The platform's validating webhook on workloads' pod templates."""
    return next(w for w in deployed["webhooks"]
                if w["clientConfig"]["service"]["path"].endswith("/templates"))


def webhook_for(deployed, request_) -> dict:
    """The platform's validating webhook whose rules match the request's resource."""
    resource = {"Pod": "pods", "ResourceClaim": "resourceclaims",
                "ResourceClaimTemplate": "resourceclaimtemplates"}[
        request_["request"]["kind"]["kind"]]
    return next(w for w in deployed["webhooks"]
                if any(resource in rule["resources"] for rule in w["rules"]))


def check(opa_bin, deployed, manifest: dict, expected: Expectation, queued: bool = False,
          warned_at_apply: bool = True) -> None:
    """Fails unless the policy decides as `expected`: every pod allowed with no warning, or a
    pod refused with a message that contains the fragment (and the API server would ask OPA at
    all); and a workload's own `kubectl apply` admitted, with no warning or (`warned_at_apply`)
    with one that contains the fragment (from the templates webhook)."""
    refusals = []
    for request_ in admission_reviews(manifest, deployed["settings"], queued):
        response = decide(opa_bin, deployed, request_)
        if expected.allowed:
            assert response["allowed"] is True, response.get("status", {}).get("message")
            assert not response.get("warnings"), response["warnings"]
        elif response["allowed"] is False:
            refusals.append(response["status"]["message"])
            assert sent_to_opa(webhook_for(deployed, request_), request_), \
                "the webhook's matchConditions never send this to OPA"
    if not expected.allowed:
        assert refusals, "admitted, expected refused"
        assert any(expected.fragment in m for m in refusals), \
            f"{expected.fragment!r} not in {refusals!r}"
    workload = workload_review(manifest)
    if workload is None or not (expected.allowed or (
            warned_at_apply and manifest["kind"] not in RUNTIMES)):
        return
    warnings = decide(opa_bin, deployed, workload, rule="templates").get("warnings", [])
    if expected.allowed:
        assert not warnings, warnings
    else:
        assert any(expected.fragment in w for w in warnings), \
            f"no warning at kubectl apply has {expected.fragment!r}: {warnings!r}"
        assert sent_to_opa(templates_webhook(deployed), workload), \
            "the templates webhook's matchConditions never send this to OPA"


@pytest.mark.parametrize("path", examples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_is_decided_as_its_first_line_says(opa_bin, deployed, path):
    text = path.read_text()
    expected = expectation(text, str(path))
    assert expected.allowed == (path.parent.name in ("allowed", "queued")), \
        f"{path}: the directory and the expectation disagree"
    documents = [d for d in yaml.safe_load_all(text) if d]
    assert len(documents) == 1, f"{path}: one object per example"
    check(opa_bin, deployed, documents[0], expected, queued=path.parent.name == "queued")


# --- the examples under every stack shape: the defaults are what users get ----------------

MINIMAL_STACK = harness.ROOT / "docs" / "operators" / "examples" / "Pulumi.minimal.yaml"
# The queued examples' namespaces, and the team each belongs to.
TEAM_NAMESPACES = {"research": ["research"], "vision": ["vision", "vision-serving"]}
# Where an allowed example moves on a platform with teams (the users' page says so).
TEAM_NAMESPACE = "research"


def minimal_settings() -> dict:
    """The minimal stack file's settings (keys without the `gpu-platform:` prefix)."""
    config = yaml.safe_load(MINIMAL_STACK.read_text())["config"]
    return {key.split(":", 1)[1]: value for key, value in config.items()}


def teams_at_their_defaults() -> dict:
    """The minimal stack with teams on and nothing else set: GPU pods outside the teams'
    namespaces refused, as by default."""
    return {**minimal_settings(), "teams": {"enabled": True, "teams": [
        {"name": team, "namespaces": namespaces, "quota": {"gpu": {"nvidia.com/gpu": 8}}}
        for team, namespaces in TEAM_NAMESPACES.items()]}}


@pytest.fixture(scope="module", params=["minimal", "example", "teams at their defaults"])
def shape(request, tmp_path_factory, deployed):
    """The admission policy as each stack shape deploys it."""
    if request.param == "example":
        return request.param, deployed
    settings = minimal_settings() if request.param == "minimal" else teams_at_their_defaults()
    config = harness.stack_file_config(settings)
    return request.param, deployed_policy(harness.run_program(config),
                                          harness.settings_of(config), tmp_path_factory.mktemp)


def in_namespace(manifest: dict, namespace: str) -> dict:
    moved = copy.deepcopy(manifest)
    moved["metadata"]["namespace"] = namespace
    return moved


@pytest.mark.parametrize("path", examples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_is_decided_as_the_users_page_says_under_every_stack_shape(
        opa_bin, shape, path):
    """Minimal stack and example stack: as its first line says. With teams at their defaults
    (GPU pods only in the teams' namespaces), as the users' page says: a queued example is
    admitted once Kueue holds it; an allowed GPU example is refused in `team-a`, naming the
    teams' namespaces, and admitted in a team's namespace once Kueue holds it; a refused one is
    still refused for its own reason."""
    name, policy = shape
    text = path.read_text()
    expected = expectation(text, str(path))
    (manifest,) = [d for d in yaml.safe_load_all(text) if d]
    teams_on = policy["settings"].teams.enabled
    if path.parent.name == "queued":
        if not teams_on:
            pytest.skip("queued examples are for platforms with teams (the users' page says so)")
        check(opa_bin, policy, manifest, expected, queued=True)
        return
    if name != "teams at their defaults" or not expected.allowed:
        check(opa_bin, policy, manifest, expected)
        return
    asks = any(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", "0") not in
               ("0", 0) for r in admission_reviews(manifest, policy["settings"])
               for c in r["request"]["object"]["spec"]["containers"])
    if not asks:
        check(opa_bin, policy, manifest, expected)
        return
    check(opa_bin, policy, manifest, Expectation(False, "which belongs to no team: GPU pods run "
                                                        "in the namespaces of a team"))
    check(opa_bin, policy, in_namespace(manifest, TEAM_NAMESPACE), expected, queued=True)


def test_a_queued_example_outside_kueue_is_refused_naming_the_queue(opa_bin, deployed):
    """Without Kueue's hold, the same Job's pods are pods outside the team's queue (which is
    decided on the pods and on the Job's start, not warned of when it is applied: Kueue holds
    it then)."""
    job = yaml.safe_load((EXAMPLES / "queued" / "job.yaml").read_text())
    check(opa_bin, deployed, job, Expectation(False, "LocalQueue research/default"),
          warned_at_apply=False)


@pytest.mark.parametrize("path", examples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_is_valid_for_the_stacks_kubernetes_version(example_settings, path):
    for document in yaml.safe_load_all(path.read_text()):
        group = document["apiVersion"].rpartition("/")[0]
        if group.endswith(".x-k8s.io") or (group.count(".") and not group.endswith(".k8s.io")):
            continue    # a project's CRD (JobSet, LWS, KubeRay, Kubeflow), which the official
            # schemas do not cover
        try:
            kubernetes_validate.validate(document, example_settings.kubernetes_version,
                                         strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{path}: {error.message} at {'/'.join(map(str, error.path))}")


def test_every_promised_example_exists():
    for outcome, names in PROMISED.items():
        present = {p.stem for p in (EXAMPLES / outcome).glob("*.yaml")}
        assert names <= present, f"missing in {outcome}/: {sorted(names - present)}"


def test_a_wrong_expectation_fails(opa_bin, deployed):
    """The check is not vacuous: an allowed example expected refused, a refused one expected
    allowed, and a refusal expected with a message it does not give, each fail."""
    allowed = yaml.safe_load((EXAMPLES / "allowed" / "job.yaml").read_text())
    refused = yaml.safe_load((EXAMPLES / "refused" / "default-scheduler.yaml").read_text())
    wrong = [(allowed, Expectation(False, "schedulerName")),
             (refused, Expectation(True)),
             (refused, Expectation(False, "a message the policy never gives"))]
    for manifest, expected in wrong:
        with pytest.raises(AssertionError):
            check(opa_bin, deployed, manifest, expected)


def test_expectation_line_is_required():
    assert expectation("# expect: refused: skips the scheduler\nkind: Pod") == Expectation(
        False, "skips the scheduler")
    assert expectation("# expect: allowed\n") == Expectation(True)
    for bad in ("kind: Pod\n", "# expect: admitted\n", "# expect: refused:\n", ""):
        with pytest.raises(AssertionError):
            expectation(bad)


def test_controller_pods_carry_the_controllers_owner_reference(example_settings):
    """The policy tells a controller's pod from a bare one by this reference."""
    job = yaml.safe_load((EXAMPLES / "allowed" / "preemptible-checkpointing-job.yaml")
                         .read_text())
    pod = admission_review(job, example_settings)["request"]
    (owner,) = pod["object"]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["controller"]) == ("Job", True)
    assert pod["userInfo"]["username"].endswith(":job-controller")
    assert pod["object"]["spec"]["priority"] == example_settings.scheduler.preemptible_class.value
