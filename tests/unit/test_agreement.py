"""Facts with a single home agree wherever they are used: scheduler name, certificate names,
CA bundle, DCGM Service, GPU taint, exempt namespaces, GPU resource names, pinned versions."""

import base64
import json
import re

import pytest
import yaml

from components import binpack_scheduler, gpu_operator, monitoring, opa_admission
from components.base import facts
from components.base.facts import GPU_RESOURCE, resource_matches
from components.monitoring import dashboard
from components.platform.config import load_settings
from components.teams.settings import KueueSettings
from tests.kit import harness, tools
from tests.kit.harness import monitoring_of, operator_of
from tests.kit.stacks import raw, with_changes

K8S = "kubernetes:"
FIXTURES = harness.FIXTURES


def webhook_of(recording):
    return recording.one(f"{K8S}admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
                         "gpu-platform-admission").inputs["webhooks"][0]


def certificate_covers(dns_names: list[str], host: str) -> bool:
    """Whether a certificate for `dns_names` is valid for `host`, as X.509 (RFC 6125) matches
    names: exactly, or through a wildcard that stands for the whole leftmost label."""
    first, _, rest = host.partition(".")
    return host in dns_names or (bool(first) and f"*.{rest}" in dns_names)


def scheduler_profile(recording, settings):
    config_map = recording.one(f"{K8S}core/v1:ConfigMap",
                               f"{settings.scheduler.namespace}/{settings.scheduler.name}-config")
    return yaml.safe_load(config_map.inputs["data"][binpack_scheduler.CONFIG_FILE])


def policy_params(recording, settings):
    config_map = recording.one(
        f"{K8S}core/v1:ConfigMap",
        f"{settings.admission.namespace}/{opa_admission.POLICY_CONFIGMAP}")
    return json.loads(config_map.inputs["data"][opa_admission.PARAMS_KEY])


CUSTOM = with_changes(
    gpuNodes={"taint": "example.com/accelerator:NoExecute",
              "extraTaints": ["dedicated=ml:NoSchedule"]},
    scheduler={"name": "packer", "namespace": "packing"},
    admission={"namespace": "policy", "exemptNamespaces": ["batch-system"],
               "gpuResourceNames": ["nvidia.com/gpu", "example.com/vgpu-*"]},
    gpuOperator={"namespace": "nvidia"},
    monitoring={"namespace": "observability"})


@pytest.fixture(scope="module", params=["example", "custom"])
def run(request):
    if request.param == "example":
        config = harness.example_config()
    else:
        config = harness.stack_file_config(CUSTOM)
    settings = harness.settings_of(config)
    return settings, harness.run_program(config)


def test_scheduler_name_agrees_everywhere(run):
    settings, recording = run
    name = settings.scheduler.name
    profile = scheduler_profile(recording, settings)
    assert [p["schedulerName"] for p in profile["profiles"]] == [name]
    assert profile["leaderElection"]["resourceName"] == name
    assert policy_params(recording, settings)["schedulerName"] == name
    platform = next(v for k, v in recording.outputs.items() if k.endswith("::gpu-platform"))
    assert platform["schedulerName"] == name
    deployment = recording.one(f"{K8S}apps/v1:Deployment",
                               f"{settings.scheduler.namespace}/{name}").inputs
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == name


def test_certificate_covers_the_service_the_webhook_calls(run):
    settings, recording = run
    service = recording.one(f"{K8S}core/v1:Service",
                            f"{settings.admission.namespace}/{facts.OPA_SERVICE}").inputs
    webhook_service = webhook_of(recording)["clientConfig"]["service"]
    assert (webhook_service["name"], webhook_service["namespace"]) == (
        service["metadata"]["name"], service["metadata"]["namespace"])
    assert webhook_service["port"] in [p["port"] for p in service["spec"]["ports"]]
    # The API server verifies the certificate against <service>.<namespace>.svc.
    dns_names = recording.one("tls:index/certRequest:CertRequest", "server").inputs["dnsNames"]
    host = f"{webhook_service['name']}.{webhook_service['namespace']}.svc"
    assert certificate_covers(dns_names, host), (host, dns_names)


def test_webhook_trusts_the_ca_that_signed_the_server_certificate(run):
    settings, recording = run
    bundle = base64.b64decode(webhook_of(recording)["clientConfig"]["caBundle"]).decode()
    assert bundle == harness.FAKE_CA_PEM
    signed = recording.one("tls:index/locallySignedCert:LocallySignedCert", "server").inputs
    assert signed["caCertPem"] == harness.FAKE_CA_PEM
    tls_secret = recording.one(f"{K8S}core/v1:Secret",
                               f"{settings.admission.namespace}/{opa_admission.TLS_SECRET}")
    assert tls_secret.inputs["stringData"]["tls.crt"] == harness.FAKE_SERVER_PEM
    assert tls_secret.inputs["stringData"]["ca.crt"] == bundle


def test_service_monitor_selects_the_dcgm_exporter_service(run):
    settings, recording = run
    fixture = {"devicePlugin": "dcgm-exporter-service.yaml",
               "dra": "dcgm-exporter-dra-service.yaml"}[settings.gpu_operator.gpu_path]
    service = yaml.safe_load((FIXTURES / fixture).read_text())
    monitor = recording.one(f"{K8S}monitoring.coreos.com/v1:ServiceMonitor",
                            f"{settings.monitoring.namespace}/nvidia-dcgm-exporter").inputs["spec"]
    assert settings.gpu_operator.namespace in monitor["namespaceSelector"]["matchNames"]
    selector = monitor["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["endpoints"]] == ["gpu-metrics"]
    assert {e["port"] for e in monitor["endpoints"]} <= port_names


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule for whether a toleration matches a taint."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


def test_operator_pods_tolerate_every_gpu_node_taint(run):
    settings, recording = run
    values = recording.one(f"{K8S}helm.sh/v3:Release", "gpu-operator").inputs["values"]
    taints = recording.of_type(f"{K8S}core/v1:NodePatch")[0].inputs["spec"]["taints"]
    assert len(taints) == len(settings.gpu_nodes.taints)
    for tolerations in (values["daemonsets"]["tolerations"],
                        values["node-feature-discovery"]["worker"]["tolerations"]):
        for taint in taints:
            assert any(tolerates(t, taint) for t in tolerations), (taint, tolerations)


def test_tolerations_do_not_tolerate_other_taints():
    settings = load_settings(raw(CUSTOM))
    foreign = {"key": "example.com/accelerator", "value": "x", "effect": "NoSchedule"}
    tolerations = gpu_operator.gpu_node_tolerations(operator_of(settings))
    assert not any(tolerates(t, foreign) for t in tolerations)


def test_every_gpu_node_gets_the_same_taints(run):
    settings, recording = run
    patches = recording.of_type(f"{K8S}core/v1:NodePatch")
    assert sorted(p.inputs["metadata"]["name"] for p in patches) == sorted(settings.gpu_nodes.names)
    expected = [t.as_manifest() for t in settings.gpu_nodes.taints]
    assert all(p.inputs["spec"]["taints"] == expected for p in patches)


def test_exempt_namespaces_agree_between_webhook_and_policy(run):
    settings, recording = run
    selector = webhook_of(recording)["namespaceSelector"]["matchExpressions"]
    assert selector == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                         "values": harness.admission_of(settings).exempt_namespaces}]
    exempt = policy_params(recording, settings)["exemptNamespaces"]
    assert exempt == harness.admission_of(settings).exempt_namespaces
    for always in ("kube-system", settings.admission.namespace, settings.gpu_operator.namespace,
                   *settings.admission.exempt_namespaces):
        assert always in exempt


def test_guarded_resources_agree_between_webhook_and_policy(run):
    settings, recording = run
    guarded = policy_params(recording, settings)["gpuResourceNames"]
    # The stack's GPU resources, and every DeviceClass's own resource name (Kubernetes 1.37).
    stack_names = settings.admission.gpu_resource_names
    assert guarded[:len(stack_names)] == stack_names
    assert "deviceclass.resource.kubernetes.io/*" in guarded
    condition = webhook_of(recording)["matchConditions"][0]["expression"]
    for name in guarded:
        test = f"r.startsWith('{name[:-1]}')" if name.endswith("*") else f"r == '{name}'"
        assert test in condition


def test_scheduler_scores_the_gpu_resource_the_policy_guards(run):
    settings, recording = run
    profile = scheduler_profile(recording, settings)
    strategy = profile["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]
    assert GPU_RESOURCE in [r["name"] for r in strategy["resources"]]
    assert any(resource_matches(GPU_RESOURCE, pattern)
               for pattern in policy_params(recording, settings)["gpuResourceNames"])


def test_scheduler_image_follows_the_kubernetes_version(run):
    settings, recording = run
    deployment = recording.one(
        f"{K8S}apps/v1:Deployment",
        f"{settings.scheduler.namespace}/{settings.scheduler.name}").inputs
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.k8s.io/kube-scheduler:v{settings.kubernetes_version}"


def test_policy_is_tested_with_the_opa_version_that_ships(example_settings):
    assert example_settings.admission.opa.tag.split("-")[0] == tools.opa_version()


def test_opa_serves_each_probe_port_in_the_scheme_the_probe_uses(run):
    """Each probed OPA address names its scheme, and it is the probe's: an address without one
    is served over TLS once OPA has a certificate, and an HTTP probe of it would always fail."""
    settings, recording = run
    deployment = recording.one(f"{K8S}apps/v1:Deployment",
                               f"{settings.admission.namespace}/{facts.OPA_SERVICE}").inputs
    opa = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
               if c["name"] == "opa")
    listeners = {}
    for arg in opa["args"]:
        if arg.startswith(("--addr=", "--diagnostic-addr=")):
            address = arg.split("=", 1)[1]
            assert "://" in address, f"OPA listener {arg} has no scheme"
            scheme, _, host_port = address.partition("://")
            listeners[int(host_port.rsplit(":", 1)[1])] = scheme
    for probe in ("readinessProbe", "livenessProbe"):
        check = opa[probe]["httpGet"]
        assert listeners.get(check["port"]) == check["scheme"].lower(), \
            f"{probe} uses {check['scheme']} on port {check['port']}; OPA serves {listeners}"


def test_audit_label_agrees_between_policy_metrics_and_dashboard(run):
    settings, recording = run
    label = policy_params(recording, settings)["auditLabel"]
    values = monitoring.chart_values(monitoring_of(settings))
    assert f"pods=[{label}]" in values["kube-state-metrics"]["metricLabelsAllowlist"]
    exprs = " ".join(dashboard.queries(dashboard.dashboard(monitoring_of(settings))))
    assert "label_" + re.sub(r"[^a-zA-Z0-9]", "_", label) in exprs


def test_kueues_chart_and_image_are_the_same_release():
    """The chart deploys the image of its own appVersion unless told otherwise; the platform
    sets the image, and tests/kit/tools.py builds that version: they must be one release."""
    kueue = KueueSettings()
    assert kueue.image.tag == f"v{kueue.chart_version}"
