"""What each component's manifests do for the people who run and use the cluster."""

import json

import pytest
import yaml

from components import (
    binpack_scheduler,
    gpu_compaction,
    gpu_nodes,
    gpu_operator,
    monitoring,
    opa_admission,
)
from components.base.validation import SettingsError
from components.platform.config import load_settings
from tests.kit.harness import (
    admission_of,
    compaction_of,
    monitoring_of,
    nodes_of,
    operator_of,
    scheduler_of,
)
from tests.kit.stacks import raw, with_changes


def settings_of(**changes):
    return load_settings(raw(with_changes(**changes)))


DEFAULT = settings_of()


def containers(deployment: dict) -> dict[str, dict]:
    return {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}


# --- GPU nodes --------------------------------------------------------------------------------

def test_node_patch_declares_the_whole_taint_list_without_forcing():
    settings = settings_of(gpuNodes={"extraTaints": ["dedicated=ml:NoSchedule"],
                                     "labels": {"gpu-platform.io/pool": "training"}})
    patch = gpu_nodes.node_patch(nodes_of(settings), "gpu-node-1")
    assert patch["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    assert patch["metadata"]["labels"] == {"gpu-platform.io/pool": "training"}
    annotations = patch["metadata"]["annotations"]
    assert annotations["pulumi.com/patchFieldManager"] == gpu_nodes.FIELD_MANAGER
    assert "pulumi.com/patchForce" not in annotations


def test_taking_over_the_taint_list_is_explicit():
    patch = gpu_nodes.node_patch(nodes_of(settings_of(gpuNodes={"forceTaintOwnership": True})), "n")
    assert patch["metadata"]["annotations"]["pulumi.com/patchForce"] == "true"


# --- GPU Operator -----------------------------------------------------------------------------

def test_operator_switches_follow_the_settings():
    values = gpu_operator.chart_values(operator_of(settings_of(gpuOperator={
        "driver": {"enabled": True}, "migManager": {"enabled": True},
        "mig": {"strategy": "mixed", "profiles": ["1g.10gb"]}})))
    assert values["driver"] == {"enabled": True}
    assert values["migManager"] == {"enabled": True}
    assert values["mig"] == {"strategy": "mixed"}
    defaults = gpu_operator.chart_values(operator_of(DEFAULT))
    assert defaults["driver"] == {"enabled": False}
    for operand in ("migManager", "vgpuManager", "vgpuDeviceManager", "vfioManager",
                    "sandboxWorkloads"):
        assert defaults[operand] == {"enabled": False}, operand


def test_operator_does_not_declare_a_second_dcgm_service_monitor():
    assert gpu_operator.chart_values(operator_of(DEFAULT))["dcgmExporter"]["serviceMonitor"] == {
        "enabled": False}


def test_time_slicing_advertises_each_gpu_several_times():
    values = gpu_operator.chart_values(operator_of(settings_of(gpuOperator={
        "timeSlicing": {"replicas": 4}})))
    config = values["devicePlugin"]["config"]
    assert config["create"] is True and config["default"] in config["data"]
    sharing = yaml.safe_load(config["data"][config["default"]])
    assert sharing["version"] == "v1"
    assert sharing["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}]
    assert "config" not in gpu_operator.chart_values(operator_of(DEFAULT))["devicePlugin"]


def test_extra_values_reach_the_chart_without_replacing_generated_ones():
    values = gpu_operator.chart_values(operator_of(settings_of(gpuOperator={"extraValues": {
        "dcgmExporter": {"image": {"tag": "custom"}}, "operator": {"resources": {}}}})))
    assert values["dcgmExporter"]["image"] == {"tag": "custom"}
    assert values["dcgmExporter"]["serviceMonitor"] == {"enabled": False}
    assert values["operator"] == {"upgradeCRD": True, "resources": {}}


def test_gkes_driver_paths_merge_and_keep_the_toolkits_hardening():
    """The GKE values docs/operators/managed-clusters.md gives (GKE installs the driver)."""
    gke = "/home/kubernetes/bin/nvidia"
    values = gpu_operator.chart_values(operator_of(settings_of(gpuOperator={"extraValues": {
        "hostPaths": {"driverInstallDir": gke}, "toolkit": {"installDir": gke}}})))
    assert values["hostPaths"]["driverInstallDir"] == values["toolkit"]["installDir"] == gke
    assert values["toolkit"]["env"] == gpu_operator.chart_values(operator_of(DEFAULT))[
        "toolkit"]["env"]


def test_operator_namespace_allows_privileged_operands():
    labels = gpu_operator.operator_namespace(operator_of(DEFAULT))["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def quota_of(settings) -> tuple[int, list[str]]:
    spec = gpu_operator.critical_pods_quota(operator_of(settings))["spec"]
    return int(spec["hard"]["pods"]), spec["scopeSelector"]["matchExpressions"][0]["values"]


def test_operator_quota_covers_every_critical_pod_the_chart_runs():
    """One named GPU node, a cluster of up to 100 nodes, the default switches: on the GPU node
    the validator, toolkit, device plugin, DCGM exporter and GFD (5); an NFD worker on each of
    the 100 nodes; the operator, NFD master and NFD gc (3); and one more of each of those 9
    kinds while a rolling update replaces it."""
    pods, classes = quota_of(DEFAULT)
    assert pods == 5 * 1 + 100 + 3 + (5 + 1 + 3)
    # The chart runs them all at system-node-critical.
    assert "system-node-critical" in classes


def test_operator_quota_grows_with_the_operands_and_the_nodes():
    with_driver_and_mig = settings_of(gpuNodes={"names": ["g1", "g2"]}, gpuOperator={
        "driver": {"enabled": True}, "migManager": {"enabled": True}, "maxClusterNodes": 10})
    # 7 operands on each of 2 GPU nodes, 10 NFD workers, 3 Deployments; then 7 + 1 + 3.
    assert quota_of(with_driver_and_mig)[0] == 7 * 2 + 10 + 3 + (7 + 1 + 3)
    without_nfd = settings_of(gpuOperator={"nfd": {"enabled": False}, "maxClusterNodes": 10})
    assert quota_of(without_nfd)[0] == 5 * 1 + 1 + (5 + 1)
    # Node pools: any node may be a GPU node.
    pools = settings_of(gpuNodes={"taintedBy": "nodePool", "names": []},
                        gpuOperator={"maxClusterNodes": 40})
    assert quota_of(pools)[0] == 5 * 40 + 40 + 3 + (5 + 1 + 3)


# --- Binpack scheduler ------------------------------------------------------------------------

def test_scheduler_profile_packs_by_requested_to_capacity_ratio():
    settings = settings_of(scheduler={"scoringStrategy": {
        "resources": [{"name": "nvidia.com/gpu", "weight": 50}, {"name": "cpu", "weight": 2}],
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                               {"utilization": 80, "score": 9},
                                               {"utilization": 100, "score": 10}]}}})
    config = binpack_scheduler.scheduler_configuration(scheduler_of(settings))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (profile,) = config["profiles"]
    fit = plugin_args(profile, "NodeResourcesFit")
    assert fit is not None, "the profile configures no NodeResourcesFit"
    strategy = fit["scoringStrategy"]
    assert strategy["type"] == "RequestedToCapacityRatio"
    assert strategy["resources"] == [{"name": "nvidia.com/gpu", "weight": 50},
                                     {"name": "cpu", "weight": 2}]
    assert [p["utilization"] for p in strategy["requestedToCapacityRatio"]["shape"]] == [0, 80,
                                                                                         100]


def plugin_args(profile: dict, plugin: str) -> dict | None:
    return next((c["args"] for c in profile["pluginConfig"] if c["name"] == plugin), None)


def test_score_plugin_weights_merge_over_the_binpack_defaults():
    """Naming one plugin changes that plugin only: the other binpack defaults stay."""
    settings = settings_of(scheduler={"scorePluginWeights": {"ImageLocality": 1,
                                                             "NodeResourcesFit": 3}})
    (profile,) = binpack_scheduler.scheduler_configuration(scheduler_of(settings))["profiles"]
    score = profile["plugins"]["score"]
    assert {p["name"]: p["weight"] for p in score["enabled"]} == {"ImageLocality": 1,
                                                                  "NodeResourcesFit": 3}
    assert score["disabled"] == [{"name": "NodeResourcesBalancedAllocation"}]


def test_system_default_spread_is_off_unless_asked_for():
    def spread_args(**scheduler):
        (profile,) = binpack_scheduler.scheduler_configuration(scheduler_of(
            settings_of(scheduler=scheduler)))["profiles"]
        return plugin_args(profile, "PodTopologySpread")

    # List defaulting with no constraints of its own: only pods' own constraints are spread.
    assert spread_args() == {"defaultingType": "List"}
    assert spread_args(systemDefaultSpread=True) is None    # kube-scheduler's System default


def test_mixed_mig_slices_are_scored_at_the_gpu_weight():
    settings = settings_of(
        gpuOperator={"mig": {"strategy": "mixed", "profiles": ["1g.10gb", "3g.40gb"]}},
        scheduler={"scoringStrategy": {"resources": [
            {"name": "nvidia.com/gpu", "weight": 7}, {"name": "cpu", "weight": 1},
            {"name": "nvidia.com/mig-3g.40gb", "weight": 2}]}})
    (profile,) = binpack_scheduler.scheduler_configuration(scheduler_of(settings))["profiles"]
    fit = plugin_args(profile, "NodeResourcesFit")
    assert fit is not None, "the profile configures no NodeResourcesFit"
    resources = fit["scoringStrategy"]["resources"]
    # A weight configured for a MIG resource wins; a listed profile without one gets the GPU's.
    assert {r["name"]: r["weight"] for r in resources} == {
        "nvidia.com/gpu": 7, "cpu": 1, "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 7}


@pytest.mark.parametrize("replicas, elect", [(1, False), (2, True), (3, True)])
def test_leader_election_only_with_several_replicas(replicas, elect):
    settings = settings_of(scheduler={"replicas": replicas})
    election = binpack_scheduler.scheduler_configuration(scheduler_of(settings))["leaderElection"]
    assert election["leaderElect"] is elect
    assert (election["resourceName"], election["resourceNamespace"]) == (
        "gpu-binpack-scheduler", "gpu-scheduler")
    roles = [o for o in binpack_scheduler.rbac_objects(scheduler_of(settings))
             if o["kind"] == "Role"]
    if elect:
        (role,) = roles
        named = [r for r in role["rules"] if r.get("resourceNames")]
        assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                          "resourceNames": ["gpu-binpack-scheduler"],
                          "verbs": ["get", "update"]}]
    else:
        assert roles == []


def test_client_rate_and_lease_timings_are_settings():
    """kube-scheduler's defaults (qps 50, lease 15s) are not what the binpack scheduler runs
    with: a burst of pending GPU pods binds faster, and a standby takes over sooner."""
    shipped = binpack_scheduler.scheduler_configuration(scheduler_of(DEFAULT))
    assert shipped["clientConnection"] == {"qps": 200, "burst": 400}
    assert {k: shipped["leaderElection"][k] for k in
            ("leaseDuration", "renewDeadline", "retryPeriod")} == {
        "leaseDuration": "10s", "renewDeadline": "8s", "retryPeriod": "2s"}
    changed = binpack_scheduler.scheduler_configuration(scheduler_of(settings_of(scheduler={
        "clientConnection": {"qps": 50, "burst": 100},
        "leaderElection": {"leaseDuration": "15s", "renewDeadline": "10s"}})))
    assert changed["clientConnection"] == {"qps": 50, "burst": 100}
    assert changed["leaderElection"]["leaseDuration"] == "15s"
    assert changed["leaderElection"]["retryPeriod"] == "2s"


def test_changed_scheduler_configuration_rolls_the_pods():
    def pod_annotations(settings):
        template = binpack_scheduler.deployment(scheduler_of(settings))["spec"]["template"]
        return template["metadata"]["annotations"]

    changed = settings_of(scheduler={"scoringStrategy": {"resources": [
        {"name": "nvidia.com/gpu", "weight": 20}]}})
    assert pod_annotations(DEFAULT) == pod_annotations(settings_of())
    assert pod_annotations(changed) != pod_annotations(DEFAULT)


def test_scheduler_runs_with_its_service_account_and_restricted_privileges():
    deployment = binpack_scheduler.deployment(scheduler_of(DEFAULT))
    pod = deployment["spec"]["template"]["spec"]
    (scheduler,) = containers(deployment).values()
    assert pod["serviceAccountName"] == "gpu-binpack-scheduler"
    assert all("hostPath" not in v for v in pod["volumes"])
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert not any("kubeconfig" in arg for arg in scheduler["command"])
    assert f"--config={binpack_scheduler.CONFIG_DIR}/{binpack_scheduler.CONFIG_FILE}" in \
        scheduler["command"]
    for probe in (scheduler["livenessProbe"], scheduler["readinessProbe"]):
        assert probe["httpGet"]["port"] == 10259 and probe["httpGet"]["scheme"] == "HTTPS"
    assert_restricted(pod, scheduler)


def test_compaction_run_plans_then_deschedules_from_the_plans_policy_both_restricted():
    planned = gpu_compaction.cron_job(compaction_of(DEFAULT))["spec"]["jobTemplate"]["spec"][
        "template"]
    pod = planned["spec"]
    (plan,), (descheduler,) = pod["initContainers"], pod["containers"]
    out = next(a for a in plan["command"] if a.startswith("--out=")).removeprefix("--out=")
    assert f"--policy-config-file={out}" in descheduler["args"]
    shared = {m["name"] for m in plan["volumeMounts"]} & \
        {m["name"] for m in descheduler["volumeMounts"]}
    assert any(v["name"] in shared and "emptyDir" in v for v in pod["volumes"])
    for container in (plan, descheduler):
        assert_restricted(pod, container)
    # Without planning the descheduler reads the ConfigMap's policy, and nothing else runs.
    static = gpu_compaction.cron_job(compaction_of(settings_of(compaction={
        "planThreshold": False})))
    pod = static["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert f"--policy-config-file={gpu_compaction.POLICY_DIR}/{gpu_compaction.POLICY_FILE}" in \
        pod["containers"][0]["args"]


def assert_restricted(pod: dict, container: dict):
    """The Pod Security Standard 'restricted' requirements."""
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["readOnlyRootFilesystem"] is True


def test_scheduler_pods_run_only_on_the_nodes_the_stack_selects():
    selected = settings_of(scheduler={"nodeSelector": {"pool": "platform"}})
    pod = binpack_scheduler.deployment(scheduler_of(selected))["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "platform"}
    # Only the placement changes: the pods roll onto those nodes, still spread among them.
    assert pod["affinity"] == binpack_scheduler.deployment(
        scheduler_of(DEFAULT))["spec"]["template"]["spec"]["affinity"]


def test_scheduler_has_a_role_of_its_own_that_grants_no_lease_cluster_wide():
    objects = binpack_scheduler.rbac_objects(scheduler_of(settings_of(scheduler={"replicas": 2})))
    refs = {(o["kind"], o["roleRef"]["name"], o["metadata"].get("namespace"))
            for o in objects if "roleRef" in o}
    assert ("ClusterRoleBinding", "system:kube-scheduler", None) not in refs
    (cluster_role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    assert not [r for r in cluster_role["rules"] if "coordination.k8s.io" in r["apiGroups"]]
    (lease_role,) = [o for o in objects if o["kind"] == "Role"]
    assert lease_role["metadata"]["namespace"] == "gpu-scheduler"


def env_of(values: dict, section: str) -> dict:
    return {e["name"]: e["value"] for e in values[section].get("env", [])}


def test_both_charts_upgrade_their_crds_and_extra_values_cannot_turn_that_off():
    # The charts' own hooks (gpu-operator: operator.upgradeCRD; kube-prometheus-stack:
    # crds.upgradeJob.enabled), since Helm leaves CRDs at the version first installed.
    assert gpu_operator.chart_values(operator_of(DEFAULT))["operator"]["upgradeCRD"] is True
    assert monitoring.chart_values(monitoring_of(DEFAULT))["crds"]["upgradeJob"]["enabled"] is True
    # Refused when the stack file is read, and by the component's own values when a program
    # hands it such inputs.
    with pytest.raises(SettingsError, match=r"gpuOperator\.extraValues\.operator\.upgradeCRD"):
        settings_of(gpuOperator={"extraValues": {"operator": {"upgradeCRD": False}}})
    with pytest.raises(SettingsError, match=r"monitoring\.extraValues\.crds\.upgradeJob"):
        settings_of(monitoring={"extraValues": {"crds": {"upgradeJob": {"enabled": False}}}})
    operator = operator_of(DEFAULT)
    with pytest.raises(SettingsError):
        gpu_operator.check_chart_values(operator.model_copy(update={
            "gpu_operator": operator.gpu_operator.model_copy(update={
                "extra_values": {"operator": {"upgradeCRD": False}}})}))
    stack = monitoring_of(DEFAULT)
    with pytest.raises(SettingsError):
        monitoring.check_chart_values(stack.model_copy(update={
            "monitoring": stack.monitoring.model_copy(update={
                "extra_values": {"crds": {"upgradeJob": {"enabled": False}}}})}))


def test_containers_see_only_their_gpus_unless_the_stack_turns_that_off():
    # NVIDIA's container toolkit and device plugin settings for it: with CDI (the default) the
    # toolkit refuses the variable from unprivileged containers and the device plugin keeps the
    # operator's CDI strategy; without CDI, devices travel as volume mounts instead.
    cdi = gpu_operator.chart_values(operator_of(DEFAULT))
    # The toolkit's NRI plugin, which injects devices a pod annotation names, stays off.
    assert cdi["cdi"] == {"enabled": True, "nriPluginEnabled": False}
    assert env_of(cdi, "toolkit") == {"ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED":
                                      "false"}
    assert env_of(cdi, "devicePlugin") == {}
    legacy = gpu_operator.chart_values(operator_of(settings_of(gpuOperator={
        "cdi": {"enabled": False}})))
    assert env_of(legacy, "toolkit") == {
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true"}
    assert env_of(legacy, "devicePlugin") == {"DEVICE_LIST_STRATEGY": "volume-mounts"}
    open_ = gpu_operator.chart_values(operator_of(settings_of(gpuOperator={
        "restrictVisibleDevices": False})))
    assert env_of(open_, "toolkit") == {} and env_of(open_, "devicePlugin") == {}


# --- OPA admission ----------------------------------------------------------------------------

def test_opa_serves_only_tls_and_its_probes_and_authorizes_every_call():
    args = opa_admission.opa_args(admission_of(DEFAULT))
    addresses = [a.split("=", 1)[1] for a in args if a.startswith("--addr=")]
    assert addresses == ["https://0.0.0.0:10250"]
    assert [a for a in args if a.startswith("--diagnostic-addr=")] == [
        "--diagnostic-addr=http://0.0.0.0:8282"]
    assert "--authentication=token" in args and "--authorization=basic" in args
    assert any(a.startswith("--tls-cert-file=") for a in args)


def test_every_file_opa_loads_is_in_a_config_map_its_pod_mounts():
    """OPA loads its policies and data as files at start, so a restarted container finds them
    again: each file argument names a key of a ConfigMap mounted at that path."""
    deployment = opa_admission.deployment(admission_of(DEFAULT))
    pod = deployment["spec"]["template"]["spec"]
    opa = containers(deployment)["opa"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_maps = {c["metadata"]["name"]: c
                   for c in opa_admission.policy_config_maps(admission_of(DEFAULT))}
    mounted = {m["mountPath"]: config_maps[volumes[m["name"]]["configMap"]["name"]]["data"]
               for m in opa["volumeMounts"] if "configMap" in volumes[m["name"]]}
    files = [a.rsplit(":", 1)[-1] for a in opa["args"] if not a.startswith("-") and "/" in a]
    assert len(files) == len(opa_admission.policy_files()) >= 4
    for path in files:
        directory, _, key = path.rpartition("/")
        assert key in mounted[directory], f"OPA loads {path}, which no mounted ConfigMap holds"
    # The parameters are loaded where the policy reads them.
    assert f"{opa_admission.PARAMS_ROOT}:{opa_admission.POLICY_MOUNT}/" \
           f"{opa_admission.PARAMS_KEY}" in opa["args"]
    assert "data.gpuplatform.params" in opa_admission.rego_files("admission")[
        "decisions.rego"]


def test_a_changed_policy_or_parameter_is_a_new_opa_generation_the_webhooks_switch_to():
    """A change of what OPA loads or runs with names a new Deployment, Service and ConfigMaps
    (which replace the old ones) and points the webhooks at the new Service; an unchanged
    stack names the same ones."""
    def named(settings):
        inputs = admission_of(settings)
        webhook = opa_admission.webhook_configuration(inputs, "Y2E=")["webhooks"][0]
        deployment = opa_admission.deployment(inputs)
        volumes = {v["configMap"]["name"] for v in deployment["spec"]["template"]["spec"][
            "volumes"] if "configMap" in v}
        assert volumes == {c["metadata"]["name"] for c in opa_admission.policy_config_maps(
            inputs)}
        service = opa_admission.service(inputs)
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        assert webhook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
        return deployment["metadata"]["name"], service["metadata"]["name"], sorted(volumes)
    assert named(DEFAULT) == named(settings_of())
    for changed in ({"mode": "mutate"}, {"exemptNamespaces": ["batch"]},
                    {"opa": {"repository": "openpolicyagent/opa", "tag": "1.22.3-static"}}):
        new = named(settings_of(admission=changed))
        assert all(a != b for a, b in zip(new, named(DEFAULT), strict=True)), changed


def test_opa_pods_are_ready_only_with_the_policy_loaded_and_kept_available():
    deployment = opa_admission.deployment(admission_of(DEFAULT))
    opa = containers(deployment)["opa"]
    assert opa["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # `pulumi up` switches the webhooks once the Deployment is available: a few seconds after
    # its pods turn ready, so that the API server has seen their endpoints (see admission.md).
    assert deployment["spec"]["minReadySeconds"] >= 5
    pod = deployment["spec"]["template"]["spec"]
    for container in containers(deployment).values():
        assert_restricted(pod, container)


def test_opa_holds_no_credentials_for_the_cluster():
    account = opa_admission.service_account(admission_of(DEFAULT))
    assert account["automountServiceAccountToken"] is False
    pod = opa_admission.deployment(admission_of(DEFAULT))["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_policy_config_map_ships_the_policy_files_but_not_their_tests():
    policy, server = opa_admission.policy_config_maps(admission_of(DEFAULT))
    shipped = {name for name in policy["data"] if name.endswith(".rego")}
    on_disk = {p.name for p in (opa_admission.POLICY_DIR / "admission").rglob("*.rego")}
    assert shipped == {n for n in on_disk if not n.endswith("_test.rego")} and shipped
    assert json.loads(policy["data"][opa_admission.PARAMS_KEY])["schedulerName"] == \
        DEFAULT.scheduler.name
    assert set(server["data"]) == {"authz.rego", "health.rego", opa_admission.SERVER_DATA_KEY}


@pytest.mark.parametrize("mode, mutating", [("enforce", False), ("mutate", True),
                                             ("audit", True)])
def test_each_mode_registers_its_webhooks_with_the_settings(mode, mutating):
    settings = settings_of(admission={"mode": mode, "failurePolicy": "Ignore",
                                      "timeoutSeconds": 3})
    validating = opa_admission.webhook_configuration(admission_of(settings), "Q0E=")
    mutation = opa_admission.mutating_webhook_configuration(admission_of(settings), "Q0E=")
    assert (mutation is not None) == mutating
    hooks = validating["webhooks"] + (mutation["webhooks"] if mutation else [])
    for hook in hooks:
        assert hook["sideEffects"] == "None"
        # The reachability probe's webhook fails closed whatever the policy (it matches one
        # ConfigMap, so that an unreachable OPA fails `pulumi up`).
        reachability = hook["name"] == settings.admission.reachability_webhook_name
        assert (hook["failurePolicy"], hook["timeoutSeconds"]) == \
            ("Fail" if reachability else "Ignore", 3)
        assert hook["clientConfig"]["caBundle"] == "Q0E="
    paths = {hook["clientConfig"]["service"]["path"] for hook in hooks}
    assert paths == ({"/v0/data/gpuplatform/admission/review",
                      "/v0/data/gpuplatform/admission/templates",
                      "/v0/data/gpuplatform/admission/mutation"} if mutating
                     else {"/v0/data/gpuplatform/admission/review",
                           "/v0/data/gpuplatform/admission/templates"})


@pytest.mark.parametrize("mode", ["enforce", "mutate"])
def test_the_templates_webhook_fails_open_whatever_the_failure_policy(mode):
    """It only warns: an OPA outage must not block a Deployment or Job."""
    settings = settings_of(admission={"mode": mode, "failurePolicy": "Fail"})
    validating = opa_admission.webhook_configuration(admission_of(settings), "Q0E=")
    policies = {hook["name"]: hook["failurePolicy"] for hook in validating["webhooks"]}
    assert policies[settings.admission.webhook_name] == "Fail"
    assert policies[settings.admission.templates_webhook_name] == "Ignore"


def test_certificates_renew_early_as_configured(example_run):
    for type_, name in (("tls:index/selfSignedCert:SelfSignedCert", "ca"),
                        ("tls:index/locallySignedCert:LocallySignedCert", "server")):
        cert = example_run.one(type_, name).inputs
        assert cert["earlyRenewalHours"] == 720
    ca = example_run.one("tls:index/selfSignedCert:SelfSignedCert", "ca").inputs
    server = example_run.one("tls:index/locallySignedCert:LocallySignedCert", "server").inputs
    assert ca["isCaCertificate"] is True and ca["validityPeriodHours"] == 87600
    assert server["validityPeriodHours"] == 8760
    assert "server_auth" in server["allowedUses"]


# --- Monitoring -------------------------------------------------------------------------------

def test_prometheus_selects_monitors_and_rules_of_every_namespace():
    spec = monitoring.chart_values(monitoring_of(DEFAULT))["prometheus"]["prometheusSpec"]
    for kind in ("serviceMonitor", "podMonitor", "rule", "probe"):
        assert spec[f"{kind}SelectorNilUsesHelmValues"] is False


def test_grafana_uses_the_admin_secret_and_loads_the_dashboard():
    values = monitoring.chart_values(monitoring_of(DEFAULT))["grafana"]
    secret = monitoring.grafana_admin_secret(monitoring_of(DEFAULT), "pw")
    assert values["admin"]["existingSecret"] == secret["metadata"]["name"]
    assert {values["admin"]["userKey"], values["admin"]["passwordKey"]} == set(
        secret["stringData"])
    config_map = monitoring.dashboard_config_map(monitoring_of(DEFAULT))
    sidecar = values["sidecar"]["dashboards"]
    assert config_map["metadata"]["labels"][sidecar["label"]] == sidecar["labelValue"]
    assert config_map["metadata"]["namespace"] == DEFAULT.monitoring.namespace


def test_service_monitor_keeps_the_workload_labels_and_adds_the_node():
    endpoint = monitoring.dcgm_service_monitor(monitoring_of(DEFAULT))["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is True
    assert endpoint["interval"] == "15s"
    node = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "node"]
    assert node == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                     "action": "replace"}]


def test_scheduler_service_monitor_finds_the_scheduler_pods_port():
    """The ServiceMonitor selects the scheduler's Service, in its namespace, by a port the
    Service has; the Service selects the Deployment's pods, on the port their container
    serves, the job label being the name the dashboard's panel filters on."""
    objects = binpack_scheduler.scheduler_objects(scheduler_of(DEFAULT))
    service = next(o for o in objects if o["kind"] == "Service")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    [monitor] = [m["spec"] for m in monitoring.component_monitors(monitoring_of(DEFAULT))
                 if m["metadata"]["name"] == DEFAULT.scheduler.name]
    assert monitor["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    port = next(p for p in service["spec"]["ports"] if p["name"] == monitor["endpoints"][0]["port"])
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert port["targetPort"] in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    assert service["metadata"]["name"] == DEFAULT.scheduler.name


def test_dashboard_and_rules_ship_to_the_stack():
    config_map = monitoring.dashboard_config_map(monitoring_of(DEFAULT))
    board = json.loads(config_map["data"]["gpu-platform.json"])
    assert board["uid"] == "gpu-platform-gpus"
