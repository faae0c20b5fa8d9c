"""The real Kueue (the controller-manager of the chart the platform will deploy, kueue.py) with a
real kube-controller-manager running the Jobs, Deployments and their pods, a kube-scheduler with
the default profile binding them, and a fake kubelet running them: quotas of GPUs admit, hold
back, and let through jobs and pods as Kueue's Configuration says.

Kueue runs the Configuration the platform generates for two teams, whose namespaces it manages,
each with a LocalQueue of its own ClusterQueue of 4 GPUs: team-a's queue is named, team-b's is
the namespace's `default` queue, which Kueue gives to the jobs that name none. A third namespace
is not managed. (tests/integration/test_teams.py runs the queues the platform declares.)"""

import base64
import re
from collections.abc import Iterator

import pytest

from components import teams
from components.base.facts import GPU_PRESENT_LABEL
from components.platform.config import load_settings
from tests.kit.cluster.controlplane import Kube, wait_until
from tests.kit.cluster.fake_kubelet import running_pods, workloads_running
from tests.kit.cluster.kube_components import (
    DEFAULT_SCHEDULER,
    PodWatch,
    Scheduler,
    scheduler_with_strategy,
)
from tests.kit.cluster.kueue import (
    ADMISSION_GATE,
    API_VERSION,
    MANAGED_LABEL,
    NAMESPACE,
    QUEUE_LABEL,
    WEBHOOK_CONFIGURATIONS,
    WEBHOOK_SECRET,
    Kueue,
    is_active,
)
from tests.kit.cluster.nodes_and_pods import (
    GPU,
    create_gpu_node,
    create_node,
    ensure_namespace,
    job,
    pod_template,
)
from tests.kit.harness import inputs_of
from tests.kit.stacks import raw, with_changes

TEAM_A, TEAM_B, UNMANAGED = "team-a", "team-b", "platform-jobs"
TEAM_A_QUEUE = "gpus"
FLAVOR = "gpu-nodes"
GPU_NODE = "gpu-node-1"
GPUS_PER_TEAM = 4
ADMITTED_TIMEOUT = 30.0
# Two teams, as the platform's Configuration for Kueue sees them (their queues are this module's).
SETTINGS = load_settings(raw(with_changes(teams={
    "enabled": True, "waitForPodsReady": "2m",
    "teams": [{"name": team, "namespaces": [team], "quota": {"gpu": {GPU: GPUS_PER_TEAM}}}
              for team in (TEAM_A, TEAM_B)]})))
SUSPENDED_BY_PARENT = "kueue.x-k8s.io/pod-suspending-parent"


# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


@pytest.fixture(scope="module")
def kueue(control_plane, example_settings) -> Iterator[Kueue]:
    cp, kube = control_plane, control_plane.admin
    for namespace in (TEAM_A, TEAM_B, UNMANAGED):
        ensure_namespace(kube, namespace)
    # GPU nodes carry the platform's taints; Kueue's flavor adds the tolerations on admission.
    create_gpu_node(kube, example_settings, GPU_NODE, gpus=8)
    create_node(kube, "cpu-node-1")
    Scheduler(cp, DEFAULT_SCHEDULER, scheduler_with_strategy(DEFAULT_SCHEDULER),
              kubeconfig=cp.kubeconfig(DEFAULT_SCHEDULER))
    with workloads_running(cp):
        running = Kueue(cp, teams.kueue_configuration(inputs_of(SETTINGS).teams)).start()
        try:
            taints = example_settings.gpu_nodes.taints
            kube.create({"apiVersion": API_VERSION, "kind": "ResourceFlavor",
                         "metadata": {"name": FLAVOR},
                         "spec": {"nodeLabels": {GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1]},
                                  "tolerations": [t.toleration() for t in taints]}})
            for team, queue in ((TEAM_A, TEAM_A_QUEUE), (TEAM_B, "default")):
                kube.create(cluster_queue(team, GPUS_PER_TEAM))
                kube.create({"apiVersion": API_VERSION, "kind": "LocalQueue",
                             "metadata": {"name": queue, "namespace": team},
                             "spec": {"clusterQueue": team}})
            for team in (TEAM_A, TEAM_B):
                wait_until(lambda team=team: active(kube, "ClusterQueue", team),
                           f"ClusterQueue {team} to be active")
            yield running
        finally:
            running.stop()


def cluster_queue(name: str, gpus: int) -> dict:
    """A ClusterQueue of `gpus` GPUs on the GPU flavor, and nothing else: Kueue ignores the CPU
    and memory the pods ask for beside them (quotaCheckStrategy IgnoreUndeclared, as the
    platform configures it)."""
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {},
                     "resourceGroups": [{
                         "coveredResources": [GPU],
                         "flavors": [{"name": FLAVOR, "resources": [
                             {"name": GPU, "nominalQuota": str(gpus)}]}]}]}}


def active(kube: Kube, kind: str, name: str, namespace: str | None = None) -> bool:
    return is_active(kube.get(API_VERSION, kind, name, namespace))


def condition(obj: dict, kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return cond["status"]
    return None


def condition_message(obj: dict, kind: str) -> str:
    return next((c.get("message", "") for c in obj.get("status", {}).get("conditions", [])
                 if c["type"] == kind), "")


def workload_of(kube: Kube, namespace: str, owner: dict) -> dict | None:
    """The Workload Kueue made for `owner` (a Job or a pod), if any."""
    uid = owner["metadata"]["uid"]
    for workload in kube.list(API_VERSION, "Workload", namespace):
        if any(ref["uid"] == uid for ref in workload["metadata"].get("ownerReferences", [])):
            return workload
    return None


def gpu_job(name: str, namespace: str, pods: int, queue: str | None) -> dict:
    """A Job of `pods` one-GPU pods that asks for no node and tolerates nothing: where GPU pods
    may run comes from the flavor Kueue admits it to."""
    template = pod_template({"app": name}, gpus=1)
    obj = job(name, namespace, template, parallelism=pods, completions=pods)
    if queue:
        obj["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return obj


def job_pods(kube: Kube, namespace: str, name: str) -> list[dict]:
    return kube.list("v1", "Pod", namespace, labelSelector=f"job-name={name}")


def admitted_and_running(kube: Kube, namespace: str, name: str, pods: int) -> dict:
    """Wait until the Job's Workload is admitted and its pods run; return the Workload."""
    created = kube.get("batch/v1", "Job", name, namespace)

    def running() -> dict | None:
        workload = workload_of(kube, namespace, created)
        if workload is None or condition(workload, "Admitted") != "True":
            return None
        return workload if len(running_pods(kube, namespace, name)) == pods else None
    return wait_until(running, f"Job {namespace}/{name} admitted with {pods} running pods",
                      timeout=ADMITTED_TIMEOUT,
                      explain=lambda: str(workload_of(kube, namespace, created)))


def pending(kube: Kube, namespace: str, name: str) -> dict:
    """Wait until Kueue has tried and failed to admit the Job's Workload; return it."""
    created = kube.get("batch/v1", "Job", name, namespace)

    def tried() -> dict | None:
        workload = workload_of(kube, namespace, created)
        return workload if workload and condition(workload, "QuotaReserved") == "False" else None
    return wait_until(tried, f"Kueue to find no room for Job {namespace}/{name}",
                      timeout=ADMITTED_TIMEOUT)


def metric(text: str, metric_name: str, /, **labels: str) -> float | None:
    """The value of the sample of `metric_name` whose labels include `labels`."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{metric_name}\{{(.*)\}} (\S+)", line)
        if match and all(f'{k}="{v}"' in match[1] for k, v in labels.items()):
            return float(match[2])
    return None


# --- the machinery ----------------------------------------------------------------------------

def test_kueue_wrote_its_ca_into_its_webhooks_and_conversion_webhooks(kueue):
    """Kueue's own certificate management, as in the chart: no cert-manager."""
    kube = kueue.kube
    secret = kube.get("v1", "Secret", WEBHOOK_SECRET, NAMESPACE)
    ca = secret["data"]["ca.crt"]
    assert base64.b64decode(ca).startswith(b"-----BEGIN CERTIFICATE-----")
    for kind, name in WEBHOOK_CONFIGURATIONS.items():
        configuration = kube.get("admissionregistration.k8s.io/v1", kind, name)
        assert {w["clientConfig"].get("caBundle") for w in configuration["webhooks"]} == {ca}
    workloads = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                         "workloads.kueue.x-k8s.io")
    assert workloads["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == ca


# --- jobs with a queue ------------------------------------------------------------------------

def test_a_job_within_the_quota_is_admitted_to_the_gpu_flavor_and_runs(kueue):
    kube = kueue.kube
    created = kube.create(gpu_job("train-2gpu", TEAM_A, pods=2, queue=TEAM_A_QUEUE))
    assert created["spec"]["suspend"] is True, "Kueue's webhook did not suspend the Job"
    workload = admitted_and_running(kube, TEAM_A, "train-2gpu", pods=2)
    assert workload["spec"]["queueName"] == TEAM_A_QUEUE
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"][GPU] == FLAVOR
    assert assignment["resourceUsage"][GPU] == "2"
    assert kube.get("batch/v1", "Job", "train-2gpu", TEAM_A)["spec"]["suspend"] is False
    # The flavor's node labels and tolerations, put on the pods by Kueue, bring them to the
    # tainted GPU node.
    for pod in job_pods(kube, TEAM_A, "train-2gpu"):
        assert pod["spec"]["nodeName"] == GPU_NODE
        assert pod["spec"]["nodeSelector"] == {GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1]}
        assert {t["key"] for t in pod["spec"]["tolerations"]} >= {
            t["key"] for t in kube.get("v1", "Node", GPU_NODE)["spec"]["taints"]}
    # waitForPodsReady: the Workload records that all its pods became ready.
    wait_until(lambda: condition(workload_of(kube, TEAM_A, created) or {}, "PodsReady")
               == "True", "the Workload's PodsReady condition", timeout=ADMITTED_TIMEOUT)


def test_a_job_beyond_the_quota_stays_suspended_with_a_pending_workload(kueue):
    kube = kueue.kube
    wait_until(lambda: running_pods(kube, TEAM_A, "train-2gpu"), "the 2-GPU job to run")
    kube.create(gpu_job("train-3gpu", TEAM_A, pods=3, queue=TEAM_A_QUEUE))
    workload = pending(kube, TEAM_A, "train-3gpu")
    print("\npending:", condition_message(workload, "QuotaReserved"))
    assert "insufficient unused quota for nvidia.com/gpu" in \
        condition_message(workload, "QuotaReserved")
    assert condition(workload, "Admitted") != "True"
    assert kube.get("batch/v1", "Job", "train-3gpu", TEAM_A)["spec"]["suspend"] is True
    assert job_pods(kube, TEAM_A, "train-3gpu") == []
    # What Prometheus would read, once Kueue has counted it.
    def counted() -> str | None:
        text = kueue.metrics()
        return text if metric(text, "kueue_pending_workloads", cluster_queue=TEAM_A,
                              status="inadmissible") == 1 else None
    text = wait_until(counted, "the pending workload in Kueue's metrics", timeout=15,
                      interval=1)
    assert metric(text, "kueue_admitted_active_workloads", cluster_queue=TEAM_A) == 1
    assert metric(text, "kueue_cluster_queue_nominal_quota", cluster_queue=TEAM_A,
                  resource=GPU) == GPUS_PER_TEAM
    assert metric(text, "kueue_cluster_queue_resource_usage", cluster_queue=TEAM_A,
                  resource=GPU) == 2
    assert metric(text, "kueue_local_queue_pending_workloads", name=TEAM_A_QUEUE,
                  namespace=TEAM_A, status="inadmissible") == 1


# --- jobs without a queue (manageJobsWithoutQueueName, limited to the managed namespaces) -----

def test_a_job_without_a_queue_goes_to_the_namespaces_default_queue(kueue):
    kube = kueue.kube
    created = kube.create(gpu_job("unqueued", TEAM_B, pods=1, queue=None))
    assert created["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert created["spec"]["suspend"] is True
    admitted_and_running(kube, TEAM_B, "unqueued", pods=1)


def test_a_job_without_a_queue_where_there_is_no_default_queue_is_held(kueue):
    kube = kueue.kube
    created = kube.create(gpu_job("unqueued", TEAM_A, pods=1, queue=None))
    assert created["spec"]["suspend"] is True
    assert QUEUE_LABEL not in created["metadata"].get("labels", {})
    workload = pending(kube, TEAM_A, "unqueued")
    assert workload["spec"].get("queueName", "") == ""
    assert condition_message(workload, "QuotaReserved") == "LocalQueue  doesn't exist"
    assert kube.get("batch/v1", "Job", "unqueued", TEAM_A)["spec"]["suspend"] is True
    assert condition(workload, "Admitted") != "True"


def test_jobs_in_a_namespace_kueue_does_not_manage_run_at_once_even_with_a_queue(kueue):
    """Outside managedJobsNamespaceSelector Kueue does nothing: the chart's webhooks do not
    even see such jobs, so a queue name there is no quota."""
    kube = kueue.kube
    for name, queue in (("no-queue", None), ("names-a-queue", TEAM_A_QUEUE)):
        template = pod_template({"app": name})          # no GPU: runs on the CPU node
        obj = job(name, UNMANAGED, template)
        if queue:
            obj["metadata"]["labels"] = {QUEUE_LABEL: queue}
        created = kube.create(obj)
        assert not created["spec"].get("suspend")
        wait_until(lambda name=name: running_pods(kube, UNMANAGED, name),
                   f"Job {name} to run unmanaged")
        assert workload_of(kube, UNMANAGED, created) is None


# --- pods of a Deployment (the pod integration) -----------------------------------------------

def test_a_deployments_pods_are_gated_until_kueue_admits_them(kueue):
    kube = kueue.kube
    watch = PodWatch(kube, TEAM_B)
    try:
        template = pod_template({"app": "serve"}, gpus=1)
        deployment = kube.create({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "serve", "namespace": TEAM_B},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "serve"}},
                     "template": template}})
        # Kueue's Deployment webhook marks the pods it will make as Kueue's, and names the
        # namespace's default queue.
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels[MANAGED_LABEL] == "true" and labels[QUEUE_LABEL] == "default"
        first = None
        while first is None:
            event = watch.next(timeout=ADMITTED_TIMEOUT)
            assert event is not None, "no pod of the Deployment was created"
            if event[0] == "ADDED" and event[1]["metadata"]["labels"].get("app") == "serve":
                first = event[1]
    finally:
        watch.stop()
    # Created held at the gate (and at Topology Aware Scheduling's, which admission lifts too
    # when the flavor has no topology), marked as suspended for its Deployment (a pod of its
    # own would get Kueue's finalizer instead); no node, no flavor yet.
    print(f"\nthe pod as created: labels {first['metadata']['labels']}, annotations "
          f"{first['metadata'].get('annotations')}, gates {first['spec']['schedulingGates']}")
    assert {"name": ADMISSION_GATE} in first["spec"]["schedulingGates"]
    assert first["metadata"]["annotations"][SUSPENDED_BY_PARENT] == "deployment"
    assert first["metadata"]["labels"][MANAGED_LABEL] == "true"
    assert "nodeSelector" not in first["spec"]
    name = first["metadata"]["name"]
    pod = wait_until(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
        kube.get("v1", "Pod", name, TEAM_B)), "the Deployment's pod to be admitted and run",
        timeout=ADMITTED_TIMEOUT)
    assert not pod["spec"].get("schedulingGates")
    assert pod["spec"]["nodeName"] == GPU_NODE
    assert pod["spec"]["nodeSelector"] == {GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1]}
    workload = workload_of(kube, TEAM_B, pod)
    assert workload is not None and condition(workload, "Admitted") == "True"
    print(f"\nthe pod as admitted: labels {pod['metadata']['labels']}, annotations "
          f"{pod['metadata'].get('annotations')}, tolerations {pod['spec']['tolerations']}")


def test_a_pod_in_a_namespace_kueue_does_not_manage_is_not_gated(kueue):
    kube = kueue.kube
    created = kube.create({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "web", "namespace": UNMANAGED},
                           "spec": pod_template({})["spec"]})
    assert not created["spec"].get("schedulingGates")
    assert MANAGED_LABEL not in created["metadata"].get("labels", {})
