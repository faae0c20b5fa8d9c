"""Teams with `teams.kueue.mode: existing`, on a real control plane: Kueue v0.19.2 started first,
as a cluster's operator installed it (its Deployment and the ConfigMap of its Configuration
named as Kueue's manifests name them, running a Configuration of the operator's, not the
program's); the preview's check reading it through the API server as the context's user; then
the platform's teams declared into it, with the declared binpack scheduler, OPA behind the
declared webhooks, a real kube-controller-manager and a fake kubelet. A team's GPU jobs are still
queued, admitted and placed."""

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
import yaml

from components.base.facts import GPU_RESOURCE
from components.platform.settings import StackSettings
from components.preview import existing_kueue
from components.teams import TEAM_LABEL
from tests.integration.test_teams import running_on, status, workload_condition, workload_of
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.kueue import API_VERSION, NAMESPACE, QUEUE_LABEL, SERVICE_ACCOUNT, Kueue
from tests.kit.cluster.nodes_and_pods import create_gpu_node, job, pod_template
from tests.kit.cluster.running_platform import run_platform
from tests.kit.stacks import with_changes

TEAM = "research"
GPU_NODES = ("gpu-node-1", "gpu-node-2")
STACK = with_changes(
    gpuNodes={"names": list(GPU_NODES)},
    teams={"enabled": True, "kueue": {"mode": "existing"},
           "teams": [{"name": TEAM, "namespaces": [TEAM], "quota": {"gpu": {GPU_RESOURCE: 8}}}]})
# The Configuration a cluster's operator runs Kueue with: what the teams need, the namespaces it
# manages chosen by the label the program gives each team namespace, and neither fair sharing
# nor the queues' resource metrics, with its own waitForPodsReady timeout (warned of, not
# refused).
OPERATORS_CONFIGURATION = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "manageJobsWithoutQueueName": True,
    "managedJobsNamespaceSelector": {"matchExpressions": [
        {"key": TEAM_LABEL, "operator": "Exists"}]},
    "integrations": {"frameworks": ["batch/job", "pod", "deployment", "statefulset",
                                    "jobset.x-k8s.io/jobset",
                                    "leaderworkerset.x-k8s.io/leaderworkerset",
                                    "trainer.kubeflow.org/trainjob", "kubeflow.org/pytorchjob",
                                    "ray.io/rayjob", "ray.io/raycluster"]},
    "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
    "waitForPodsReady": {"timeout": "5m"},
}
CONFIG_MAP = "kueue-manager-config"
DEPLOYMENT = "kueue-controller-manager"

# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


def installation(image: str) -> list[dict]:
    """What a preview reads of the installation, as Kueue's manifests make it. Its pod is the
    process Kueue runs as here, so the Deployment asks for none."""
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
         "data": {"controller_manager_config.yaml": yaml.safe_dump(OPERATORS_CONFIGURATION)}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
         "spec": {"replicas": 0, "selector": {"matchLabels": {"control-plane": DEPLOYMENT}},
                  "template": {
                      "metadata": {"labels": {"control-plane": DEPLOYMENT}},
                      "spec": {"serviceAccountName": SERVICE_ACCOUNT,
                               "containers": [{"name": "manager", "image": image}],
                               "volumes": [{"name": "manager-config",
                                            "configMap": {"name": CONFIG_MAP}}]}}}},
    ]


def install(cp: ControlPlane, image: str) -> None:
    for obj in installation(image):
        cp.admin.apply(obj, TEST_MANAGER)


@dataclass
class Platform:
    cp: ControlPlane
    settings: StackSettings
    preview: StackSettings


@pytest.fixture(scope="module")
def platform(control_plane) -> Iterator[Platform]:
    cp, kube = control_plane, control_plane.admin
    with ExitStack() as stack:
        kueue = Kueue(cp, OPERATORS_CONFIGURATION).start()
        stack.callback(kueue.stop)
        install(cp, "registry.k8s.io/kueue/kueue:v0.19.2")
        running = run_platform(stack, cp, STACK, existing_kueue=kueue)
        settings = running.settings
        # The stack's settings with its cluster here, as a preview reads it.
        preview = settings.model_copy(update={"cluster": settings.cluster.model_copy(update={
            "context": "test", "kubeconfig": str(cp.kubeconfig("preview"))})})
        wait_until(lambda: status(kube, "ClusterQueue", TEAM, "Active") == "True",
                   f"ClusterQueue {TEAM} to be active")
        for node in GPU_NODES:
            create_gpu_node(kube, settings, node, gpus=8)
        yield Platform(cp, settings, preview)


def test_the_preview_passes_the_existing_kueue_and_warns_of_what_it_weakens(platform):
    found = existing_kueue.existing_kueue_findings(platform.preview)
    assert found.problems == []
    where = (f"Kueue's Configuration (ConfigMap {NAMESPACE}/{CONFIG_MAP}, "
             f"controller_manager_config.yaml)")
    assert sorted(found.warnings) == sorted([
        f"teams.kueue.mode: existing: {where}: {warning}" for warning in (
            "waitForPodsReady.timeout: 5m: a workload whose pods do not all run gives its GPUs "
            "back after that, not after teams.waitForPodsReady (10m)",
            "fairSharing: off: the teams' fairSharingWeight has no effect (GPUs beyond the "
            "quotas go to whichever team asks first)",
            "metrics.enableClusterQueueResources: not true: the dashboard's team rows have no "
            "quota, usage or borrowing")] + [
        # The suite runs Kueue as its manifests do, with no metrics Service of the chart's.
        f"teams.kueue.mode: existing: no Service in namespace {NAMESPACE} has the labels the "
        f"platform's scrape of Kueue selects (app.kubernetes.io/instance=kueue "
        f"app.kubernetes.io/component=metrics-service, port https): the dashboard's team rows "
        f"stay empty and KueueUnavailable cannot fire. A Kueue installed from its manifests "
        f"names it controller-manager-metrics-service; fix: `kubectl -n {NAMESPACE} label "
        f"service <its metrics Service> app.kubernetes.io/instance=kueue "
        f"app.kubernetes.io/component=metrics-service`, or set teams.kueue.releaseName to the "
        f"Helm release of a Kueue installed with its chart"])


def test_the_preview_refuses_a_kueue_of_another_minor(platform):
    install(platform.cp, "registry.k8s.io/kueue/kueue:v0.18.4")
    try:
        found = existing_kueue.existing_kueue_findings(platform.preview)
    finally:
        install(platform.cp, "registry.k8s.io/kueue/kueue:v0.19.2")
    (problem,) = found.problems
    assert f"Deployment {NAMESPACE}/{DEPLOYMENT} runs Kueue v0.18.4" in problem
    assert "supported: v0.19.x (tested: v0.19.2)" in problem


def test_the_teams_queues_are_declared_into_the_existing_kueue(platform):
    kube = platform.cp.admin
    assert status(kube, "LocalQueue", "default", "Active", TEAM) == "True"
    assert kube.get(API_VERSION, "ResourceFlavor", "gpu")


def test_a_teams_gpu_jobs_are_queued_admitted_and_packed(platform):
    kube, scheduler = platform.cp.admin, platform.settings.scheduler.name

    def gpu_job(name: str, gpus: int) -> dict:
        # Naming no queue and tolerating nothing: the team's flavor gives the tolerations.
        template = pod_template({"app": name}, gpus=gpus)
        template["spec"]["schedulerName"] = scheduler
        return job(name, TEAM, template, parallelism=1, completions=1)

    kube.create(gpu_job("first", 2))
    wait_until(lambda: running_on(kube, TEAM, "first"), "the first job to run", timeout=60)
    kube.create(gpu_job("second", 2))
    wait_until(lambda: running_on(kube, TEAM, "second"), "the second job to run", timeout=60)
    assert running_on(kube, TEAM, "second") == running_on(kube, TEAM, "first")
    # Beyond the team's quota of 8: queued, not admitted.
    kube.create(gpu_job("beyond", 6))
    wait_until(lambda: workload_condition(kube, TEAM, "beyond", "QuotaReserved") is not None,
               "Kueue to consider the job beyond the quota", timeout=30)
    assert (workload_condition(kube, TEAM, "beyond", "QuotaReserved") or {})["status"] == "False"
    assert not running_on(kube, TEAM, "beyond")


def queue_of(kube, name: str) -> str:
    """The ClusterQueue that admitted the Job's workload, or "" while none has."""
    workload = workload_of(kube, TEAM, name) or {}
    return ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", "")


def gpus_reserved(kube, queue: str) -> int:
    status_ = kube.get(API_VERSION, "ClusterQueue", queue).get("status") or {}
    return sum(int(resource["total"]) for flavor in status_.get("flavorsReservation") or []
               for resource in flavor["resources"] if resource["name"] == GPU_RESOURCE)


def test_a_teams_own_queue_moves_to_the_platforms_with_nothing_lost_or_counted_twice(platform):
    """docs/operators/teams.md#moving-a-teams-own-queues-to-the-platform, step by step."""
    kube, scheduler = platform.cp.admin, platform.settings.scheduler.name
    for name in ("first", "second", "beyond"):
        kube.delete("batch/v1", "Job", name, TEAM, propagation="Background")
    # The team's own queue before the platform: a flavor of its own and 4 GPUs.
    kube.create({"apiVersion": API_VERSION, "kind": "ResourceFlavor",
                 "metadata": {"name": "on-demand"},
                 "spec": {"tolerations": [t.toleration()
                                          for t in platform.settings.gpu_nodes.taints]}})
    kube.create({"apiVersion": API_VERSION, "kind": "ClusterQueue",
                 "metadata": {"name": "research-old"},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                     "coveredResources": [GPU_RESOURCE], "flavors": [{
                         "name": "on-demand", "resources": [
                             {"name": GPU_RESOURCE, "nominalQuota": "4"}]}]}]}})
    kube.create({"apiVersion": API_VERSION, "kind": "LocalQueue",
                 "metadata": {"name": "research-queue", "namespace": TEAM},
                 "spec": {"clusterQueue": "research-old"}})

    def old_job(name: str, gpus: int) -> dict:
        template = pod_template({"app": name}, gpus=gpus)
        template["spec"]["schedulerName"] = scheduler
        labelled = job(name, TEAM, template, parallelism=1, completions=1)
        labelled["metadata"]["labels"] = {QUEUE_LABEL: "research-queue"}
        return labelled

    kube.create(old_job("old-running", 4))
    wait_until(lambda: running_on(kube, TEAM, "old-running"), "the old queue's job to run",
               timeout=60)
    kube.create(old_job("old-waiting", 2))
    wait_until(lambda: workload_condition(kube, TEAM, "old-waiting", "QuotaReserved"),
               "Kueue to consider the waiting job", timeout=30)
    assert queue_of(kube, "old-waiting") == ""
    # Step 1: the preview names the workloads of the team's own queue.
    [warning] = [w for w in existing_kueue.existing_kueue_findings(platform.preview).warnings
                 if "name queues the platform does not manage" in w]
    assert f"{TEAM}/research-queue (2)" in warning
    # Step 2: what waits moves to the team's queue by its label; what runs stays where it was
    # admitted.
    kube.merge_patch("batch/v1", "Job", "old-waiting",
                     {"metadata": {"labels": {QUEUE_LABEL: "default"}}}, TEAM)
    wait_until(lambda: running_on(kube, TEAM, "old-waiting"), "the moved job to run",
               timeout=60)
    assert queue_of(kube, "old-waiting") == TEAM
    assert queue_of(kube, "old-running") == "research-old"
    # Each workload counts once, against the queue that admitted it.
    wait_until(lambda: (gpus_reserved(kube, "research-old"), gpus_reserved(kube, TEAM)) == (4, 2),
               "each queue to count its own workload", timeout=30,
               explain=lambda: str([kube.get(API_VERSION, "ClusterQueue", q).get("status")
                                    for q in ("research-old", TEAM)]))
    # Step 3: once the old queue's work is done, the old queue goes.
    kube.delete("batch/v1", "Job", "old-running", TEAM, propagation="Background")
    wait_until(lambda: gpus_reserved(kube, "research-old") == 0,
               "the old queue to hold nothing", timeout=60)
    kube.delete(API_VERSION, "LocalQueue", "research-queue", TEAM)
    kube.delete(API_VERSION, "ClusterQueue", "research-old")
    assert not [w for w in existing_kueue.existing_kueue_findings(platform.preview).warnings
                if "name queues the platform does not manage" in w]
    assert gpus_reserved(kube, TEAM) == 2
