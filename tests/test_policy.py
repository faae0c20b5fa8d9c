"""The admission policy, run in real OPA (the version the platform ships) with the policy files
and parameters exactly as the program puts them in its ConfigMaps, and the webhook's
matchConditions run in a real CEL engine."""

import json
import subprocess
from pathlib import Path

import celpy
import pytest

import harness
from components import opa_admission

K8S = "kubernetes:"
POLICY = harness.ROOT / "policy"
BINPACK = "gpu-binpack-scheduler"


@pytest.fixture(scope="module")
def deployed(example_run, example_settings, tmp_path_factory):
    """The policy files, OPA data and decision query as kube-mgmt would load them from the
    example stack's ConfigMaps."""
    ns = example_settings.admission.namespace
    policy_map = example_run.one(f"{K8S}core/v1:ConfigMap",
                                 f"{ns}/{opa_admission.POLICY_CONFIGMAP}").inputs
    params_map = example_run.one(f"{K8S}core/v1:ConfigMap",
                                 f"{ns}/{opa_admission.PARAMS_CONFIGMAP}").inputs
    directory = tmp_path_factory.mktemp("policy")
    for name, text in policy_map["data"].items():
        (directory / name).write_text(text)
    data = {ns: {params_map["metadata"]["name"]: {
        key: json.loads(value) for key, value in params_map["data"].items()}}}
    (directory / "data.json").write_text(json.dumps(data))
    webhook = example_run.one(
        f"{K8S}admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
        "gpu-platform-admission").inputs["webhooks"][0]
    path = webhook["clientConfig"]["service"]["path"].strip("/").split("/")
    assert path[:2] == ["v0", "data"]
    return {"dir": directory, "query": "data." + ".".join(path[2:]), "webhook": webhook}


def evaluate(opa_bin: Path, policy_dir: Path, query: str, request) -> object:
    """The decision for `request` (None when OPA returns no decision)."""
    result = subprocess.run(
        [str(opa_bin), "eval", "--format=json", "--stdin-input", "-d", str(policy_dir), query],
        input=json.dumps(request), capture_output=True, text=True, check=True)
    results = json.loads(result.stdout).get("result")
    return results[0]["expressions"][0]["value"] if results else None


def review(spec=None, *, namespace="team-a", operation="CREATE", kind="Pod", group="",
           name="train-0", generate_name=None, uid="3b9f-41d2"):
    metadata = {"namespace": namespace}
    if name:
        metadata["name"] = name
    if generate_name:
        metadata["generateName"] = generate_name
    request = {"uid": uid, "operation": operation, "namespace": namespace,
               "kind": {"group": group, "version": "v1", "kind": kind},
               "object": None if spec is None else {"metadata": metadata, "spec": spec}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def container(name="main", requests=None, limits=None):
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "trainer:1", "resources": resources}


GPU = {"nvidia.com/gpu": "1"}
MIG = {"nvidia.com/mig-1g.10gb": "1"}
CPU = {"cpu": "2", "memory": "4Gi"}

# (case, AdmissionReview, allowed, fragments the refusal message must contain)
CASES = [
    ("gpu limit on the default scheduler", review({"containers": [container(limits=GPU)]}),
     False, ['pod "team-a/train-0"', 'container "main"', "nvidia.com/gpu",
             'spec.schedulerName is "default-scheduler"',
             f"must set spec.schedulerName: {BINPACK}"]),
    ("gpu request without limit", review({"containers": [container(requests=GPU)]}),
     False, ['container "main" requests nvidia.com/gpu']),
    ("gpu pod on the binpack scheduler",
     review({"schedulerName": BINPACK, "containers": [container(limits=GPU)]}), True, []),
    ("gpu pod on another scheduler",
     review({"schedulerName": "volcano", "containers": [container(limits=GPU)]}),
     False, ['spec.schedulerName is "volcano"']),
    ("explicit default scheduler",
     review({"schedulerName": "default-scheduler", "containers": [container(limits=GPU)]}),
     False, ['spec.schedulerName is "default-scheduler"']),
    ("gpu in an init container",
     review({"containers": [container(requests=CPU)],
             "initContainers": [container("warmup", limits=GPU)]}),
     False, ['init container "warmup" requests nvidia.com/gpu']),
    ("gpu in an ephemeral container",
     review({"containers": [container(requests=CPU)],
             "ephemeralContainers": [container("debug", limits=GPU)]}),
     False, ['ephemeral container "debug" requests nvidia.com/gpu']),
    ("mig slice on the default scheduler", review({"containers": [container(limits=MIG)]}),
     False, ['requests nvidia.com/mig-1g.10gb']),
    ("mig slice on the binpack scheduler",
     review({"schedulerName": BINPACK, "containers": [container(limits=MIG)]}), True, []),
    ("two offending containers named",
     review({"containers": [container("a", limits=GPU), container("b", requests=MIG)]}),
     False, ['container "a"', 'container "b"']),
    ("generated name", review({"containers": [container(limits=GPU)]}, name=None,
                              generate_name="job-"),
     False, ['pod "team-a/job-*"']),
    ("cpu-only pod", review({"containers": [container(requests=CPU, limits=CPU)]}), True, []),
    ("pod without resources", review({"containers": [{"name": "c", "image": "x"}]}), True, []),
    ("unguarded extended resource",
     review({"containers": [container(limits={"example.com/fpga": "1"})]}), True, []),
    ("exempt namespace kube-system",
     review({"containers": [container(limits=GPU)]}, namespace="kube-system"), True, []),
    ("exempt GPU Operator namespace (its validator pods request GPUs)",
     review({"containers": [container(limits=GPU)]}, namespace="gpu-operator"), True, []),
    ("not a pod",
     review({"template": {"spec": {"containers": [container(limits=GPU)]}}},
            kind="Deployment", group="apps"), True, []),
    ("pod UPDATE", review({"containers": [container(limits=GPU)]}, operation="UPDATE"), True, []),
    ("pod DELETE", review(None, operation="DELETE"), True, []),
    ("containers not a list",
     review({"containers": {"main": container(limits=GPU)}}), True, []),
    ("container not an object", review({"containers": ["main"]}), True, []),
    ("limits not an object", review({"containers": [{"name": "c", "resources": {
        "limits": "nvidia.com/gpu"}}]}), True, []),
]


@pytest.mark.parametrize("request_, allowed, fragments", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_admission_decision(opa_bin, deployed, request_, allowed, fragments):
    decision = evaluate(opa_bin, deployed["dir"], deployed["query"], request_)
    assert decision["apiVersion"] == "admission.k8s.io/v1"
    assert decision["kind"] == "AdmissionReview"
    response = decision["response"]
    assert response["uid"] == request_["request"]["uid"]
    assert response["allowed"] is allowed
    if allowed:
        assert "status" not in response
    else:
        assert response["status"]["code"] == 403
        for fragment in fragments:
            assert fragment in response["status"]["message"]


@pytest.mark.parametrize("request_", [
    {"kind": "NotAReview"},
    {"request": {"operation": "CREATE", "kind": {"group": "", "kind": "Pod"}}},
    "just a string",
], ids=["no request", "no uid", "not an object"])
def test_no_decision_for_malformed_reviews(opa_bin, deployed, request_):
    # No decision: OPA answers 404 and the API server applies the failure policy.
    assert evaluate(opa_bin, deployed["dir"], deployed["query"], request_) is None


def test_no_decision_without_exactly_one_parameter_document(opa_bin, deployed, tmp_path):
    for name in ("gpu_scheduler.rego",):
        (tmp_path / name).write_text((deployed["dir"] / name).read_text())
    request_ = review({"containers": [container(limits=GPU)]})
    assert evaluate(opa_bin, tmp_path, deployed["query"], request_) is None
    params = json.loads((deployed["dir"] / "data.json").read_text())
    # A second, different parameter document (say, a stale copy in another namespace).
    stale = json.loads(json.dumps(next(iter(params.values()))))
    next(iter(stale.values()))["params.json"]["schedulerName"] = "old-scheduler"
    (tmp_path / "data.json").write_text(json.dumps({**params, "other-namespace": stale}))
    assert evaluate(opa_bin, tmp_path, deployed["query"], request_) is None


def match_condition(webhook):
    env = celpy.Environment()
    return env.program(env.compile(webhook["matchConditions"][0]["expression"]))


def well_formed_pod_creates():
    """The cases the API server could send: pod CREATEs that pass its own validation."""
    for case in CASES:
        request_ = case[1]["request"]
        if request_["kind"]["kind"] != "Pod" or request_["operation"] != "CREATE":
            continue
        containers = request_["object"]["spec"].get("containers")
        if isinstance(containers, list) and all(
                isinstance(c, dict) and isinstance(c.get("resources", {}).get("limits", {}), dict)
                for c in containers):
            yield pytest.param(case[1], id=case[0])


@pytest.mark.parametrize("request_", list(well_formed_pod_creates()))
def test_only_gpu_pods_are_sent_to_opa(opa_bin, deployed, request_):
    """The webhook's CEL condition sends a pod to OPA exactly when the policy sees a GPU pod:
    the same pod with the wrong scheduler is refused."""
    pod = request_["request"]["object"]
    sent = bool(match_condition(deployed["webhook"]).evaluate(
        {"object": celpy.json_to_cel(pod)}))
    wrong_scheduler = json.loads(json.dumps(request_))
    wrong_scheduler["request"]["namespace"] = "team-a"
    wrong_scheduler["request"]["object"]["spec"]["schedulerName"] = "default-scheduler"
    decision = evaluate(opa_bin, deployed["dir"], deployed["query"], wrong_scheduler)
    assert sent == (not decision["response"]["allowed"])


def test_opa_check_strict_and_tests_pass_and_format_is_canonical(opa_bin):
    subprocess.run([str(opa_bin), "check", "--strict", str(POLICY)], check=True,
                   capture_output=True)
    tests = subprocess.run([str(opa_bin), "test", "--format=json", str(POLICY)],
                           capture_output=True, text=True)
    results = json.loads(tests.stdout)
    failed = [r["name"] for r in results if r.get("fail") or r.get("error")]
    assert tests.returncode == 0 and not failed, failed
    assert len(results) >= 10
    unformatted = subprocess.run([str(opa_bin), "fmt", "--list", str(POLICY)],
                                 capture_output=True, text=True, check=True).stdout.split()
    assert unformatted == []


def test_opa_api_is_locked_down(opa_bin, example_run, deployed, tmp_path):
    """OPA's authorization policy with the data the program gives it: anonymous callers may only
    ask for the admission decision (and read health); the kube-mgmt token may write."""
    for name, text in opa_admission.rego_files("opa").items():
        (tmp_path / name).write_text(text)
    secret = example_run.one(f"{K8S}core/v1:Secret", "gpu-admission/opa-server")
    assert harness.is_secret(secret.raw_inputs["stringData"])
    server = json.loads(secret.inputs["stringData"][opa_admission.SERVER_DATA_KEY])
    (tmp_path / "data.json").write_text(json.dumps({opa_admission.SERVER_DATA_ROOT: server}))
    token = secret.inputs["stringData"][opa_admission.TOKEN_KEY]
    webhook_path = deployed["webhook"]["clientConfig"]["service"]["path"].strip("/").split("/")

    def allowed(method, path, identity=None):
        request_ = {"method": method, "path": path}
        if identity is not None:
            request_["identity"] = identity
        return evaluate(opa_bin, tmp_path, "data.system.authz.allow", request_)

    assert allowed("POST", webhook_path) is True
    assert allowed("GET", ["health", "ready"]) is True
    assert allowed("PUT", ["v1", "policies", "gpu-admission", "x"]) is False
    assert allowed("PUT", ["v1", "data", "gpu-admission"]) is False
    assert allowed("GET", ["v1", "data"]) is False
    assert allowed("POST", ["v1", "data", "gpuplatform", "admission", "params"]) is False
    assert allowed("PUT", ["v1", "policies", "x"], identity="not-the-token") is False
    assert allowed("PUT", ["v1", "policies", "x"], identity=token) is True
