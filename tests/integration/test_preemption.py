"""Preemption for GPU pods that need room: the binpack scheduler as the program deploys it, the
declared preemptible PriorityClass, a real kube-controller-manager (Jobs, Deployments) and a fake
kubelet. Pods opt in to being preempted with the class; whole-node jobs name no class.

The starting state is made the way churn makes it: nodes cordoned while workloads start, so
their pods land on nodes the binpack scheduler would not have chosen, then uncordoned."""

import pytest
import requests

from components.monitoring import dashboard
from tests.kit.cluster.controlplane import ApiError, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.fake_kubelet import cordon, gpu_workloads, running_pods
from tests.kit.cluster.nodes_and_pods import ensure_namespace, job, pod_template

NAMESPACE = "training"
NODES = ("gpu-1", "gpu-2", "gpu-3")


@pytest.fixture(scope="module")
def cluster(control_plane_with_schedulers, example_settings):
    cp = control_plane_with_schedulers
    with gpu_workloads(cp, example_settings, NAMESPACE, NODES):
        yield cp


def template(settings, app: str, gpus: int, preemptible: bool) -> dict:
    spec = pod_template({"app": app}, gpus=gpus, scheduler=settings.scheduler.name,
                        settings=settings)
    if preemptible:
        spec["spec"]["priorityClassName"] = settings.scheduler.preemptible_class.name
    return spec


def running(kube, app: str) -> list[dict]:
    return running_pods(kube, NAMESPACE, app)


def start_on(kube, node: str, app: str, obj: dict, pods: int) -> list[dict]:
    """Create `obj` with every node but `node` cordoned; its `pods` running pods."""
    cordon(kube, [n for n in NODES if n != node], True)
    kube.create(obj)
    placed = wait_until(lambda: (lambda r: r if len(r) == pods else None)(running(kube, app)),
                        f"{pods} running pods of {app}", timeout=60)
    cordon(kube, NODES, False)
    assert {p["spec"]["nodeName"] for p in placed} == {node}
    return placed


def layout(kube) -> dict[str, list[str]]:
    """The apps on each node, by running pod."""
    nodes = {n: [] for n in NODES}
    for p in running_pods(kube, NAMESPACE):
        nodes[p["spec"]["nodeName"]].append(p["metadata"]["labels"]["app"])
    return {n: sorted(apps) for n, apps in nodes.items()}


def uids(kube, apps: list[str]) -> set[str]:
    return {p["metadata"]["uid"] for app in apps for p in running(kube, app)}


def test_a_whole_node_job_preempts_opted_in_pods_on_the_node_where_fewest_go(
        cluster, example_settings):
    """No node has 8 free GPUs. gpu-1 holds replicas that did not opt in, so it is no
    candidate; of gpu-2 (four preemptible 1-GPU pods) and gpu-3 (one preemptible 2-GPU pod)
    kube-scheduler preempts where fewest pods go. The preempted pod's Job replaces it without
    counting a failure, and the binpack scheduler puts the replacement on the busiest node."""
    kube, settings = cluster.admin, example_settings
    serve = {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "serve", "namespace": NAMESPACE},
             "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "serve"}},
                      "template": template(settings, "serve", 1, preemptible=False)}}
    start_on(kube, "gpu-1", "serve", serve, 2)
    start_on(kube, "gpu-1", "sweep-1", job("sweep-1", NAMESPACE, template(
        settings, "sweep-1", 1, preemptible=True), resumes_after_eviction=True), 1)
    start_on(kube, "gpu-2", "sweep-4", job("sweep-4", NAMESPACE, template(
        settings, "sweep-4", 1, preemptible=True), resumes_after_eviction=True,
        completions=4, parallelism=4), 4)
    start_on(kube, "gpu-3", "tune", job("tune", NAMESPACE, template(
        settings, "tune", 2, preemptible=True), resumes_after_eviction=True), 1)
    untouched = uids(kube, ["serve", "sweep-1", "sweep-4"])

    kube.create(job("pretrain", NAMESPACE, template(settings, "pretrain", 8, preemptible=False)))
    wait_until(lambda: [p["spec"]["nodeName"] for p in running(kube, "pretrain")] == ["gpu-3"],
               "pretrain to run on gpu-3", timeout=60, explain=lambda: str(layout(kube)))
    wait_until(lambda: len(running(kube, "tune")) == 1, "tune's replacement to run", timeout=60,
               explain=lambda: str(layout(kube)))
    assert layout(kube) == {"gpu-1": ["serve", "serve", "sweep-1"],
                            "gpu-2": ["sweep-4"] * 4 + ["tune"],
                            "gpu-3": ["pretrain"]}
    assert uids(kube, ["serve", "sweep-1", "sweep-4"]) == untouched
    status = kube.get("batch/v1", "Job", "tune", NAMESPACE)["status"]
    assert not [c for c in status.get("conditions", [])
                if c["type"] in ("Failed", "FailureTarget")], status


def test_a_gpu_pod_never_preempts_pods_that_did_not_opt_in(cluster, example_settings):
    """Every node now holds a pod that did not opt in (a serving replica scaled up lands on the
    busiest node, gpu-2). Another whole-node job finds no node where preempting opted-in pods
    alone would make room, so it waits, and kube-scheduler says so; nothing is preempted."""
    kube, settings = cluster.admin, example_settings
    kube.merge_patch("apps/v1", "Deployment", "serve", {"spec": {"replicas": 3}}, NAMESPACE,
                     "scale", what="scale serve to 3")
    wait_until(lambda: len(running(kube, "serve")) == 3, "a third serving replica", timeout=60)
    assert layout(kube)["gpu-2"] == ["serve"] + ["sweep-4"] * 4 + ["tune"]
    before = uids(kube, ["serve", "sweep-1", "sweep-4", "tune", "pretrain"])

    kube.create(job("pretrain-2", NAMESPACE, template(settings, "pretrain-2", 8,
                                                      preemptible=False)))

    def unschedulable_message():
        for p in kube.list("v1", "Pod", NAMESPACE, labelSelector="app=pretrain-2"):
            for c in p["status"].get("conditions", []):
                if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                    return c["message"]
        return None
    message = wait_until(unschedulable_message, "pretrain-2 to be found unschedulable",
                         timeout=60)
    assert "preemption: 0/3 nodes are available" in message, message
    assert uids(kube, ["serve", "sweep-1", "sweep-4", "tune", "pretrain"]) == before


def test_the_preemption_shows_in_the_metrics_prometheus_scrapes(cluster, example_settings):
    """The dashboard's preemption panel reads the binpack scheduler's own metrics, which the
    platform's ServiceMonitor scrapes with Prometheus' ServiceAccount token: a ServiceAccount
    that may get /metrics, as the chart's Prometheus may, reads them, and they count the one
    pod preempted above; a caller without a token is refused."""
    kube, settings = cluster.admin, example_settings
    ensure_namespace(kube, "monitoring")
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "prometheus", "namespace": "monitoring"}}, TEST_MANAGER)
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "prometheus"},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}, TEST_MANAGER)
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "prometheus"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "prometheus"},
                "subjects": [{"kind": "ServiceAccount", "name": "prometheus",
                              "namespace": "monitoring"}]}, TEST_MANAGER)
    token = cluster.service_account_token("monitoring", "prometheus")
    scheduler = next(p for p in cluster.processes if p.name == settings.scheduler.name)
    port = next(a.split("=")[1] for a in scheduler.args if a.startswith("--secure-port="))
    url = f"https://127.0.0.1:{port}/metrics"

    verify = str(cluster.ca_file)
    assert requests.get(url, verify=verify, timeout=10).status_code in (401, 403)
    text = wait_until(lambda: (lambda r: r.text if r.ok else None)(requests.get(
        url, headers={"Authorization": f"Bearer {token}"}, verify=verify, timeout=10)),
        "the scheduler to serve its metrics to the token", timeout=30)
    series = {line.split("{")[0].split(" ")[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines()
              if line.startswith(dashboard.PREEMPTION_VICTIMS + "_")}
    assert series[f"{dashboard.PREEMPTION_VICTIMS}_count"] == 1, series
    assert series[f"{dashboard.PREEMPTION_VICTIMS}_sum"] == 1, series


@pytest.mark.parametrize("change", [{"value": -50}, {"preemptionPolicy": "PreemptLowerPriority"}])
def test_the_class_cannot_be_changed_in_place(cluster, example_settings, change):
    """Why the program replaces the class when its value or preemption policy changes
    (test_urns.py): the API server refuses the update."""
    with pytest.raises(ApiError) as refused:
        cluster.admin.merge_patch("scheduling.k8s.io/v1", "PriorityClass",
                                  example_settings.scheduler.preemptible_class.name, change)
    assert refused.value.status == 422, refused.value.message
