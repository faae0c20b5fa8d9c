"""The admission policy as the API server meets it, for tests: the policy files and parameters
taken from the ConfigMaps the program declares, evaluated in real OPA (the version the platform
ships), and the webhooks' matchConditions run in a CEL engine. Used by test_policy.py (what only
Python can check: the parameters, the webhooks' prefilter, OPA's API) and test_examples.py (the
users' example manifests). It renders PARAMS_FIXTURE, the parameters the Rego tests decide
with, which `venv/bin/python -m scripts.generate` writes.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import celpy
from celpy.adapter import json_to_cel

from components import opa_admission
from tests.kit import harness, tools
from tests.kit.stacks import TEAMS, with_changes

K8S = "kubernetes:"
POLICY = harness.ROOT / "policy"
MODES = ("enforce", "mutate", "audit")
USER = "alice@example.com"

# The stacks the policy's tests decide with: the example stack (None), or the minimal stack
# (test_settings.MINIMAL) with these changes. A Rego test case names its stack.
STACKS: dict[str, dict | None] = {
    "example": None,
    # GPU pods outside the teams' namespaces refused, as by default.
    "teams": {"teams": TEAMS},
    "dra": {"kubernetesVersion": "1.37.2", "gpuOperator": {"gpuPath": "dra"}, "teams": TEAMS},
    # Teams whose GPU nodes are in racks.
    "topology": {"teams": {**TEAMS, "topology": {"levels": ["example.com/rack"]}}},
    # Node pools taint their own GPU nodes: the policy knows no GPU node's name.
    "node_pools": {"gpuNodes": {"taintedBy": "nodePool", "names": []}},
    # Another vendor's class checked by the platform team, and a user who may taint GPUs.
    "admission_lists": {"admission": {"deviceClasses": ["nic.example.com"],
                                      "deviceTaintWriters": ["ops@example.com"]}},
    "no_preemptible_class": {"scheduler": {"preemptibleClass": {"enabled": False}}},
    # Reservation on: its taint is one no pod may ask to tolerate.
    "reservation": {"reservation": {"enabled": True}},
    # Fault remediation on: a failed GPU node's taint is one no pod may ask to tolerate.
    "remediation": {"remediation": {"mode": "drain"}},
}
# Each stack's parameters as its policy ConfigMap holds them, for `opa test`.
PARAMS_FIXTURE = POLICY / "admission" / "testing" / "zz_generated_params_test.rego"


def declared_object(recording: harness.Recording, type_: str, name: str,
                    namespace: str | None = None, generation: bool = False) -> dict:
    """The one object of `type_` a run declares under that name, whatever its logical name;
    with `generation`, an object of OPA's generation, named `<name>-<generation>`."""
    def named(actual: str) -> bool:
        return (re.fullmatch(rf"{re.escape(name)}-g[0-9a-f]{{9}}", actual) is not None
                if generation else actual == name)

    found = [r.inputs for r in recording.of_type(type_)
             if named(r.inputs["metadata"]["name"])
             and r.inputs["metadata"].get("namespace") == namespace]
    assert len(found) == 1, f"expected one {type_} {namespace}/{name}, found {len(found)}"
    return found[0]


def deployed_policy(recording: harness.Recording, settings, directory_for,
                    namespace: str | None = None) -> dict:
    """The policy files, OPA data and decision queries as OPA loads them from a run's policy
    ConfigMap (its parameters at data.gpuplatform.params; one directory per mode, made by
    `directory_for(name)`), and the webhooks as the API server would call them. OPA's
    namespace: `namespace`, or the settings' one."""
    ns = namespace or settings.admission.namespace
    policy_map = declared_object(recording, f"{K8S}core/v1:ConfigMap",
                                 opa_admission.POLICY_CONFIGMAP, ns, generation=True)
    files = dict(policy_map["data"])
    params = json.loads(files.pop(opa_admission.PARAMS_KEY))
    dirs = {}
    for mode in MODES:
        directory = dirs[mode] = directory_for(f"policy-{mode}")
        for name, text in files.items():
            (directory / name).write_text(text)
        data: dict = {**params, "mode": mode}
        for key in reversed(opa_admission.PARAMS_ROOT.split(".")):
            data = {key: data}
        (directory / "data.json").write_text(json.dumps(data))
    validating = declared_object(
        recording, f"{K8S}admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
        "gpu-platform-admission")["webhooks"]
    path = validating[0]["clientConfig"]["service"]["path"].strip("/").split("/")
    assert path[:2] == ["v0", "data"]
    return {"dir": dirs["enforce"], "dirs": dirs, "query": "data." + ".".join(path[2:]),
            "webhook": validating[0], "webhooks": validating, "settings": settings,
            "params": params}


def deployed_stack(stack: str, directory_for) -> dict:
    """The admission policy as one of STACKS deploys it (see deployed_policy)."""
    changes = STACKS[stack]
    if changes is None:
        return deployed_policy(harness.run_program(), harness.example_settings(), directory_for)
    config = harness.stack_file_config(with_changes(**changes))
    return deployed_policy(harness.run_program(config), harness.settings_of(config),
                           directory_for)


def params_fixture(params: dict[str, dict], opa_bin: Path) -> str:
    """PARAMS_FIXTURE's text for each stack's parameters, as `opa fmt` writes it."""
    rendered = json.dumps(params, indent="\t")
    source = f"""# Generated by scripts/generate.py from the parameters each stack's policy
# ConfigMap holds (STACKS in tests/kit/policy_harness.py says what each stack is): never edit
# it, regenerate it with `venv/bin/python -m scripts.generate`.
package gpuplatform.admission_test.rendered

params := {rendered}
"""
    return subprocess.run([str(opa_bin), "fmt"], input=source, capture_output=True, text=True,
                          check=True).stdout


def evaluate(opa_bin: Path, policy_dir: Path, query: str, request) -> object:
    """The decision for `request` (None when OPA returns no decision)."""
    result = subprocess.run(
        [str(opa_bin), "eval", "--format=json", "--stdin-input", "-d", str(policy_dir), query],
        input=json.dumps(request), capture_output=True, text=True, check=True)
    results = json.loads(result.stdout).get("result")
    return results[0]["expressions"][0]["value"] if results else None


def decide(opa_bin, deployed, request_, mode="enforce", rule="review") -> dict:
    """The AdmissionReview response the webhook calling `rule` gets in `mode`."""
    query = deployed["query"].rsplit(".", 1)[0] + "." + rule
    decision = evaluate(opa_bin, deployed["dirs"][mode], query, request_)
    assert isinstance(decision, dict), f"no decision for {request_}"
    assert decision["apiVersion"] == "admission.k8s.io/v1"
    assert decision["kind"] == "AdmissionReview"
    assert decision["response"]["uid"] == request_["request"]["uid"]
    return decision["response"]


def review(spec=None, *, namespace="team-a", operation="CREATE", kind="Pod", group="",
           name: str | None = "train-0", generate_name: str | None = None, uid="3b9f-41d2",
           old_spec=None, sub_resource=None, user=USER, metadata=None, old_metadata=None):
    """An AdmissionReview of a request on an object with `spec`, as the API server sends it (on
    an update, the old object has `old_metadata`, or the same metadata)."""
    meta = {"namespace": namespace, **(metadata or {})}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    request = {"uid": uid, "operation": operation, "namespace": namespace,
               "kind": {"group": group, "version": "v1", "kind": kind},
               # The API server names the resource too (kinds' plurals, as their APIs do).
               "resource": {"group": group, "version": "v1",
                            "resource": kind.lower() + ("es" if kind.endswith("s") else "s")},
               "userInfo": {"username": user},
               "object": None if spec is None else {"metadata": meta, "spec": spec}}
    if old_spec is not None:
        old_meta = meta if old_metadata is None else {"namespace": namespace, "name": name,
                                                      **old_metadata}
        request["oldObject"] = {"metadata": old_meta, "spec": old_spec}
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def policy_cases(opa_bin: Path) -> dict[str, dict]:
    """Every rule group's Rego test cases, by name (`cases` in
    policy/admission/<group>/<group>_test.rego; policy/admission/testing/reviews_test.rego says
    what a case holds), each with its group and its stack."""
    query = "{group: cases | some group; cases := data.gpuplatform.admission_test[group].cases}"
    by_group = evaluate(opa_bin, POLICY / "admission", query, None)
    assert isinstance(by_group, dict) and by_group, "no Rego test cases"
    cases: dict[str, dict] = {}
    for group, group_cases in sorted(by_group.items()):
        for name, case in group_cases.items():
            assert name not in cases, f"two Rego test cases are named {name!r}"
            cases[name] = {"stack": "example", **case, "group": group}
    return cases


def webhook_for(deployed, request_, decision: str = "review") -> dict | None:
    """The validating webhook asking OPA for `decision` that the API server calls for the
    request, if any: its rules match the request's resource and its namespaceSelector the
    namespace."""
    request = request_["request"]
    resource = request["resource"]["resource"]
    if request.get("subResource"):
        resource += "/" + request["subResource"]
    for webhook in deployed["webhooks"]:
        if webhook["clientConfig"]["service"]["path"].rsplit("/", 1)[1] != decision:
            continue
        if not any(resource in rule["resources"] and request["operation"] in rule["operations"]
                   and request["kind"]["group"] in rule["apiGroups"]
                   for rule in webhook["rules"]):
            continue
        scope = next(r.get("scope", "*") for r in webhook["rules"] if resource in r["resources"])
        if scope == "Cluster" or not request["namespace"]:
            return webhook      # the namespaceSelector skips no cluster-scoped object
        for expression in webhook.get("namespaceSelector", {}).get("matchExpressions", []):
            assert expression["key"] == "kubernetes.io/metadata.name"
            inside = request["namespace"] in expression["values"]
            if inside != (expression["operator"] == "In"):
                break
        else:
            return webhook
    return None


def sent_to_opa(webhook, request_) -> bool:
    """Whether the API server sends this request to OPA: the webhook's matchConditions, run in
    a CEL engine with the variables the API server gives them."""
    env = celpy.Environment()
    request = request_["request"]
    activation = {"object": json_to_cel(request["object"]),
                  "oldObject": json_to_cel(request.get("oldObject")),
                  "request": json_to_cel({k: v for k, v in request.items()
                                                if k not in ("object", "oldObject")})}
    return all(bool(env.program(env.compile(condition["expression"])).evaluate(activation))
               for condition in webhook.get("matchConditions", []))


def render_params() -> str:
    """PARAMS_FIXTURE's text: each of STACKS' policy parameters (scripts/generate.py writes it)."""
    with tempfile.TemporaryDirectory() as scratch:
        def directory_for(name: str) -> Path:
            return Path(tempfile.mkdtemp(prefix=name, dir=scratch))
        params = {stack: deployed_stack(stack, directory_for)["params"] for stack in STACKS}
    return params_fixture(params, tools.opa())
