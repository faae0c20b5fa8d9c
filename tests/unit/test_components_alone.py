"""One piece at a time: programs that declare a single component of the platform, with its own
args, on their own Kubernetes provider. The binpack scheduler alone; admission alone, against a
scheduler name it is given (decided by real OPA on the policy it declares). The integration
suite server-side applies what these programs declare to a local API server
(tests/integration/test_components_alone.py)."""

import pytest
import yaml

from components import binpack_scheduler
from tests.kit import harness
from tests.kit.policy_harness import decide, declared_object, deployed_policy, review

K8S = "kubernetes:"
COMPONENT = "gpu-platform:index:"

SCHEDULER_ARGS = {
    "kubernetes_version": "1.35.10",
    "scheduler": {"name": "team-binpack", "namespace": "team-scheduling", "replicas": 2},
}
# A cluster whose GPU node pools taint their nodes: no GPU node is named.
ADMISSION_ARGS = {
    "scheduler_name": "team-binpack",
    "gpu_nodes": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                              "effect": "NoSchedule"}]},
    "admission": {"namespace": "team-admission"},
}


def program(component: str, args: dict, output: str) -> str:
    """A program that declares only `component`, on a Kubernetes provider of its own."""
    module = {"BinpackScheduler": "binpack_scheduler", "OpaAdmission": "opa_admission"}[component]
    return f"""
import pulumi
import pulumi_kubernetes as k8s
from components.{module} import {component}

cluster = k8s.Provider("cluster", context="gpu-cluster", enable_server_side_apply=True)
component = {component}("{component.lower()}", {args!r},
                        pulumi.ResourceOptions(providers={{"kubernetes": cluster}}))
pulumi.export("{output}", component.{output})
"""


SCHEDULER_ALONE = program("BinpackScheduler", SCHEDULER_ARGS, "scheduler_name")
ADMISSION_ALONE = program("OpaAdmission", ADMISSION_ARGS, "webhook_name")

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
              "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def scheduler_alone() -> harness.Recording:
    return harness.run_program({}, source=SCHEDULER_ALONE)


@pytest.fixture(scope="module")
def admission_alone() -> harness.Recording:
    return harness.run_program({}, source=ADMISSION_ALONE)


def components(recording: harness.Recording) -> list[str]:
    return sorted(r.type for r in recording.registrations if r.type.startswith(COMPONENT))


def test_a_program_can_declare_only_the_binpack_scheduler(scheduler_alone):
    assert components(scheduler_alone) == [f"{COMPONENT}BinpackScheduler"]
    (provider,) = scheduler_alone.of_type("pulumi:providers:kubernetes")
    children = [r for r in scheduler_alone.registrations if r.type.startswith(K8S)]
    assert len(children) >= 8
    # On the program's own cluster, and named after the component, so that two of them (two
    # clusters) cannot collide.
    assert {r.provider.rsplit("::", 1)[0] for r in children} == {provider.urn}
    assert all(r.name.startswith("binpackscheduler-") for r in children)
    config = declared_object(scheduler_alone, f"{K8S}core/v1:ConfigMap",
                             "team-binpack-config", "team-scheduling")
    profile = yaml.safe_load(config["data"][binpack_scheduler.CONFIG_FILE])["profiles"][0]
    assert profile["schedulerName"] == "team-binpack"
    (component,) = scheduler_alone.of_type(f"{COMPONENT}BinpackScheduler")
    assert scheduler_alone.outputs[component.urn] == {
        "schedulerName": "team-binpack", "namespace": "team-scheduling",
        "preemptibleClass": "gpu-preemptible"}


def test_a_program_can_declare_only_admission_against_a_scheduler_it_names(
        admission_alone, opa_bin, tmp_path_factory):
    """The policy OPA loads sends GPU pods to the scheduler the program names, and a pod that
    names another is refused with a message that says which."""
    assert components(admission_alone) == [f"{COMPONENT}OpaAdmission"]
    deployed = deployed_policy(admission_alone, None, tmp_path_factory.mktemp,
                               namespace="team-admission")
    gpu = {"containers": [{"name": "main", "image": "trainer:1",
                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
           "tolerations": [TOLERATION]}
    refused = decide(opa_bin, deployed, review(gpu))
    assert not refused["allowed"]
    assert "team-binpack" in refused["status"]["message"]
    admitted = decide(opa_bin, deployed, review({**gpu, "schedulerName": "team-binpack"}))
    assert admitted["allowed"], admitted
    # Node pools: no node name is known, so any pod bound by name to a node is checked.
    assert deployed["webhook"]["matchConditions"]
    assert "team-admission" in deployed["webhook"]["namespaceSelector"]["matchExpressions"][0][
        "values"]


def test_a_bad_arg_is_named_as_the_schema_names_it_and_the_component_declares_nothing():
    recording = harness.Recording()
    with pytest.raises(Exception) as refused:
        harness.run_program({}, recording, source=program("BinpackScheduler", {
            **SCHEDULER_ARGS, "scheduler": {"replicas": 9, "client_connection": {"qps": 0}}},
            "scheduler_name"))
    message = str(refused.value)
    assert "invalid BinpackScheduler args (the component declared nothing)" in message
    # Given with Python's names, named with the schema's (and the stack file's).
    assert "scheduler.replicas = 9: Input should be less than or equal to 5" in message
    assert "scheduler.clientConnection.qps = 0" in message
    assert components(recording) == []
    assert not [r for r in recording.registrations if r.type.startswith(K8S)]


def test_a_fact_from_another_component_is_checked_too():
    recording = harness.Recording()
    with pytest.raises(Exception) as refused:
        harness.run_program({}, recording, source=program("OpaAdmission", {
            **ADMISSION_ARGS, "scheduler_name": "Team Binpack"}, "webhook_name"))
    assert 'schedulerName = "Team Binpack": not a valid name' in str(refused.value)
    assert components(recording) == []
