"""What only Python can check of the admission policy: the parameters the program renders (which
the Rego tests decide with), the webhooks' matchConditions, run in a real CEL engine, against the
policy's verdicts, OPA's API authorization, and the Rego itself (`opa check --strict`, `opa test`,
`opa fmt`). What the policy decides for each request is tested in Rego, beside each group of rules
(policy/admission/<group>/<group>_test.rego); the prefilter is checked against those cases."""

import base64
import json
import shutil
import subprocess

import pytest

from components import opa_admission
from tests.kit import harness, tools
from tests.kit.policy_harness import (
    K8S,
    MODES,
    POLICY,
    STACKS,
    deployed_stack,
    evaluate,
    policy_cases,
    sent_to_opa,
    webhook_for,
)
from tests.kit.stacks import with_changes

# The Rego tests' cases (policy_cases), read once for the prefilter's tests.
CASES = policy_cases(tools.opa())


@pytest.fixture(scope="module")
def deployed_stacks(deployed, tmp_path_factory) -> dict[str, dict]:
    """The admission policy as each stack the Rego tests decide with deploys it."""
    return {stack: deployed if stack == "example" else deployed_stack(stack,
                                                                      tmp_path_factory.mktemp)
            for stack in STACKS}


# --- the parameters ---------------------------------------------------------------------------

def test_the_mode_changes_no_parameter_but_the_mode():
    """The Rego tests decide a stack's cases in each mode by setting `mode` in its parameters,
    which is what the program renders with admission.mode set."""
    def params(settings: dict) -> dict:
        config = harness.stack_file_config(settings)
        return opa_admission.policy_params(harness.admission_of(harness.settings_of(config)))

    enforce = params(with_changes(admission={"mode": "enforce"}))
    for mode in MODES:
        assert params(with_changes(admission={"mode": mode})) == {**enforce, "mode": mode}


# --- the webhooks' prefilter agrees with the policy --------------------------------------------

def case_ids(cases: list[str]) -> list[str]:
    return [f"{CASES[name]['group']}: {name}" for name in cases]


NOT_ADMITTED = [name for name, case in CASES.items() if not case.get("admitted")]


@pytest.mark.parametrize("name", NOT_ADMITTED, ids=case_ids(NOT_ADMITTED))
def test_every_request_the_policy_refuses_or_warns_about_is_sent_to_opa(deployed_stacks, name):
    """The matchConditions must not open a way around the policy: the API server asks OPA
    about every request a Rego test case refuses or warns about."""
    case = CASES[name]
    webhook = webhook_for(deployed_stacks[case["stack"]], case["request"],
                          case.get("decision", "review"))
    assert webhook is not None and sent_to_opa(webhook, case["request"])


# Requests that no rule is about, which the API server admits without asking OPA.
NEVER_SENT = [
    "cpu-only pod", "pod without resources", "unguarded extended resource",
    "daemonset pod from the daemonset controller", "cpu pod naming a cpu node",
    "privileged cpu pod", "update of a pod that already tolerated", "pod UPDATE",
    "cpu pod tolerating the gpu key for NoExecute only",
    "daemonset pod asking for no device path", "SYS_ADMIN in a cpu pod",
    # Kueue's own writes, and Jobs that wait for it
    "Kueue's labels written by Kueue on a StatefulSet's pod", "a GPU Job started by Kueue",
    "a GPU Job created suspended", "a label of the user's own changed on a held pod",
    "a running GPU Job shrunk by a user",
    # the DRA path's writers
    "a claim allocated by the binpack scheduler",
    "a claim released by the resource-claim controller",
    "NVIDIA's classes, made by the GPU Operator", "a ResourceSlice published by NVIDIA's driver",
    "a ResourceSlice of NVIDIA's driver published by its node",
    "a ComputeDomain's ResourceSlice published by NVIDIA's driver",
    "a DeviceTaintRule on NVIDIA's devices by a user the stack lists",
    # workloads whose pods no rule is about
    "a Deployment of pods without GPUs", "a DaemonSet node agent tolerating every taint",
    "a privileged GPU Deployment in an exempt namespace",
]


@pytest.mark.parametrize("name", NEVER_SENT, ids=case_ids(NEVER_SENT))
def test_requests_that_cannot_break_a_rule_never_wait_for_opa(deployed_stacks, name):
    case = CASES[name]
    assert case.get("admitted"), "a request sent past OPA must be one the policy admits"
    webhook = webhook_for(deployed_stacks[case["stack"]], case["request"],
                          case.get("decision", "review"))
    assert webhook is None or not sent_to_opa(webhook, case["request"])


# --- OPA, and the Rego ---------------------------------------------------------------------------

def test_no_decision_without_the_parameters(opa_bin, deployed, tmp_path):
    """A policy loaded without (or with broken) parameters decides nothing, so the API server
    applies the failure policy; and OPA is then not ready (policy/opa/health.rego)."""
    broken, loaded = tmp_path / "broken", tmp_path / "loaded"
    broken.mkdir()
    for name in opa_admission.rego_files("admission"):
        (broken / name).write_text((deployed["dir"] / name).read_text())
    request_ = CASES["gpu limit on the default scheduler"]["request"]
    assert evaluate(opa_bin, broken, deployed["query"], request_) is None
    (broken / "data.json").write_text(json.dumps({"gpuplatform": {"params": "not an object"}}))
    assert evaluate(opa_bin, broken, deployed["query"], request_) is None
    shutil.copytree(deployed["dir"], loaded)
    for directory in (broken, loaded):
        for name, text in opa_admission.rego_files("opa").items():
            (directory / name).write_text(text)
    assert evaluate(opa_bin, broken, "data.system.health.ready", {}) is False
    assert evaluate(opa_bin, loaded, "data.system.health.ready", {}) is True


ADMISSION = POLICY / "admission"
# Folders under policy/admission that hold no rules: the tests' shared requests and parameters.
NOT_RULE_GROUPS = {"testing"}


def rule_groups() -> list[str]:
    return sorted(p.name for p in ADMISSION.iterdir()
                  if p.is_dir() and p.name not in NOT_RULE_GROUPS)


def test_each_rule_group_is_a_folder_with_its_rules_and_their_tests():
    assert rule_groups() and not list(ADMISSION.glob("*.rego")), \
        "every policy file sits in the folder of its rule group"
    for group in rule_groups():
        assert (ADMISSION / group / f"{group}.rego").is_file(), group
        assert (ADMISSION / group / f"{group}_test.rego").is_file(), group


def test_opa_check_strict_and_tests_pass_and_format_is_canonical(opa_bin):
    subprocess.run([str(opa_bin), "check", "--strict", str(POLICY)], check=True,
                   capture_output=True)
    tests = subprocess.run([str(opa_bin), "test", "--format=json", str(POLICY)],
                           capture_output=True, text=True)
    results = json.loads(tests.stdout)
    failed = {f"{r['package']}.{r['name']}": base64.b64decode(r.get("output", "")).decode()
              for r in results if r.get("fail") or r.get("error")}
    assert tests.returncode == 0 and not failed, failed
    # Every rule group's tests ran, its cases among them.
    ran = {r["package"] for r in results}
    assert {f"data.gpuplatform.admission_test.{group}" for group in rule_groups()} <= ran
    assert {f"data.gpuplatform.admission_test.{case['group']}" for case in CASES.values()} <= \
        {r["package"] for r in results if r["name"] == "test_cases"}
    unformatted = subprocess.run([str(opa_bin), "fmt", "--list", str(POLICY)],
                                 capture_output=True, text=True, check=True).stdout.split()
    assert unformatted == []


def test_opa_api_is_locked_down(opa_bin, example_run, deployed, tmp_path):
    """OPA's authorization policy with the data the program gives it: callers may only ask for
    the admission decisions and read health and metrics; nobody may read or write policies or
    data, with or without a token."""
    server_map = example_run.one(f"{K8S}core/v1:ConfigMap",
                                 f"gpu-admission/{opa_admission.SERVER_POLICY_CONFIGMAP}").inputs
    files = dict(server_map["data"])
    server = json.loads(files.pop(opa_admission.SERVER_DATA_KEY))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "data.json").write_text(json.dumps({opa_admission.SERVER_DATA_ROOT: server}))
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
    assert allowed("PUT", ["v1", "policies", "x"], identity="any-token") is False
    assert allowed("GET", ["v1", "policies"], identity="any-token") is False
