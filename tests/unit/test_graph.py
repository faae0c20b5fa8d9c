"""The resource graph a `pulumi up` builds: every resource once, under the right component, and
every dependency edge of the design."""

import json
import re
import shlex
from collections import Counter

import pytest

from components.base.facts import KUEUE_API
from components.platform.settings import StackSettings
from tests.kit import harness
from tests.kit.stacks import KUBECONFIG, MINIMAL, TEAMS, with_changes
from tests.unit.test_settings import setting_paths

COMPONENT = "gpu-platform:index:"
K8S = "kubernetes:"

# (type, logical name, parent component) for the example stack.
EXPECTED = [
    (f"{COMPONENT}GpuPlatform", "gpu-platform", "pulumi:pulumi:Stack"),
    (f"{COMPONENT}GpuNodes", "gpu-nodes", f"{COMPONENT}GpuPlatform"),
    (f"{COMPONENT}GpuOperator", "gpu-operator", f"{COMPONENT}GpuPlatform"),
    (f"{COMPONENT}BinpackScheduler", "binpack-scheduler", f"{COMPONENT}GpuPlatform"),
    (f"{COMPONENT}OpaAdmission", "opa-admission", f"{COMPONENT}GpuPlatform"),
    ("pulumi:providers:kubernetes", "cluster", f"{COMPONENT}GpuPlatform"),
    (f"{COMPONENT}Monitoring", "monitoring", f"{COMPONENT}GpuPlatform"),
    (f"{COMPONENT}GpuCompaction", "gpu-compaction", f"{COMPONENT}GpuPlatform"),
    (f"{K8S}core/v1:Namespace", "gpu-compaction", f"{COMPONENT}GpuCompaction"),
    (f"{K8S}core/v1:ServiceAccount", "gpu-compaction/gpu-compaction",
     f"{COMPONENT}GpuCompaction"),
    (f"{K8S}rbac.authorization.k8s.io/v1:ClusterRole", "gpu-compaction",
     f"{COMPONENT}GpuCompaction"),
    (f"{K8S}rbac.authorization.k8s.io/v1:ClusterRoleBinding", "gpu-compaction",
     f"{COMPONENT}GpuCompaction"),
    (f"{K8S}core/v1:ConfigMap", "gpu-compaction/gpu-compaction-policy",
     f"{COMPONENT}GpuCompaction"),
    (f"{K8S}batch/v1:CronJob", "gpu-compaction/gpu-compaction", f"{COMPONENT}GpuCompaction"),
    (f"{K8S}core/v1:NodePatch", "gpu-node-1", f"{COMPONENT}GpuNodes"),
    (f"{K8S}core/v1:NodePatch", "gpu-node-2", f"{COMPONENT}GpuNodes"),
    (f"{K8S}core/v1:Namespace", "gpu-operator", f"{COMPONENT}GpuOperator"),
    (f"{K8S}helm.sh/v3:Release", "gpu-operator", f"{COMPONENT}GpuOperator"),
    (f"{K8S}core/v1:ResourceQuota", "gpu-operator/critical-pods", f"{COMPONENT}GpuOperator"),
    (f"{K8S}core/v1:Namespace", "gpu-scheduler", f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}core/v1:ResourceQuota", "gpu-scheduler/critical-pods",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}core/v1:ResourceQuota", "gpu-admission/critical-pods", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:ServiceAccount", "gpu-scheduler/gpu-binpack-scheduler",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}rbac.authorization.k8s.io/v1:ClusterRole",
     "gpu-binpack-scheduler", f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}rbac.authorization.k8s.io/v1:ClusterRoleBinding",
     "gpu-binpack-scheduler", f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}rbac.authorization.k8s.io/v1:ClusterRoleBinding",
     "gpu-binpack-scheduler:volume-scheduler", f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}rbac.authorization.k8s.io/v1:RoleBinding",
     "kube-system/gpu-binpack-scheduler:extension-apiserver-authentication-reader",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}rbac.authorization.k8s.io/v1:Role",
     "gpu-scheduler/gpu-binpack-scheduler:leader-election", f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}rbac.authorization.k8s.io/v1:RoleBinding",
     "gpu-scheduler/gpu-binpack-scheduler:leader-election", f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}core/v1:ConfigMap", "gpu-scheduler/gpu-binpack-scheduler-config",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}apps/v1:Deployment", "gpu-scheduler/gpu-binpack-scheduler",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}policy/v1:PodDisruptionBudget", "gpu-scheduler/gpu-binpack-scheduler",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}scheduling.k8s.io/v1:PriorityClass", "gpu-preemptible",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}core/v1:Service", "gpu-scheduler/gpu-binpack-scheduler",
     f"{COMPONENT}BinpackScheduler"),
    (f"{K8S}core/v1:Namespace", "gpu-admission", f"{COMPONENT}OpaAdmission"),
    ("tls:index/privateKey:PrivateKey", "ca", f"{COMPONENT}OpaAdmission"),
    ("tls:index/selfSignedCert:SelfSignedCert", "ca", f"{COMPONENT}OpaAdmission"),
    ("tls:index/privateKey:PrivateKey", "server", f"{COMPONENT}OpaAdmission"),
    ("tls:index/certRequest:CertRequest", "server", f"{COMPONENT}OpaAdmission"),
    ("tls:index/locallySignedCert:LocallySignedCert", "server", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:ServiceAccount", "gpu-admission/opa", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:ConfigMap", "gpu-admission/opa-admission-policy",
     f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:ConfigMap", "gpu-admission/opa-server-policy", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:Secret", "gpu-admission/opa-tls", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:Service", "gpu-admission/opa", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}apps/v1:Deployment", "gpu-admission/opa", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}policy/v1:PodDisruptionBudget", "gpu-admission/opa", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
     "gpu-platform-admission", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:ConfigMap", "gpu-admission/webhook-reachability", f"{COMPONENT}OpaAdmission"),
    (f"{K8S}core/v1:Namespace", "monitoring", f"{COMPONENT}Monitoring"),
    ("random:index/randomPassword:RandomPassword", "grafana-admin", f"{COMPONENT}Monitoring"),
    (f"{K8S}core/v1:Secret", "monitoring/grafana-admin", f"{COMPONENT}Monitoring"),
    (f"{K8S}helm.sh/v3:Release", "kube-prometheus-stack", f"{COMPONENT}Monitoring"),
    (f"{K8S}monitoring.coreos.com/v1:ServiceMonitor", "monitoring/nvidia-dcgm-exporter",
     f"{COMPONENT}Monitoring"),
    (f"{K8S}core/v1:ConfigMap", "monitoring/gpu-platform-dashboard", f"{COMPONENT}Monitoring"),
    (f"{K8S}monitoring.coreos.com/v1:PrometheusRule", "monitoring/gpu-platform",
     f"{COMPONENT}Monitoring"),
    (f"{K8S}monitoring.coreos.com/v1:PodMonitor", "monitoring/gpu-admission-opa",
     f"{COMPONENT}Monitoring"),
    (f"{K8S}monitoring.coreos.com/v1:ServiceMonitor", "monitoring/gpu-binpack-scheduler",
     f"{COMPONENT}Monitoring"),
    (f"{K8S}monitoring.coreos.com/v1:ServiceMonitor", "monitoring/kueue", f"{COMPONENT}Monitoring"),
    (f"{COMPONENT}Teams", "teams", f"{COMPONENT}GpuPlatform"),
    (f"{K8S}core/v1:Namespace", "kueue-system", f"{COMPONENT}Teams"),
    (f"{K8S}core/v1:ResourceQuota", "kueue-system/critical-pods", f"{COMPONENT}Teams"),
    (f"{K8S}helm.sh/v3:Release", "kueue", f"{COMPONENT}Teams"),
    (f"{K8S}{KUEUE_API}:ResourceFlavor", "gpu", f"{COMPONENT}Teams"),
    (f"{K8S}{KUEUE_API}:ResourceFlavor", "any-node", f"{COMPONENT}Teams"),
    (f"{K8S}{KUEUE_API}:WorkloadPriorityClass", "team-high", f"{COMPONENT}Teams"),
    (f"{K8S}{KUEUE_API}:WorkloadPriorityClass", "team-low", f"{COMPONENT}Teams"),
    (f"{K8S}{KUEUE_API}:ClusterQueue", "research", f"{COMPONENT}Teams"),
    (f"{K8S}{KUEUE_API}:ClusterQueue", "vision", f"{COMPONENT}Teams"),
    *[(f"{K8S}core/v1:Namespace", namespace, f"{COMPONENT}Teams")
      for namespace in ("research", "vision", "vision-serving")],
    *[(f"{K8S}{KUEUE_API}:LocalQueue", f"{namespace}/default", f"{COMPONENT}Teams")
      for namespace in ("research", "vision", "vision-serving")],
]


def parent_type(recording, registration) -> str:
    return registration.parent.split("::")[2].split("$")[-1]


def test_every_expected_resource_once_with_its_parent(example_run):
    registered = Counter((r.type, r.name) for r in example_run.registrations)
    expected = Counter((t, n) for t, n, _ in EXPECTED)
    assert registered == expected
    for type_, name, parent in EXPECTED:
        assert parent_type(example_run, example_run.one(type_, name)) == parent, (type_, name)


def depends_on(recording, dependent, dependency) -> bool:
    return dependency.urn in dependent.dependencies


def waits_for(recording, dependent, dependency) -> bool:
    """Whether `dependent` is created only once `dependency` exists, as the engine orders
    them: through its own dependencies, or its parents' (a child registers only once its
    parent has, and a component registers only once what it depends on exists), and
    theirs, transitively."""
    seen, todo = set(), [dependent.urn]
    while todo:
        urn = todo.pop()
        if urn in seen:
            continue
        seen.add(urn)
        registration = recording.by_urn(urn)
        if dependency.urn in registration.dependencies and urn != dependency.urn:
            return True
        todo.extend(registration.dependencies)
        if registration.parent and "::pulumi:pulumi:Stack::" not in registration.parent:
            todo.append(registration.parent)
    return False


WEBHOOK = (f"{K8S}admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
           "gpu-platform-admission")
KPS = (f"{K8S}helm.sh/v3:Release", "kube-prometheus-stack")
OPERATOR = (f"{K8S}helm.sh/v3:Release", "gpu-operator")
KUEUE = (f"{K8S}helm.sh/v3:Release", "kueue")
OPA_NOT_READY = "a webhook registered before OPA answers rejects or stalls pod creation"

EDGES = [
    # (dependent, dependency, why)
    *[(OPERATOR, (f"{K8S}core/v1:NodePatch", node),
       "taint the nodes before the operator's DaemonSets and the first GPU pods arrive")
      for node in ("gpu-node-1", "gpu-node-2")],
    (OPERATOR, (f"{K8S}core/v1:ResourceQuota", "gpu-operator/critical-pods"),
     "where critical-priority pods need a quota (GKE), the operator's are refused without it"),
    (WEBHOOK, (f"{K8S}apps/v1:Deployment", "gpu-scheduler/gpu-binpack-scheduler"),
     "never force GPU pods onto a scheduler that is not running"),
    *[(WEBHOOK, dependency, OPA_NOT_READY) for dependency in (
        (f"{K8S}apps/v1:Deployment", "gpu-admission/opa"),
        (f"{K8S}core/v1:ConfigMap", "gpu-admission/opa-admission-policy"),
        (f"{K8S}core/v1:ConfigMap", "gpu-admission/opa-server-policy"),
        (f"{K8S}core/v1:Secret", "gpu-admission/opa-tls"))],
    *[(dependent, KPS, "its CRD or the Grafana sidecar that loads it comes from the chart")
      for dependent in ((f"{K8S}monitoring.coreos.com/v1:ServiceMonitor",
                         "monitoring/nvidia-dcgm-exporter"),
                        (f"{K8S}core/v1:ConfigMap", "monitoring/gpu-platform-dashboard"),
                        (f"{K8S}monitoring.coreos.com/v1:PrometheusRule",
                         "monitoring/gpu-platform"))],
    ((f"{K8S}monitoring.coreos.com/v1:ServiceMonitor", "monitoring/nvidia-dcgm-exporter"),
     OPERATOR, "the DCGM exporter Service it selects is created by the operator"),
    ((f"{K8S}{KUEUE_API}:ResourceFlavor", "gpu"), KUEUE,
     "Kueue's CRDs and webhooks come with its chart: applying a flavor asks its webhooks, so "
     "`pulumi up` stops there when the API server cannot reach Kueue"),
    *[((f"{K8S}{KUEUE_API}:LocalQueue", f"{ns}/default"), (f"{K8S}core/v1:Namespace", ns),
       "a team's queue lives in its namespace") for ns in ("research", "vision")],
    (WEBHOOK, (f"{K8S}{KUEUE_API}:ResourceFlavor", "gpu"),
     "the policy sends team namespaces' GPU pods through Kueue: its webhooks answer first"),
]


def test_compaction_waits_for_the_binpack_scheduler(example_run):
    """Evictions start only once the scheduler that places the evicted pods again is there."""
    cron_job = example_run.one(f"{K8S}batch/v1:CronJob", "gpu-compaction/gpu-compaction")
    scheduler = example_run.one(f"{K8S}apps/v1:Deployment", "gpu-scheduler/gpu-binpack-scheduler")
    assert waits_for(example_run, cron_job, scheduler)


@pytest.mark.parametrize("dependent, dependency, why", EDGES,
                         ids=[f"{e[0][1]} after {e[1][1]}" for e in EDGES])
def test_design_edge(example_run, dependent, dependency, why):
    assert waits_for(example_run, example_run.one(*dependent), example_run.one(*dependency)), why


def test_a_component_that_depends_on_another_waits_for_all_of_it(example_run):
    """Ordering between components goes through their ResourceOptions: admission's component
    depends on the binpack scheduler's, so each of its resources waits for every one of the
    scheduler's."""
    admission = [r for r in example_run.registrations if r.type.startswith(K8S)
                 and parent_type(example_run, r) == f"{COMPONENT}OpaAdmission"]
    scheduler = [r for r in example_run.registrations if r.type.startswith(K8S)
                 and parent_type(example_run, r) == f"{COMPONENT}BinpackScheduler"]
    assert admission and scheduler
    assert all(waits_for(example_run, a, s) for a in admission for s in scheduler)
    assert not any(waits_for(example_run, s, a) for a in admission for s in scheduler)


def test_namespaced_objects_wait_for_their_namespace(example_run):
    namespaces = {r.name: r for r in example_run.of_type(f"{K8S}core/v1:Namespace")}
    checked = 0
    for registration in example_run.registrations:
        namespace = (registration.inputs.get("metadata") or {}).get("namespace")
        if namespace in namespaces and registration.type.startswith(K8S):
            assert waits_for(example_run, registration, namespaces[namespace]), registration.name
            checked += 1
    assert checked >= 20


def test_webhook_is_registered_last_among_admission_objects(example_run):
    webhook = example_run.one(
        f"{K8S}admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
        "gpu-platform-admission")
    admission = [r for r in example_run.registrations
                 if r.type.startswith(K8S) and parent_type(example_run, r).endswith("OpaAdmission")
                 and r is not webhook and "PodDisruptionBudget" not in r.type
                 and "Role" not in r.type and "ServiceAccount" not in r.type
                 and "ResourceQuota" not in r.type
                 and "Namespace" not in r.type]
    probe = example_run.one(f"{K8S}core/v1:ConfigMap", "gpu-admission/webhook-reachability")
    missing = [r.name for r in admission if r.urn not in webhook.dependencies and r is not probe]
    assert not missing, f"webhook does not wait for {missing}"
    # The reachability probe comes after the webhooks: its apply is what asks OPA through them.
    assert webhook.urn in probe.dependencies


@pytest.mark.parametrize("nodes", [["gpu-a"], ["gpu-a", "gpu-b", "gpu-c"]])
def test_one_node_patch_per_configured_node(nodes):
    recording = harness.run_program(harness.stack_file_config(
        with_changes(gpuNodes={"names": nodes})))
    patches = recording.of_type(f"{K8S}core/v1:NodePatch")
    assert sorted(p.inputs["metadata"]["name"] for p in patches) == sorted(nodes)
    release = recording.one(f"{K8S}helm.sh/v3:Release", "gpu-operator")
    assert all(waits_for(recording, release, p) for p in patches)


def test_single_scheduler_replica_has_no_lease_rights_and_no_budget():
    recording = harness.run_program(harness.stack_file_config(
        with_changes(scheduler={"replicas": 1})))
    kinds = {(r.type.rsplit(":", 1)[1], r.name) for r in recording.registrations}
    assert ("Role", "gpu-scheduler/gpu-binpack-scheduler:leader-election") not in kinds
    assert ("PodDisruptionBudget", "gpu-scheduler/gpu-binpack-scheduler") not in kinds


def test_given_grafana_password_is_used_as_a_secret_and_none_is_generated():
    given = harness.run_program(harness.stack_file_config(
        with_changes(monitoring={"grafana": {"adminPassword": "from-the-stack"}})))
    assert given.of_type("random:index/randomPassword:RandomPassword") == []
    secret = given.one(f"{K8S}core/v1:Secret", "monitoring/grafana-admin")
    assert harness.is_secret(secret.raw_inputs["stringData"])
    assert secret.inputs["stringData"]["admin-password"] == "from-the-stack"


def test_generated_grafana_password_fills_the_admin_secret(example_run):
    generated = example_run.one("random:index/randomPassword:RandomPassword", "grafana-admin")
    assert parent_type(example_run, generated).endswith("Monitoring")
    secret = example_run.one(f"{K8S}core/v1:Secret", "monitoring/grafana-admin")
    password = secret.inputs["stringData"]["admin-password"]
    assert len(password) == generated.inputs["length"] >= 32


def test_minimal_stack_declares_the_whole_platform_but_compaction_and_teams():
    """Compaction evicts running pods, and teams put every GPU pod in a queue, so a stack has
    them only when it asks for them."""
    recording = harness.run_program(harness.stack_file_config(MINIMAL))
    components = {r.type for r in recording.registrations if r.type.startswith(COMPONENT)}
    assert components == {t for t, _, _ in EXPECTED if t.startswith(COMPONENT)} - {
        f"{COMPONENT}GpuCompaction", f"{COMPONENT}Teams"}


# --- secrets in settings ----------------------------------------------------------------------

def releases_of(recording):
    return {r.name: r for r in recording.of_type(f"{K8S}helm.sh/v3:Release")}


def test_a_secret_in_extra_values_stays_secret_in_the_release_inputs():
    token = "s3cr3t-registry-token"
    config = harness.stack_file_config(with_changes(gpuOperator={"extraValues": {
        "driver": {"repoConfig": {"configMapName": token}}}}))
    plain = releases_of(harness.run_program(config))
    secret = releases_of(harness.run_program(config, secret_keys=["gpu-platform:gpuOperator"]))
    # Without the secret marking the value is in the inputs for all to read; with it, the
    # operator release's values are a secret and the value is still there inside.
    assert not harness.is_secret(plain["gpu-operator"].raw_inputs["values"])
    assert harness.is_secret(secret["gpu-operator"].raw_inputs["values"])
    assert secret["gpu-operator"].inputs["values"]["driver"]["repoConfig"][
        "configMapName"] == token
    assert not harness.is_secret(secret["kube-prometheus-stack"].raw_inputs["values"])


def test_a_secret_grafana_password_makes_the_monitoring_release_values_secret():
    config = harness.stack_file_config(with_changes(monitoring={"grafana": {
        "adminPassword": "from-the-stack"}}))
    recording = harness.run_program(config, secret_keys=["gpu-platform:monitoring"])
    assert harness.is_secret(releases_of(recording)["kube-prometheus-stack"].raw_inputs["values"])


def test_a_secret_where_no_setting_takes_one_is_refused_and_nothing_is_declared():
    recording = harness.Recording()
    with pytest.raises(Exception) as refused:
        harness.run_program(harness.stack_file_config(with_changes(admission={
            "exemptNamespaces": ["batch"]})), recording, secret_keys=["gpu-platform:admission"])
    message = str(refused.value)
    assert "gpu-platform:admission: stored as a secret, but none of its settings takes one" \
        in message
    assert "secrets only under gpu-platform:gpuOperator and gpu-platform:monitoring" in message
    assert not [r for r in recording.registrations if r.type.startswith(K8S)]


# --- the target cluster -----------------------------------------------------------------------

def test_everything_reaches_the_cluster_through_the_stack_provider(example_run,
                                                                     example_settings):
    (provider,) = example_run.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["context"] == example_settings.cluster.context
    kubernetes = [r for r in example_run.registrations if r.type.startswith(K8S)]
    assert len(kubernetes) > 30
    assert {r.provider.rsplit("::", 1)[0] for r in kubernetes} == {provider.urn}
    (platform,) = example_run.of_type(f"{COMPONENT}GpuPlatform")
    assert example_run.outputs[platform.urn]["clusterContext"] == example_settings.cluster.context


def platform_outputs(recording: harness.Recording) -> dict:
    (platform,) = recording.of_type(f"{COMPONENT}GpuPlatform")
    return recording.outputs[platform.urn]


def test_the_grafana_command_reaches_the_stack_s_cluster(example_run, tmp_path):
    """The port-forward command names the stack's context, so it never reaches whichever
    context is current, and the stack's kubeconfig when it names one (quoted for the shell)."""
    assert shlex.split(platform_outputs(example_run)["grafanaPortForward"]) == [
        "kubectl", "--context", "gpu-cluster-dev", "-n", "monitoring", "port-forward",
        "svc/kube-prometheus-stack-grafana", "3000:80"]
    kubeconfig = tmp_path / "cluster configs" / "kubeconfig"
    kubeconfig.parent.mkdir()
    kubeconfig.write_text(KUBECONFIG.read_text())
    recording = harness.run_program(harness.stack_file_config(with_changes(
        cluster={"context": "gpu-cluster", "kubeconfig": str(kubeconfig)})))
    assert shlex.split(platform_outputs(recording)["grafanaPortForward"])[:5] == [
        "kubectl", "--context", "gpu-cluster", "--kubeconfig", str(kubeconfig)]


def test_node_pool_taint_mode_patches_no_node_and_still_guards_the_taint():
    recording = harness.run_program(harness.stack_file_config(with_changes(gpuNodes={
        "taintedBy": "nodePool", "names": [], "taint": "nvidia.com/gpu=present:NoSchedule"})))
    assert recording.of_type(f"{K8S}core/v1:NodePatch") == []
    params = json.loads(recording.one(f"{K8S}core/v1:ConfigMap",
                                      "gpu-admission/opa-admission-policy")
                        .inputs["data"]["params.json"])
    assert params["gpuTaints"][0]["text"] == "nvidia.com/gpu=present:NoSchedule"
    assert params["gpuNodeNames"] == []
    operator = recording.one(f"{K8S}helm.sh/v3:Release", "gpu-operator").inputs["values"]
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
            "effect": "NoSchedule"} in operator["daemonsets"]["tolerations"]


# --- air-gapped and mirrored sites ------------------------------------------------------------

def test_a_registry_mirror_is_followed_by_every_image_the_program_and_the_charts_run():
    mirror = "registry.example.com:5000/mirror"
    recording = harness.run_program(harness.stack_file_config(with_changes(
        imageRegistryMirror=mirror, compaction={"enabled": True})))
    pods = [r.inputs["spec"]["template"]["spec"]
            for r in recording.of_type(f"{K8S}apps/v1:Deployment")]
    pods += [r.inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]
             for r in recording.of_type(f"{K8S}batch/v1:CronJob")]
    images = [c["image"] for pod in pods
              for c in pod.get("initContainers", []) + pod["containers"]]
    assert images and all(i.startswith(mirror + "/") for i in images), images
    assert f"{mirror}/library/python:3.13.9-alpine3.22" in images     # compaction's plan
    # Docker Hub's and registry.k8s.io's paths are kept under the mirror.
    assert f"{mirror}/openpolicyagent/opa:1.22.2-static" in images
    assert f"{mirror}/kube-scheduler:v1.35.10" in images
    values = recording.one(f"{K8S}helm.sh/v3:Release", "gpu-operator").inputs["values"]
    assert values["operator"]["repository"] == f"{mirror}/nvidia"
    assert values["toolkit"]["repository"] == f"{mirror}/nvidia/k8s"
    assert values["node-feature-discovery"]["image"]["repository"] == \
        f"{mirror}/nfd/node-feature-discovery"
    (platform,) = recording.of_type(f"{COMPONENT}GpuPlatform")
    listed = recording.outputs[platform.urn]["images"]
    assert set(images) <= set(listed)
    assert f"{mirror}/nvidia/gpu-operator:v26.7.0" in listed
    assert all(i.startswith(mirror + "/") for i in listed)
    # kube-prometheus-stack and its subcharts take the registry from one global value, keeping
    # the repository path, as the listed images do.
    stack = recording.one(f"{K8S}helm.sh/v3:Release", "kube-prometheus-stack").inputs["values"]
    assert stack["global"]["imageRegistry"] == mirror
    assert {f"{mirror}/prometheus/prometheus:v3.14.0-distroless",
            f"{mirror}/grafana/grafana:13.2.0", f"{mirror}/kiwigrid/k8s-sidecar:2.10.1",
            f"{mirror}/busybox:1.37.0"} <= set(listed)


def test_without_a_mirror_images_come_from_their_own_registries(example_run):
    (platform,) = example_run.of_type(f"{COMPONENT}GpuPlatform")
    listed = example_run.outputs[platform.urn]["images"]
    assert "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0" in listed
    assert "registry.k8s.io/nfd/node-feature-discovery:v0.19.0" in listed
    assert "docker.io/openpolicyagent/opa:1.22.2-static" not in listed   # as the manifest says
    assert "openpolicyagent/opa:1.22.2-static" in listed
    assert {"quay.io/prometheus/alertmanager:v0.34.0", "docker.io/grafana/grafana:13.2.0",
            "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0"} <= set(listed)
    stack = example_run.one(f"{K8S}helm.sh/v3:Release", "kube-prometheus-stack").inputs["values"]
    assert "global" not in stack
    # The CRD upgrade job's kubectl is the cluster's version, fixed so a mirror can hold it.
    scheduler = next(i for i in listed if "/kube-scheduler:" in i)
    kubectl = stack["crds"]["upgradeJob"]["image"]["kubectl"]["tag"]
    assert f"registry.k8s.io/kubectl:{kubectl}" in listed
    assert kubectl == scheduler.rsplit(":", 1)[1]


def test_charts_install_from_a_local_path_or_an_oci_registry(tmp_path):
    chart = tmp_path / "gpu-operator"
    chart.mkdir()
    recording = harness.run_program(harness.stack_file_config(with_changes(
        gpuOperator={"chartPath": str(chart)},
        monitoring={"repository": "oci://registry.example.com/charts"})))
    operator = recording.one(f"{K8S}helm.sh/v3:Release", "gpu-operator").inputs
    assert operator["chart"] == str(chart) and "repositoryOpts" not in operator
    stack = recording.one(f"{K8S}helm.sh/v3:Release", "kube-prometheus-stack").inputs
    assert stack["chart"] == "oci://registry.example.com/charts/kube-prometheus-stack"
    assert stack["version"] == "88.5.3"


# --- every chart and image, on the air-gapped page ------------------------------------------

AIR_GAPPED_PAGE = harness.ROOT / "docs" / "operators" / "air-gapped.md"
# A stack for each setting that adds images or charts.
OPTION_STACKS = {
    "minimal": MINIMAL,
    "teams": with_changes(teams=TEAMS),
    "compaction": with_changes(compaction={"enabled": True}),
    "reclaim": with_changes(reclaim={"enabled": True, "namespaces": ["ml"]}),
    "reservation": with_changes(reservation={"enabled": True}),
    "remediation": with_changes(remediation={"mode": "report"}),
    "dra": with_changes(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"}),
    "every operand": with_changes(gpuOperator={
        "driver": {"enabled": True}, "migManager": {"enabled": True},
        "mig": {"strategy": "single"}, "sandboxWorkloads": {"enabled": True},
        "vgpuDeviceManager": {"enabled": True}, "vfioManager": {"enabled": True}}),
}


def air_gapped_rows() -> dict[str, tuple[str, str]]:
    """The page's lists of charts and images: each reference, with the settings the page says
    bring it and whether a default stack deploys it."""
    return {row[1]: (row[2], row[3]) for row in re.finditer(
        r"^\| `([^`]+)` \| (.+) \| (yes|no) \|$", AIR_GAPPED_PAGE.read_text(), re.MULTILINE)}


@pytest.fixture(scope="module")
def option_outputs() -> dict[str, dict]:
    """The images and charts each option stack lists, kubernetesVersion in the tags written as
    the page writes it."""
    listed = {}
    for name, stack in OPTION_STACKS.items():
        outputs = platform_outputs(harness.run_program(harness.stack_file_config(stack)))
        version = f":v{stack['kubernetesVersion']}"
        listed[name] = {"images": {image.replace(version, ":v<kubernetesVersion>")
                                   for image in outputs["images"]},
                        "charts": set(outputs["charts"])}
    return listed


def test_the_air_gapped_page_lists_every_chart_and_image_of_every_option(option_outputs):
    """What a mirror must hold over all options is the page's list, no more and no less; a stack
    of the required settings alone deploys exactly the rows marked for a default stack."""
    rows = air_gapped_rows()
    every = set().union(*(listed["images"] | listed["charts"]
                          for listed in option_outputs.values()))
    assert every == set(rows)
    minimal = option_outputs["minimal"]
    assert minimal["images"] | minimal["charts"] == {
        reference for reference, (_, default) in rows.items() if default == "yes"}


@pytest.mark.parametrize(("option", "reference", "brought_by"), [
    ("teams", "registry.k8s.io/kueue/kueue:v0.19.2", "`teams.enabled`"),
    ("teams", "oci://registry.k8s.io/kueue/charts/kueue (version 0.19.2)", "`teams.enabled`"),
    ("dra", "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0", "`gpuOperator.gpuPath: dra`"),
    ("compaction", "registry.k8s.io/descheduler/descheduler:v0.36.0", "`compaction.enabled`"),
    *((option, "docker.io/library/python:3.13.9-alpine3.22",
       "`compaction.enabled` with `compaction.planThreshold`, or `reclaim.enabled`, or "
       "`reservation.enabled`, or `remediation.mode`") for option in (
        "compaction", "reclaim", "reservation", "remediation")),
    ("every operand", "nvcr.io/nvidia/driver:595.91.07", "`gpuOperator.driver.enabled`"),
])
def test_the_air_gapped_page_names_the_setting_that_brings_each_optional_image(
        option_outputs, option, reference, brought_by):
    assert reference in option_outputs[option]["images"] | option_outputs[option]["charts"]
    assert reference not in option_outputs["minimal"]["images"]
    assert air_gapped_rows()[reference] == (brought_by, "no")


def test_the_dra_path_pulls_no_device_plugin(option_outputs):
    dra = option_outputs["dra"]["images"]
    assert not any("/k8s-device-plugin:" in i or "/container-toolkit:" in i for i in dra)
    assert "nvcr.io/nvidia/k8s-device-plugin:v0.20.0" in option_outputs["minimal"]["images"]


def test_every_setting_the_air_gapped_page_names_is_a_setting():
    named = {option.split(":")[0] for brought_by, _ in air_gapped_rows().values()
             for option in re.findall(r"`([^`]+)`", brought_by)}
    assert named and named <= set(setting_paths(StackSettings))
