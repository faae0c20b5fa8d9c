"""The frameworks' jobs in a team namespace, on a real control plane: the real Kueue with the
Configuration the platform generates at the default `teams.frameworks`, the CRDs of KubeRay,
Kubeflow Trainer and JobSet (from their modules, at the versions Kueue v0.19.2 is built
against), the queues and OPA's webhooks as declared, the binpack scheduler, a real
kube-controller-manager and a fake kubelet. Here on a stack without a topology;
test_frameworks_topology.py runs the same tests on one with the `eks` preset.

The frameworks' controllers do not run here. What they do with a workload Kueue started is
done by the test, under their ServiceAccounts' names, as the suite plays the kubelet: KubeRay's
operator creates a RayJob's RayCluster, its pods and its submitter Job; Kubeflow Trainer creates
a TrainJob's JobSet from its runtime and the patches Kueue wrote; JobSet's controller creates
the Jobs (whose pods the real Job controller makes), each after those it depends on complete.

The shapes are the users' examples: pod sets that ask for no GPU (a Ray head and submitter, an
MPI launcher, a TrainJob's initializers) beside GPU pod sets that require one network node of
EKS's lowest layer. On the stack without a topology the same jobs run without that annotation
(Kueue admits no job that asks for a domain where there is no topology)."""

import copy
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.base.facts import GPU_RESOURCE, PODSET_LABEL
from components.teams.settings import TOPOLOGY_PRESETS, WORKLOAD_CONTROLLERS
from tests.kit import tools
from tests.kit.cluster.controlplane import ApiError, Kube, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.fake_kubelet import succeed
from tests.kit.cluster.kueue import API_VERSION, source
from tests.kit.cluster.nodes_and_pods import create_gpu_node
from tests.kit.cluster.running_platform import RunningPlatform, run_platform
from tests.kit.stacks import with_changes

TEAM = "research"
# Seven 8-GPU nodes with their EFA interfaces, as p5.48xlarge instances: under two network
# nodes of EKS's lowest layer (four and three), one above them, as EKS labels such instances.
LAYERS = TOPOLOGY_PRESETS["eks"]
NETWORK_NODES = {"nn-a": ("gpu-a1", "gpu-a2", "gpu-a3", "gpu-a4"),
                 "nn-b": ("gpu-b1", "gpu-b2", "gpu-b3")}
NETWORK_NODE_OF = {node: nn for nn, nodes in NETWORK_NODES.items() for node in nodes}
NODES = tuple(NETWORK_NODE_OF)
EFA = "vpc.amazonaws.com/efa"
CAPACITY = {GPU_RESOURCE: "8", EFA: "32", "cpu": "192", "memory": "2048Gi", "pods": "110"}


def stack(topology: dict | None, gpus: int = 8 * len(NODES)) -> dict:
    """The stack of these nodes and one team with a quota of `gpus` GPUs."""
    return with_changes(
        gpuNodes={"names": list(NODES)},
        teams={"enabled": True, "waitForPodsReady": "120s",
               **({"topology": topology} if topology else {}),
               "teams": [{"name": TEAM, "namespaces": [TEAM],
                          "quota": {"gpu": {GPU_RESOURCE: gpus}}}]})


STACK = stack(None)
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
TOPOLOGY_ANNOTATIONS = re.compile(r"^kueue\.x-k8s\.io/podset-(required|preferred)-topology$")
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")
RAYJOB = ("ray.io/v1", "RayJob")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")


def framework_crds() -> Iterator[dict]:
    go_mod = (source() / "go.mod").read_text()
    for module, files in CRDS.items():
        version = re.search(rf"^\s*{re.escape(module)} (v\S+)$", go_mod, re.MULTILINE)
        assert version, f"{module} is not in Kueue's go.mod"
        root = tools.module_source(module, version[1])
        for file in files:
            yield yaml.safe_load((root / file).read_text())


@pytest.fixture(scope="module")
def platform(control_plane, request) -> Iterator[RunningPlatform]:
    """The platform of the module's STACK, with the GPU nodes above and one CPU node."""
    kube = control_plane.admin
    # Before Kueue starts, so that it sets up every framework's integration at once.
    kube.install_crds(list(framework_crds()), TEST_MANAGER)
    with ExitStack() as stack:
        running = run_platform(stack, control_plane, request.module.STACK)
        for node, network_node in NETWORK_NODE_OF.items():
            create_gpu_node(kube, running.settings, node, gpus=8, capacity=CAPACITY, labels={
                LAYERS[0]: "nn-top", LAYERS[1]: "nn-middle", LAYERS[2]: network_node})
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


def has_topology(platform: RunningPlatform) -> bool:
    return bool(platform.settings.teams.topology.node_levels)


def active(kube: Kube) -> bool:
    queue = kube.get(API_VERSION, "ClusterQueue", TEAM)
    return any(c["type"] == "Active" and c["status"] == "True"
               for c in queue.get("status", {}).get("conditions", []))


def _drop_topology_requests(value: Any) -> None:
    if isinstance(value, dict):
        for key in [k for k in value.get("annotations") or {} if TOPOLOGY_ANNOTATIONS.match(k)]:
            del value["annotations"][key]
        for item in value.values():
            _drop_topology_requests(item)
    elif isinstance(value, list):
        for item in value:
            _drop_topology_requests(item)


def example(platform: RunningPlatform, path: str, **metadata: str) -> dict:
    """A users' example in the team namespace; on a stack without a topology, without the
    annotations that ask Kueue for a domain."""
    manifest = yaml.safe_load((EXAMPLES / path).read_text())
    manifest["metadata"] |= {"namespace": TEAM, **metadata}
    if not has_topology(platform):
        _drop_topology_requests(manifest)
    return manifest


def workload_of(kube: Kube, name: str) -> dict:
    return next((w for w in kube.list(API_VERSION, "Workload", TEAM)
                 if any(o["name"] == name for o in w["metadata"].get("ownerReferences", []))),
                {})


def condition(workload: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True"
               for c in workload.get("status", {}).get("conditions", []))


def started_by_kueue(kube: Kube, manifest: dict) -> dict:
    """Create the workload, which Kueue's webhook suspends, and return it once Kueue admitted
    it whole and started it."""
    api_version, kind, name = manifest["apiVersion"], manifest["kind"], \
        manifest["metadata"]["name"]
    created = kube.create(manifest)
    assert created["spec"]["suspend"] is True, f"Kueue's webhook did not suspend the {kind}"
    wait_until(lambda: not kube.get(api_version, kind, name, TEAM)["spec"].get("suspend"),
               f"Kueue to start the {kind}", timeout=60,
               explain=lambda: f"its Workload: {workload_of(kube, name).get('status')}")
    workload = workload_of(kube, name)
    assert len(workload["status"]["admission"]["podSetAssignments"]) == len(
        workload["spec"]["podSets"]), "not every pod set was admitted"
    return kube.get(api_version, kind, name, TEAM)


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


def job_from(template: dict, name: str, parent: dict, pods: int = 1) -> dict:
    """The Job a controller makes from a Job template for `parent`."""
    spec = copy.deepcopy(template["spec"])
    spec["template"]["spec"].setdefault("restartPolicy", "Never")
    spec |= {"parallelism": pods, "completions": pods}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": TEAM, "ownerReferences": [owner(parent)],
                         **({"labels": template["metadata"]["labels"]}
                            if template.get("metadata", {}).get("labels") else {})},
            "spec": spec}


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


def job_pods_running(kube: Kube, job: str, count: int) -> list[dict]:
    pods = [p for p in kube.list("v1", "Pod", TEAM, labelSelector=f"job-name={job}")
            if p.get("status", {}).get("phase") == "Running"]
    return pods if len(pods) == count else []


def nodes_of_job(kube: Kube, job: str, count: int) -> list[str]:
    pods = wait_until(lambda: job_pods_running(kube, job, count),
                      f"the {count} pods of Job {job} to run", timeout=90)
    return [p["spec"]["nodeName"] for p in pods]


def in_one_network_node(nodes: list[str]) -> bool:
    return len({NETWORK_NODE_OF[n] for n in nodes}) == 1


def finish(kube: Kube, kind: tuple[str, str], name: str) -> None:
    """Delete a workload; the garbage collector removes what its controllers made."""
    kube.delete(*kind, name, TEAM, propagation="Background")
    wait_until(lambda: not [p for p in kube.list("v1", "Pod", TEAM)
                            if p["status"].get("phase") not in ("Succeeded", "Failed")],
               "the team's pods to be gone", timeout=90)


def gpu_tolerations(settings) -> list[dict]:
    return [t.toleration() for t in settings.gpu_nodes.taints]


def run_ray_cluster(platform: RunningPlatform, rayjob: dict, workers: int) -> dict[str, str]:
    """What KubeRay's operator does with a started RayJob: its RayCluster, the cluster's pods
    and the submitter Job (from the template Kueue completed); each pod's node once all run."""
    kube, cp = platform.kube, platform.cp
    name = rayjob["metadata"]["name"]
    cluster_spec = rayjob["spec"]["rayClusterSpec"]
    operator = cp.impersonating(KUBERAY)
    cluster = operator.create({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                               "metadata": {"name": name, "namespace": TEAM,
                                            "ownerReferences": [owner(rayjob)]},
                               "spec": cluster_spec})
    names = [f"{name}-head"] + [f"{name}-worker-{i}" for i in range(workers)]
    create_as_controller(operator, pod_from(cluster_spec["headGroupSpec"]["template"], names[0],
                                            cluster))
    for pod in names[1:]:
        create_as_controller(operator, pod_from(cluster_spec["workerGroupSpecs"][0]["template"],
                                                pod, cluster))
    create_as_controller(operator, job_from(
        {"spec": {"template": rayjob["spec"]["submitterPodTemplate"]}}, name, rayjob))
    nodes = wait_until(lambda: running_on(kube, names), "the Ray cluster's pods to run",
                       timeout=90)
    [nodes["submitter"]] = nodes_of_job(kube, name, 1)
    return nodes


def test_a_rayjob_is_admitted_whole_and_its_cluster_runs_where_the_policy_says(platform):
    kube = platform.kube
    rayjob = started_by_kueue(kube, example(platform, "queued/rayjob.yaml"))
    cluster_spec = rayjob["spec"]["rayClusterSpec"]
    head = cluster_spec["headGroupSpec"]["template"]
    workers = cluster_spec["workerGroupSpecs"][0]["template"]
    # Every pod set admitted at once: the head (CPU only) on the flavor that counts pods, the
    # workers on the GPU flavor, whose tolerations Kueue wrote into their template.
    assert head["metadata"]["labels"][PODSET_LABEL] and workers["metadata"]["labels"][PODSET_LABEL]
    assert not head["spec"].get("tolerations")
    assert all(t in workers["spec"]["tolerations"] for t in gpu_tolerations(platform.settings))
    nodes = run_ray_cluster(platform, rayjob, workers=4)
    # The four 1-GPU workers packed onto one GPU node; the head and the submitter off the GPU
    # nodes.
    worker_nodes = {node for pod, node in nodes.items() if "-worker-" in pod}
    assert len(worker_nodes) == 1 and worker_nodes <= set(NODES)
    assert nodes["tune-head"] not in NODES and nodes["submitter"] not in NODES
    finish(kube, RAYJOB, "tune")


def test_a_rayjob_whose_gpu_workers_require_one_network_node_runs_whole(platform):
    kube = platform.kube
    rayjob = started_by_kueue(kube, example(platform, "queued/rayjob-topology.yaml"))
    nodes = run_ray_cluster(platform, rayjob, workers=4)
    name = rayjob["metadata"]["name"]
    assert nodes[f"{name}-head"] not in NODES and nodes["submitter"] not in NODES
    workers = [node for pod, node in nodes.items() if "-worker-" in pod]
    assert len(set(workers)) == 4 and set(workers) <= set(NODES)
    if has_topology(platform):
        # Four whole nodes under one network node: only nn-a has them.
        assert {NETWORK_NODE_OF[n] for n in workers} == {"nn-a"}
    finish(kube, RAYJOB, name)


def test_a_rayjob_beyond_the_quota_waits_whole_and_no_one_but_kueue_starts_it(platform):
    kube, cp = platform.kube, platform.cp
    sweep = example(platform, "queued/rayjob.yaml", name="sweep")
    group = sweep["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    replicas = 8 * len(NODES) + 1
    group |= {"replicas": replicas, "minReplicas": replicas, "maxReplicas": replicas}
    kube.create(sweep)
    wait_until(lambda: workload_of(kube, "sweep").get("status", {}).get("conditions"),
               "Kueue to consider the RayJob")
    # More GPUs than the team's quota: none of its pods is admitted, and it stays suspended.
    assert not condition(workload_of(kube, "sweep"), "QuotaReserved")
    assert kube.get(*RAYJOB, "sweep", TEAM)["spec"]["suspend"] is True

    user = cp.impersonating(USER)
    assert 'RayJob "research/sweep": only Kueue starts a RayJob' in refusal(
        lambda: user.merge_patch(*RAYJOB, "sweep", {"spec": {"suspend": False}}, TEAM))
    # A cluster passed off as the RayJob's own, which Kueue leaves to its owner.
    rayjob = kube.get(*RAYJOB, "sweep", TEAM)
    forged = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
              "metadata": {"name": "sweep", "namespace": TEAM,
                           "ownerReferences": [owner(rayjob)]},
              "spec": {**rayjob["spec"]["rayClusterSpec"], "suspend": False}}
    assert 'RayCluster "research/sweep" requests nvidia.com/gpu but was not suspended' in refusal(
        lambda: user.create(forged))
    kube.delete(*RAYJOB, "sweep", TEAM)


def jobset_of_trainjob(trainjob: dict, runtime: dict) -> dict:
    """What Kubeflow Trainer makes of a started TrainJob: its runtime's JobSet, each replicated
    Job's pod template completed with what Kueue wrote into the TrainJob's runtime patch, the
    nodes' Job of `trainer.numNodes` pods."""
    [patch] = [p["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
               for p in trainjob["spec"]["runtimePatches"]]
    patches = {p["name"]: p["template"]["spec"]["template"] for p in patch}
    replicated_jobs = copy.deepcopy(runtime["spec"]["template"]["spec"]["replicatedJobs"])
    for replicated in replicated_jobs:
        pod = replicated["template"]["spec"]["template"]
        admitted = patches[replicated["name"]]
        metadata = pod.setdefault("metadata", {})
        for key in ("labels", "annotations"):
            metadata.setdefault(key, {}).update(admitted["metadata"].get(key) or {})
        spec = pod["spec"]
        spec["restartPolicy"] = "Never"
        spec["tolerations"] = spec.get("tolerations", []) + admitted["spec"].get(
            "tolerations", [])
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}),
                                **admitted["spec"].get("nodeSelector", {})}
        spec["schedulingGates"] = admitted["spec"].get("schedulingGates", [])
        replicated["replicas"] = 1
        if replicated["name"] == "node":
            nodes = trainjob["spec"]["trainer"]["numNodes"]
            replicated["template"]["spec"] |= {"parallelism": nodes, "completions": nodes}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": trainjob["metadata"]["name"], "namespace": TEAM,
                         "ownerReferences": [owner(trainjob)]},
            "spec": {"replicatedJobs": replicated_jobs}}


def create_as_controller(controller: Kube, obj: dict) -> dict:
    """Create `obj` as a framework's controller does: Kueue's webhook looks its owner up in a
    cache that may not have seen the owner created a moment before (HTTP 404, "not found"), and
    the controller, requeued, tries again."""
    def created() -> dict | None:
        try:
            return controller.create(obj)
        except ApiError as error:
            if error.status == 404 and "not found" in error.message:
                return None
            raise
    return wait_until(created, f"{obj['kind']} {obj['metadata']['name']} to be created",
                      timeout=30, interval=0.5)


def run_jobset(platform: RunningPlatform, jobset: dict) -> dict[str, list[str]]:
    """What JobSet's controller does with a started JobSet: a Job per replica, each after the
    replicated Jobs it depends on completed (the test completes each Job once its pods run);
    the nodes each replicated Job's pods ran on."""
    kube, cp = platform.kube, platform.cp
    controller = cp.impersonating(JOBSET_CONTROLLER)
    name = jobset["metadata"]["name"]
    placed: dict[str, list[str]] = {}
    needed = {d["name"] for r in jobset["spec"]["replicatedJobs"] for d in r.get("dependsOn", [])}
    for replicated in jobset["spec"]["replicatedJobs"]:
        assert all(d["name"] in placed for d in replicated.get("dependsOn", [])), \
            "the runtime lists a Job before one it depends on"
        template, placed[replicated["name"]] = replicated["template"], []
        pods = template["spec"].get("parallelism", 1)
        for index in range(replicated.get("replicas", 1)):
            job = f"{name}-{replicated['name']}-{index}"
            create_as_controller(controller, job_from(template, job, jobset, pods))
            placed[replicated["name"]] += nodes_of_job(kube, job, pods)
            if replicated["name"] in needed:
                for pod in job_pods_running(kube, job, pods):
                    succeed(kube, pod)
    return placed


def test_a_trainjob_with_initializers_is_admitted_whole_and_runs_through_its_jobset(platform):
    kube, cp = platform.kube, platform.cp
    runtime = kube.create(example(platform, "queued/trainingruntime-topology.yaml"))
    trainjob = started_by_kueue(kube, example(platform, "queued/trainjob-topology.yaml"))
    jobset = cp.impersonating(TRAINER).create(jobset_of_trainjob(trainjob, runtime))
    placed = run_jobset(platform, jobset)
    # The initializers, which ask for no GPU, ran off the GPU nodes, first; then the two nodes.
    assert not {*placed["dataset-initializer"], *placed["model-initializer"]} & set(NODES)
    assert len(set(placed["node"])) == 2 and set(placed["node"]) <= set(NODES)
    if has_topology(platform):
        assert in_one_network_node(placed["node"])
    # A user starting another TrainJob is refused; Kueue alone starts one. (It asks for more
    # nodes than the team's quota holds, so that Kueue cannot start it first, which would make
    # the user's change one that changes nothing.)
    name = trainjob["metadata"]["name"]
    spec = {k: v for k, v in trainjob["spec"].items() if k not in ("suspend", "runtimePatches")}
    queued = kube.create({**trainjob, "metadata": {"name": "again", "namespace": TEAM},
                          "spec": {**spec, "trainer": {**spec["trainer"], "numNodes": 64}}})
    assert queued["spec"]["suspend"] is True
    assert 'TrainJob "research/again": only Kueue starts a TrainJob' in refusal(
        lambda: cp.impersonating(USER).merge_patch(*TRAINJOB, "again",
                                                   {"spec": {"suspend": False}}, TEAM))
    kube.delete(*TRAINJOB, "again", TEAM)
    finish(kube, TRAINJOB, name)


def test_a_launcher_and_its_gpu_workers_are_admitted_together(platform):
    kube = platform.kube
    jobset = started_by_kueue(kube, example(platform, "queued/jobset-launcher-topology.yaml"))
    placed = run_jobset(platform, jobset)
    assert not set(placed["launcher"]) & set(NODES)
    assert len(set(placed["workers"])) == 2 and set(placed["workers"]) <= set(NODES)
    if has_topology(platform):
        assert in_one_network_node(placed["workers"])
    finish(kube, JOBSET, jobset["metadata"]["name"])
