"""The frameworks' jobs in a team namespace, on a real control plane: the real Kueue with the
Configuration the platform generates at the default `teams.frameworks`, the CRDs of KubeRay,
Kubeflow Trainer and JobSet (from their modules, at the versions Kueue v0.19.2 is built
against), the queues and OPA's webhooks as declared, the binpack scheduler, a real
kube-controller-manager and a fake kubelet.

The frameworks' controllers do not run here. What they do with a workload Kueue started is
done by the test, under their ServiceAccounts' names, as the suite plays the kubelet: KubeRay's
operator creates a RayJob's RayCluster and its pods; Kubeflow Trainer creates a TrainJob's
JobSet from its runtime and the patch Kueue wrote; JobSet's controller creates the Job (whose
pods the real Job controller makes)."""

import copy
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml
from kueue import API_VERSION, source
from test_settings import with_changes

import tools
from components.base.facts import GPU_RESOURCE, PODSET_LABEL
from components.teams.settings import WORKLOAD_CONTROLLERS
from controlplane import ApiError, Kube, wait_until
from declared_objects import TEST_MANAGER
from nodes_and_pods import create_gpu_node
from running_platform import RunningPlatform, run_platform

TEAM = "research"
NODES = ("gpu-1", "gpu-2")
STACK = with_changes(
    gpuNodes={"names": list(NODES)},
    teams={"enabled": True, "waitForPodsReady": "120s",
           "teams": [{"name": TEAM, "namespaces": [TEAM],
                      "quota": {"gpu": {GPU_RESOURCE: 8 * len(NODES)}}}]})
# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "users" / "examples"
# The frameworks' CRDs, by module, as their release manifests install them.
CRDS = {
    "github.com/ray-project/kuberay/ray-operator": (
        "config/crd/bases/ray.io_rayjobs.yaml", "config/crd/bases/ray.io_rayclusters.yaml"),
    "github.com/kubeflow/trainer/v2": tuple(
        f"manifests/base/crds/trainer.kubeflow.org_{plural}.yaml"
        for plural in ("trainjobs", "trainingruntimes", "clustertrainingruntimes")),
    "sigs.k8s.io/jobset": ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
}
JOBSET_CONTROLLER, TRAINER, KUBERAY, _ = WORKLOAD_CONTROLLERS
USER = "alice"


def framework_crds() -> Iterator[dict]:
    go_mod = (source() / "go.mod").read_text()
    for module, files in CRDS.items():
        version = re.search(rf"^\s*{re.escape(module)} (v\S+)$", go_mod, re.MULTILINE)
        assert version, f"{module} is not in Kueue's go.mod"
        root = tools.module_source(module, version[1])
        for file in files:
            yield yaml.safe_load((root / file).read_text())


@pytest.fixture(scope="module")
def platform(control_plane) -> Iterator[RunningPlatform]:
    kube = control_plane.admin
    # Before Kueue starts, so that it sets up every framework's integration at once.
    kube.install_crds(list(framework_crds()), TEST_MANAGER)
    with ExitStack() as stack:
        running = run_platform(stack, control_plane, STACK)
        for node in NODES:
            create_gpu_node(kube, running.settings, node, gpus=8)
        # RBAC lets them all: what they may do with a team's workloads is admission's to say.
        kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "frameworks-and-a-user"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "cluster-admin"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                  "name": user}
                                 for user in (USER, KUBERAY, TRAINER, JOBSET_CONTROLLER)]},
                   TEST_MANAGER)
        wait_until(lambda: active(kube), "the team's ClusterQueue to be active", timeout=60)
        yield running


def active(kube: Kube) -> bool:
    queue = kube.get(API_VERSION, "ClusterQueue", TEAM)
    return any(c["type"] == "Active" and c["status"] == "True"
               for c in queue.get("status", {}).get("conditions", []))


def example(path: str, **metadata: str) -> dict:
    manifest = yaml.safe_load((EXAMPLES / path).read_text())
    manifest["metadata"] |= {"namespace": TEAM, **metadata}
    return manifest


def workload_of(kube: Kube, name: str) -> dict:
    return next((w for w in kube.list(API_VERSION, "Workload", TEAM)
                 if any(o["name"] == name for o in w["metadata"].get("ownerReferences", []))),
                {})


def condition(workload: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True"
               for c in workload.get("status", {}).get("conditions", []))


def owner(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def pod_from(template: dict, name: str, parent: dict) -> dict:
    """The pod a controller makes from `template` for `parent`."""
    metadata = copy.deepcopy(template.get("metadata", {}))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**metadata, "name": name, "namespace": TEAM,
                         "ownerReferences": [owner(parent)]},
            "spec": copy.deepcopy(template["spec"])}


def refusal(request) -> str:
    with pytest.raises(ApiError) as refused:
        request()
    return str(refused.value)


def running_on(kube: Kube, names: list[str]) -> dict[str, str]:
    """Each pod's node, once all of them run."""
    pods = {n: kube.get("v1", "Pod", n, TEAM) for n in names}
    if all(p.get("status", {}).get("phase") == "Running" for p in pods.values()):
        return {n: p["spec"]["nodeName"] for n, p in pods.items()}
    return {}


def gpu_tolerations(settings) -> list[dict]:
    return [t.toleration() for t in settings.gpu_nodes.taints]


def test_a_rayjob_is_admitted_whole_and_its_cluster_runs_where_the_policy_says(platform):
    kube, cp = platform.kueue.kube, platform.kueue.cp
    created = kube.create(example("queued/rayjob.yaml"))
    assert created["spec"]["suspend"] is True, "Kueue's webhook did not suspend the RayJob"
    wait_until(lambda: not kube.get("ray.io/v1", "RayJob", "tune", TEAM)["spec"].get("suspend"),
               "Kueue to start the RayJob", timeout=60,
               explain=lambda: f"its Workload: {workload_of(kube, 'tune').get('status')}")
    rayjob = kube.get("ray.io/v1", "RayJob", "tune", TEAM)
    cluster_spec = rayjob["spec"]["rayClusterSpec"]
    head = cluster_spec["headGroupSpec"]["template"]
    workers = cluster_spec["workerGroupSpecs"][0]["template"]
    # Every pod set admitted at once: the head (CPU only) on the flavor that counts pods, the
    # workers on the GPU flavor, whose tolerations Kueue wrote into their template.
    assert head["metadata"]["labels"][PODSET_LABEL] and workers["metadata"]["labels"][PODSET_LABEL]
    assert not head["spec"].get("tolerations")
    assert all(t in workers["spec"]["tolerations"] for t in gpu_tolerations(platform.settings))

    # KubeRay's operator: the cluster, then its pods.
    operator = cp.impersonating(KUBERAY)
    cluster = operator.create({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                               "metadata": {"name": "tune", "namespace": TEAM,
                                            "ownerReferences": [owner(rayjob)]},
                               "spec": cluster_spec})
    names = ["tune-head"] + [f"tune-gpu-workers-{i}" for i in range(4)]
    operator.create(pod_from(head, names[0], cluster))
    for name in names[1:]:
        operator.create(pod_from(workers, name, cluster))
    nodes = wait_until(lambda: running_on(kube, names), "the Ray cluster's pods to run",
                       timeout=60)
    # The four 1-GPU workers packed onto one GPU node; the head off the GPU nodes.
    assert nodes["tune-head"] not in NODES
    assert len({nodes[n] for n in names[1:]}) == 1 and nodes[names[1]] in NODES


def test_a_rayjob_beyond_the_quota_waits_whole_and_no_one_but_kueue_starts_it(platform):
    kube, cp = platform.kueue.kube, platform.kueue.cp
    sweep = example("queued/rayjob.yaml", name="sweep")
    group = sweep["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    group |= {"replicas": 20, "minReplicas": 20, "maxReplicas": 20}
    kube.create(sweep)
    wait_until(lambda: workload_of(kube, "sweep").get("status", {}).get("conditions"),
               "Kueue to consider the RayJob")
    # More GPUs than the team's quota: none of its pods is admitted, and it stays suspended.
    assert not condition(workload_of(kube, "sweep"), "QuotaReserved")
    assert kube.get("ray.io/v1", "RayJob", "sweep", TEAM)["spec"]["suspend"] is True

    user = cp.impersonating(USER)
    assert 'RayJob "research/sweep": only Kueue starts a RayJob' in refusal(
        lambda: user.merge_patch("ray.io/v1", "RayJob", "sweep", {"spec": {"suspend": False}},
                                 TEAM))
    # A cluster passed off as the RayJob's own, which Kueue leaves to its owner.
    rayjob = kube.get("ray.io/v1", "RayJob", "sweep", TEAM)
    forged = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
              "metadata": {"name": "sweep", "namespace": TEAM,
                           "ownerReferences": [owner(rayjob)]},
              "spec": {**rayjob["spec"]["rayClusterSpec"], "suspend": False}}
    assert 'RayCluster "research/sweep" requests nvidia.com/gpu but was not suspended' in refusal(
        lambda: user.create(forged))
    kube.delete("ray.io/v1", "RayJob", "sweep", TEAM)


def test_a_trainjob_is_admitted_whole_and_runs_through_its_jobset(platform):
    kube, cp = platform.kueue.kube, platform.kueue.cp
    runtime = kube.create(example("allowed/trainingruntime.yaml"))
    trainjob = kube.create({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "finetune", "namespace": TEAM},
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                "name": runtime["metadata"]["name"]},
                 "trainer": {"numNodes": 1}}})
    assert trainjob["spec"]["suspend"] is True, "Kueue's webhook did not suspend the TrainJob"
    wait_until(lambda: not kube.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "finetune",
                                    TEAM)["spec"].get("suspend"),
               "Kueue to start the TrainJob", timeout=60,
               explain=lambda: f"its Workload: {workload_of(kube, 'finetune').get('status')}")
    trainjob = kube.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "finetune", TEAM)
    [patch] = [p["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
               for p in trainjob["spec"]["runtimePatches"]]
    admitted = patch["template"]["spec"]["template"]
    assert admitted["metadata"]["labels"][PODSET_LABEL] == patch["name"] == "node"

    # Kubeflow Trainer: the JobSet of the runtime's node Job, with Kueue's patch.
    replicated = copy.deepcopy(runtime["spec"]["template"]["spec"]["replicatedJobs"][0])
    pod = replicated["template"]["spec"]["template"]
    pod.setdefault("metadata", {}).setdefault("labels", {}).update(
        admitted["metadata"]["labels"])
    pod["spec"]["tolerations"] = admitted["spec"].get("tolerations", [])
    pod["spec"]["nodeSelector"] = admitted["spec"].get("nodeSelector", {})
    pod["spec"]["restartPolicy"] = "Never"
    jobset = cp.impersonating(TRAINER).create({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "finetune", "namespace": TEAM,
                     "ownerReferences": [owner(trainjob)]},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1,
                                     "template": replicated["template"]}]}})
    # JobSet's controller: its Job, whose pod the Job controller makes.
    cp.impersonating(JOBSET_CONTROLLER).create({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "finetune-node-0", "namespace": TEAM,
                     "ownerReferences": [owner(jobset)]},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": pod}})
    wait_until(lambda: [p for p in kube.list("v1", "Pod", TEAM,
                                             labelSelector="job-name=finetune-node-0")
                        if p.get("status", {}).get("phase") == "Running"
                        and p["spec"]["nodeName"] in NODES],
               "the TrainJob's pod to run on a GPU node", timeout=60)
    # A user starting another TrainJob is refused; Kueue alone starts one.
    queued = kube.create({**trainjob, "metadata": {"name": "again", "namespace": TEAM},
                          "spec": {k: v for k, v in trainjob["spec"].items()
                                   if k not in ("suspend", "runtimePatches")}})
    assert queued["spec"]["suspend"] is True
    assert 'TrainJob "research/again": only Kueue starts a TrainJob' in refusal(
        lambda: cp.impersonating(USER).merge_patch(
            "trainer.kubeflow.org/v1alpha1", "TrainJob", "again", {"spec": {"suspend": False}},
            TEAM))
