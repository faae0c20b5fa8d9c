"""`teams.kueue.mode: existing`: the teams' queues go into the Kueue the cluster already runs.
What is declared (no chart, no Kueue namespace; every queue, flavor and priority), whose
identity the admission policy trusts, and what `pulumi preview` finds on the cluster: Kueue's
version, and its Configuration against what the teams need of it."""

import copy

import pytest
import yaml

from components.base.facts import BUILTIN_INTEGRATIONS, KUEUE_API
from components.base.validation import SettingsError
from components.platform.config import load_settings
from components.platform.wiring import component_inputs
from components.preview import existing_kueue, existing_stacks
from components.preview.cluster import NotAllowed
from components.teams import existing_kueue as checks
from components.teams import kueue_configuration
from tests.kit.harness import ROOT, admission_of, run_program, stack_file_config
from tests.kit.stacks import TEAMS, raw, with_changes

K8S = "kubernetes:"
EXISTING = with_changes(teams={**TEAMS, "kueue": {"mode": "existing"}})
SETTINGS = load_settings(raw(EXISTING))
NAMESPACE = "kueue-system"
# Kueue's user as its own manifests run it (namespace kueue-system, ServiceAccount
# kueue-controller-manager).
MANIFESTS_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"


def teams_inputs(settings=SETTINGS):
    return component_inputs(settings).teams


# --- what is declared ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def existing_run():
    return run_program(stack_file_config(EXISTING))


def test_no_kueue_is_installed_and_the_teams_queues_still_are(existing_run):
    assert existing_run.of_type(f"{K8S}helm.sh/v3:Release") and not [
        r for r in existing_run.of_type(f"{K8S}helm.sh/v3:Release") if r.name == "kueue"]
    namespaces = {r.name for r in existing_run.of_type(f"{K8S}core/v1:Namespace")}
    assert NAMESPACE not in namespaces and {"research", "vision"} <= namespaces
    assert not [r for r in existing_run.of_type(f"{K8S}core/v1:ResourceQuota")
                if r.name.startswith(f"{NAMESPACE}/")]
    kinds = {(r.inputs["kind"], r.name) for r in existing_run.registrations
             if r.type.startswith(f"{K8S}{KUEUE_API}:")}
    assert kinds == {("ResourceFlavor", "gpu"), ("ResourceFlavor", "any-node"),
                     ("ClusterQueue", "research"),
                     ("ClusterQueue", "vision"), ("LocalQueue", "research/default"),
                     ("LocalQueue", "vision/default"), ("WorkloadPriorityClass", "team-high"),
                     ("WorkloadPriorityClass", "team-low")}


def test_kueues_image_and_chart_are_not_listed_for_a_mirror(existing_run):
    platform = existing_run.one("gpu-platform:index:GpuPlatform", "gpu-platform")
    outputs = existing_run.outputs[platform.urn]
    assert not [i for i in outputs["images"] if "/kueue:" in i]
    assert not [c for c in outputs["charts"] if "kueue" in c]


def test_the_admission_policy_trusts_the_existing_kueues_service_account(existing_run):
    teams = existing_run.one("gpu-platform:index:Teams", "teams")
    assert existing_run.outputs[teams.urn]["kueueUser"] == MANIFESTS_USER
    assert admission_of(SETTINGS).teams.kueue_user == MANIFESTS_USER
    other = load_settings(raw(with_changes(teams={**TEAMS, "kueue": {
        "mode": "existing", "namespace": "queues", "existing": {"serviceAccount": "kueue"}}})))
    assert admission_of(other).teams.kueue_user == "system:serviceaccount:queues:kueue"


def test_a_chart_setting_with_an_existing_kueue_is_refused():
    with pytest.raises(SettingsError) as refused:
        load_settings(raw(with_changes(teams={**TEAMS, "kueue": {
            "mode": "existing", "replicas": 3}})))
    message = str(refused.value)
    assert "gpu-platform:teams.kueue.replicas" in message and "mode: install" in message


# --- Kueue's version ----------------------------------------------------------------------------

@pytest.mark.parametrize("image", ["registry.k8s.io/kueue/kueue:v0.19.2",
                                   "registry.k8s.io/kueue/kueue:v0.19.0",
                                   "mirror.example:5000/kueue/kueue:v0.19.3@sha256:0123"])
def test_a_kueue_of_the_tested_minor_is_supported(image):
    assert checks.version_findings("Deployment kueue-system/kueue", image) == checks.Findings()


@pytest.mark.parametrize("image, version", [("registry.k8s.io/kueue/kueue:v0.18.4", "v0.18.4"),
                                            ("registry.k8s.io/kueue/kueue:v0.20.0", "v0.20.0")])
def test_a_kueue_of_another_minor_is_refused_naming_the_supported_versions(image, version):
    found = checks.version_findings("Deployment kueue-system/kueue", image)
    (problem,) = found.problems
    assert version in problem and "supported: v0.19.x (tested: v0.19.2)" in problem
    assert "kueue.x-k8s.io/v1beta2" in problem and "fix:" in problem


def test_a_tag_that_names_no_version_is_warned_of():
    found = checks.version_findings("Deployment kueue-system/kueue",
                                    "registry.example/kueue@sha256:0123")
    assert not found.problems
    assert "was not checked" in found.warnings[0] and "v0.19.x" in found.warnings[0]


# --- Kueue's Configuration ----------------------------------------------------------------------

def fitting_configuration() -> dict:
    """A Configuration a cluster's operator might run, with what the teams need: the team
    namespaces selected by the label the program gives them."""
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "manageJobsWithoutQueueName": True,
            "managedJobsNamespaceSelector": {"matchExpressions": [
                {"key": "gpu-platform.io/team", "operator": "Exists"}]},
            "integrations": {"frameworks": ["batch/job", "kubeflow.org/mpijob", "pod",
                                            "deployment", "statefulset",
                                            "jobset.x-k8s.io/jobset",
                                            "leaderworkerset.x-k8s.io/leaderworkerset",
                                            "trainer.kubeflow.org/trainjob",
                                            "kubeflow.org/pytorchjob", "ray.io/rayjob",
                                            "ray.io/raycluster"]},
            "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
            "waitForPodsReady": {"timeout": "10m0s"},
            "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]},
            "metrics": {"enableClusterQueueResources": True}}


def configuration_findings(configuration: dict, settings=SETTINGS,
                           labels: dict | None = None) -> checks.Findings:
    return checks.configuration_findings(teams_inputs(settings), configuration,
                                         "ConfigMap kueue-system/kueue-manager-config",
                                         labels or {})


def test_a_configuration_with_what_the_teams_need_passes():
    assert configuration_findings(fitting_configuration()) == checks.Findings()
    # So does the one the program gives the Kueue it installs.
    assert configuration_findings(kueue_configuration(teams_inputs())) == checks.Findings()


def without(path: str, value=None) -> dict:
    configuration = fitting_configuration()
    *parents, key = path.split(".")
    node = configuration
    for parent in parents:
        node = node.setdefault(parent, {})
    if value is None:
        node.pop(key, None)
    else:
        node[key] = value
    return configuration


@pytest.mark.parametrize("configuration, setting, why", [
    (without("manageJobsWithoutQueueName"), "manageJobsWithoutQueueName",
     "names no queue is not held by Kueue"),
    (without("managedJobsNamespaceSelector", {"matchLabels": {"kueue": "on"}}),
     "managedJobsNamespaceSelector", "does not select the team namespaces research, vision"),
    (without("integrations.frameworks", ["batch/job", "pod"]), "integrations.frameworks",
     "lacks deployment, statefulset, jobset.x-k8s.io/jobset, "
     "leaderworkerset.x-k8s.io/leaderworkerset, trainer.kubeflow.org/trainjob"),
    # Kueue's default: Jobs only.
    (without("integrations"), "integrations.frameworks",
     "lacks pod, deployment, statefulset, jobset.x-k8s.io/jobset"),
    (without("resources"), "resources.quotaCheckStrategy", "BlockUndeclared"),
    (without("featureGates", {"QuotaCheckStrategy": False}), "resources.quotaCheckStrategy",
     "feature gate off"),
])
def test_a_missing_requirement_is_refused_naming_it_and_the_fix(configuration, setting, why):
    found = configuration_findings(configuration)
    (problem,) = found.problems
    assert f"{setting}: " in problem and why in problem
    assert "ConfigMap kueue-system/kueue-manager-config" in problem
    assert "fix:" in problem and problem.endswith("restart Kueue")


def test_kueues_default_namespace_selector_manages_the_team_namespaces():
    # Every namespace but Kueue's own and kube-system.
    assert not configuration_findings(without("managedJobsNamespaceSelector")).problems


def test_the_selector_is_matched_against_the_team_namespaces_labels():
    selector = {"matchLabels": {"queues": "kueue"}}
    refused = configuration_findings(without("managedJobsNamespaceSelector", selector))
    assert "research, vision" in refused.problems[0]
    labels = {"research": {"queues": "kueue"}, "vision": {"queues": "kueue"}}
    assert not configuration_findings(without("managedJobsNamespaceSelector", selector),
                                      labels=labels).problems


@pytest.mark.parametrize("configuration, setting, why", [
    (without("fairSharing"), "fairSharing", "fairSharingWeight has no effect"),
    (without("waitForPodsReady"), "waitForPodsReady.timeout",
     "30m: a workload whose pods do not all run gives its GPUs back after that"),
    (without("featureGates", {"DisableWaitForPodsReady": True}), "waitForPodsReady",
     "keeps its GPUs"),
    (without("metrics"), "metrics.enableClusterQueueResources", "the dashboard's team rows"),
])
def test_what_only_weakens_a_feature_is_a_warning(configuration, setting, why):
    found = configuration_findings(configuration)
    assert not found.problems
    (warning,) = found.warnings
    assert f"{setting}: " in warning and why in warning


def test_on_the_dra_path_claims_on_the_gpu_classes_must_count_against_the_quotas():
    dra = load_settings(raw(with_changes(kubernetesVersion="1.37.2",
                                         gpuOperator={"gpuPath": "dra"},
                                         teams={**TEAMS, "kueue": {"mode": "existing"}})))
    (problem,) = configuration_findings(fitting_configuration(), dra).problems
    assert "resources.deviceClassMappings" in problem and "nvidia.com/gpu" in problem
    mapped = kueue_configuration(teams_inputs(dra))["resources"]["deviceClassMappings"]
    configuration = without("resources.deviceClassMappings", mapped)
    assert not configuration_findings(configuration, dra).problems


# --- what a preview reads -----------------------------------------------------------------------

DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
CONFIG_MAP = f"/api/v1/namespaces/{NAMESPACE}/configmaps/kueue-manager-config"
SERVICES = f"/api/v1/namespaces/{NAMESPACE}/services"
# Kueue's metrics Service as its chart makes it for a release `kueue`, and as its manifests do.
CHART_METRICS_SERVICE = {
    "metadata": {"name": "kueue-controller-manager-metrics-service", "labels": {
        "app.kubernetes.io/instance": "kueue", "app.kubernetes.io/component": "metrics-service"}},
    "spec": {"ports": [{"name": "https", "port": 8443}]}}
MANIFESTS_METRICS_SERVICE = {
    "metadata": {"name": "kueue-controller-manager-metrics-service", "labels": {
        "control-plane": "controller-manager", "app.kubernetes.io/name": "kueue"}},
    "spec": {"ports": [{"name": "https", "port": 8443}]}}


def manifests_deployment(image: str = "registry.k8s.io/kueue/kueue:v0.19.2") -> dict:
    """Kueue's Deployment as its manifests make it: the manager container, its ServiceAccount,
    its Configuration mounted from a ConfigMap."""
    return {"metadata": {"name": "kueue-controller-manager", "namespace": NAMESPACE},
            "spec": {"template": {"spec": {
                "serviceAccountName": "kueue-controller-manager",
                "containers": [{"name": "manager", "image": image}],
                "volumes": [{"name": "manager-config",
                             "configMap": {"name": "kueue-manager-config"}}]}}}}


class FakeCluster:
    """Answers a preview's reads from dicts of paths; a path in `refused` answers 403."""

    def __init__(self, objects: dict[str, dict], lists: dict[str, list[dict]],
                 refused: tuple[str, ...] = ()):
        self.objects, self.lists, self.refused = objects, lists, refused

    def get(self, path: str, **_: str) -> dict | None:
        if path in self.refused:
            raise NotAllowed(f"GET {path}: HTTP 403 for the context's user")
        return self.objects.get(path)

    def items(self, path: str, **_: str) -> list[dict]:
        if path in self.refused:
            raise NotAllowed(f"GET {path}: HTTP 403 for the context's user")
        return self.lists.get(path, [])


def cluster(deployment: dict | None = None, configuration: dict | None = None,
            refused: tuple[str, ...] = ()) -> FakeCluster:
    config_map = {"data": {"controller_manager_config.yaml": yaml.safe_dump(
        configuration if configuration is not None else fitting_configuration())}}
    return FakeCluster({f"/apis/{KUEUE_API}": {"kind": "APIResourceList"},
                        CONFIG_MAP: config_map},
                       {DEPLOYMENTS: [deployment or manifests_deployment()],
                        SERVICES: [CHART_METRICS_SERVICE]}, refused)


def preview(reads: FakeCluster, settings=SETTINGS) -> checks.Findings:
    found = existing_kueue.read_kueue(reads, existing_kueue.KueueReads(settings),
                                      "kueue-controller-manager")
    return checks.findings(teams_inputs(settings), found)


def test_a_supported_kueue_with_what_the_teams_need_passes_the_preview():
    assert preview(cluster()) == checks.Findings()


def test_the_preview_reads_the_version_and_the_configuration_kueue_runs():
    found = preview(cluster(manifests_deployment("registry.k8s.io/kueue/kueue:v0.17.1"),
                            without("manageJobsWithoutQueueName")))
    assert len(found.problems) == 2
    assert "v0.17.1" in found.problems[0] and "manageJobsWithoutQueueName" in found.problems[1]


def test_a_kueue_that_mounts_no_configuration_runs_kueues_defaults_and_is_refused():
    deployment = manifests_deployment()
    deployment["spec"]["template"]["spec"]["volumes"] = []
    found = preview(cluster(deployment))
    assert len(found.problems) == 3
    assert all("mounts none: Kueue's defaults" in problem for problem in found.problems)
    for setting, problem in zip(("manageJobsWithoutQueueName", "integrations.frameworks",
                                 "resources.quotaCheckStrategy"), found.problems, strict=True):
        assert f"): {setting}: " in problem


def test_no_kueue_in_the_namespace_is_refused_naming_the_settings():
    reads = cluster()
    reads.lists[DEPLOYMENTS] = []
    del reads.objects[f"/apis/{KUEUE_API}"]
    found = preview(reads)
    assert len(found.problems) == 2
    assert "serves no kueue.x-k8s.io/v1beta2" in found.problems[0]
    assert "no Deployment in namespace kueue-system runs as the ServiceAccount " \
           "kueue-controller-manager" in found.problems[1]
    assert "teams.kueue.existing.serviceAccount" in found.problems[1]


@pytest.mark.parametrize("refused, unchecked", [
    ((DEPLOYMENTS,), "not checked: Kueue's version and Configuration"),
    ((CONFIG_MAP,), "not checked: Kueue's Configuration (ConfigMap kueue-system/"
                    "kueue-manager-config): none of what the teams need of it"),
    (("/api/v1/namespaces/research",), "the labels the program gives them only"),
])
def test_what_the_preview_may_not_read_is_said_not_passed_silently(refused, unchecked):
    found = preview(cluster(configuration=without("manageJobsWithoutQueueName"),
                            refused=refused))
    (warning,) = [w for w in found.warnings if "HTTP 403" in w]
    assert unchecked in warning
    if refused != ("/api/v1/namespaces/research",):
        assert not found.problems


def test_the_preview_check_stops_before_anything_is_declared(monkeypatch):
    found = preview(cluster(manifests_deployment("registry.k8s.io/kueue/kueue:v0.20.1")))
    monkeypatch.setattr(existing_stacks, "existing_kueue_findings", lambda settings: found)
    with pytest.raises(existing_stacks.ExistingStackError) as refused:
        existing_stacks.check_existing_stacks(SETTINGS)
    assert str(refused.value).startswith("the stack's settings do not fit what the cluster runs "
                                         "(nothing was deployed):\n  - teams.kueue.mode: "
                                         "existing: Deployment kueue-system/kueue-controller-"
                                         "manager runs Kueue v0.20.1")


def test_an_installed_kueue_is_not_read():
    installs = load_settings(raw(with_changes(teams=copy.deepcopy(TEAMS))))
    assert existing_kueue.existing_kueue_findings(installs) == checks.Findings()


def test_the_operators_page_lists_each_requirement_and_the_supported_versions():
    page = (ROOT / "docs" / "operators" / "teams.md").read_text()
    section = page[page.index("## Using the cluster's Kueue"):
                   page.index("## What users do differently")]
    dra = load_settings(raw(with_changes(kubernetesVersion="1.37.2",
                                         gpuOperator={"gpuPath": "dra"},
                                         teams={**TEAMS, "kueue": {"mode": "existing"}})))
    # Every requirement refused: Kueue's defaults, selecting no team namespace.
    refused = configuration_findings(
        {"managedJobsNamespaceSelector": {"matchLabels": {"kueue": "on"}}}, dra).problems
    settings = [problem.split("): ", 1)[1].split(": ", 1)[0] for problem in refused]
    assert len(settings) == 5
    for setting in settings:
        assert f"| `{setting}`" in section, setting
    for framework in BUILTIN_INTEGRATIONS:
        assert f"`{framework.name}`" in section
    major, minor = checks.SUPPORTED_MINOR
    assert f"Kueue v{major}.{minor}.x" in section and checks.TESTED_VERSION in section


# --- the queues, flavors and workloads an existing Kueue already has ---------------------------

def kueue_object(kind: str, name: str, namespace: str | None = None, **spec) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": KUEUE_API, "kind": kind, "metadata": meta, "spec": spec}


def with_queues(**lists: list[dict]) -> FakeCluster:
    """The cluster of `cluster()` with Kueue's objects: `cluster_queues`, `flavors`,
    `topologies`, and by team namespace `local_queues_<ns>`, `workloads_<ns>`."""
    reads = cluster()
    paths = {"cluster_queues": "clusterqueues", "flavors": "resourceflavors",
             "topologies": "topologies"}
    for key, items in lists.items():
        if key in paths:
            reads.lists[f"/apis/{KUEUE_API}/{paths[key]}"] = items
        else:
            what, namespace = key.rsplit("_", 1)
            resource = {"local_queues": "localqueues", "workloads": "workloads"}[what]
            reads.lists[f"/apis/{KUEUE_API}/namespaces/{namespace}/{resource}"] = items
    return reads


def test_a_queue_or_flavor_of_the_teams_names_that_the_cluster_has_is_refused_with_its_fix():
    found = preview(with_queues(
        cluster_queues=[kueue_object("ClusterQueue", "research", cohortName="ml")],
        flavors=[kueue_object("ResourceFlavor", "gpu")],
        local_queues_vision=[kueue_object("LocalQueue", "default", "vision",
                                          clusterQueue="vision-old")]))
    assert len(found.problems) == 3, found.problems
    clusterqueue, flavor, localqueue = found.problems
    assert "a ClusterQueue research that the platform did not declare" in clusterqueue
    assert "(teams.teams[0].name)" in clusterqueue and "rename the team" in clusterqueue
    assert "a ResourceFlavor gpu" in flavor and "(teams.flavors[0].name)" in flavor
    assert "a LocalQueue vision/default" in localqueue
    assert "moving-a-teams-own-queues-to-the-platform" in localqueue


def test_the_platforms_own_queues_are_no_clash():
    ours = {"app.kubernetes.io/part-of": "gpu-platform"}
    queue = kueue_object("ClusterQueue", "research", cohortName="gpu-platform")
    queue["metadata"]["labels"] = ours
    assert preview(with_queues(cluster_queues=[queue])) == checks.Findings()


def test_a_queue_in_the_teams_cohort_and_workloads_of_other_queues_are_warned_of():
    found = preview(with_queues(
        cluster_queues=[kueue_object("ClusterQueue", "batch", cohortName="gpu-platform")],
        workloads_research=[kueue_object("Workload", f"job-{i}", "research",
                                         queueName="research-old") for i in range(3)]
        + [kueue_object("Workload", "new", "research", queueName="default")]))
    assert found.problems == []
    cohort, workloads = found.warnings
    assert "ClusterQueues batch of the cluster are in the teams' cohort gpu-platform" in cohort
    assert "research/research-old (3)" in workloads
    assert "not the team's quota" in workloads


def test_a_kueue_from_its_manifests_is_not_scraped_and_the_fix_is_named():
    reads = cluster()
    reads.lists[SERVICES] = [MANIFESTS_METRICS_SERVICE]
    [warning] = preview(reads).warnings
    assert "no Service in namespace kueue-system has the labels the platform's scrape" in warning
    assert ("kubectl -n kueue-system label service <its metrics Service> "
            "app.kubernetes.io/instance=kueue app.kubernetes.io/component=metrics-service"
            in warning)


TOPOLOGY = load_settings(raw(with_changes(teams={**EXISTING["teams"],
                                                 "topology": {"levels": ["example.com/rack"]}})))


def test_with_a_topology_kueues_gate_off_is_refused_and_unlabelled_gpu_nodes_warned_of():
    configuration = {**fitting_configuration(),
                     "featureGates": {"TopologyAwareScheduling": False}}
    nodes = [{"metadata": {"name": name,
                           "labels": {"nvidia.com/gpu.present": "true", **labels}}}
             for name, labels in (("gpu-1", {"example.com/rack": "a"}), ("gpu-2", {}))]
    nodes.append({"metadata": {"name": "cpu-1", "labels": {}}})
    found = checks.topology_findings(teams_inputs(TOPOLOGY), configuration, nodes)
    [gate] = found.problems
    assert "turns the feature gate TopologyAwareScheduling off" in gate
    [unlabelled] = found.warnings
    assert "GPU nodes without the level's label example.com/rack: gpu-2." in unlabelled
    assert checks.topology_findings(teams_inputs(TOPOLOGY), fitting_configuration(),
                                    nodes[:1]) == checks.Findings()


def test_with_a_topology_the_preview_reads_the_topologies_and_a_clash_is_refused():
    found = preview(with_queues(topologies=[kueue_object("Topology", "gpu-network")]),
                    TOPOLOGY)
    [problem] = found.problems
    assert "a Topology gpu-network that the platform did not declare" in problem
