"""The mutate and audit modes, each rolled out as `pulumi up` does and back to enforce after; a
debug container where node pools taint the GPU nodes; and the reachability probe as a later
`pulumi up` applies it, admitted by OPA itself."""

import pytest

from components.base.facts import AUDIT_LABEL
from tests.integration.admission.opa import (
    USER_NAMESPACE,
    admitted,
    bare_gpu_pod,
    gpu_pod_with,
    probe_of_a_later_run,
    refusal,
    roll_out,
    switch_mode,
)
from tests.kit.cluster.controlplane import ApiError, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.nodes_and_pods import placement, pod


def test_mutate_fixes_a_gpu_pod_that_the_binpack_scheduler_then_binds(admission,
                                                                      example_settings):
    kube = admission.cp.admin
    settings = switch_mode(admission, example_settings, "mutate")
    try:
        wait_until(lambda: kube.create(bare_gpu_pod("probe-mutate"), dry_run=True)["spec"][
            "schedulerName"] == settings.scheduler.name, "the mutating webhook to take effect",
            timeout=15)
        created = kube.create(bare_gpu_pod("vendor-chart-pod"))
        assert created["spec"]["schedulerName"] == settings.scheduler.name
        assert settings.gpu_nodes.taint.toleration() in created["spec"]["tolerations"]
        assert placement(kube, USER_NAMESPACE, "vendor-chart-pod") == "gpu-node-1"
        # What cannot be fixed is still refused.
        pinned = bare_gpu_pod("vendor-pinned")
        pinned["spec"]["nodeName"] = "gpu-node-1"
        assert "skips the scheduler" in refusal(kube, pinned)
    finally:
        switch_mode(admission, example_settings, "enforce")


def test_audit_admits_with_the_warning_kubectl_shows_and_labels_the_pod(admission,
                                                                        example_settings):
    kube = admission.cp.admin
    switch_mode(admission, example_settings, "audit")
    try:
        def admitted_with_warning():
            try:
                kube.create(bare_gpu_pod("probe-audit"), dry_run=True)
            except ApiError:
                return False
            return bool(kube.warnings)
        wait_until(admitted_with_warning, "audit mode to take effect", timeout=15)
        created = kube.create(bare_gpu_pod("audited"))
        print("\nwarnings:", kube.warnings)
        assert any(w.startswith(f'gpu-platform audit: pod "{USER_NAMESPACE}/audited": '
                                f'container "main" requests nvidia.com/gpu but '
                                f'spec.schedulerName is "default-scheduler"')
                   for w in kube.warnings), kube.warnings
        assert created["metadata"]["labels"][AUDIT_LABEL] == "violation"
    finally:
        switch_mode(admission, example_settings, "enforce")
    assert "spec.schedulerName" in refusal(kube, bare_gpu_pod("after-audit"))


def test_audit_labels_a_violation_an_update_makes(admission, example_settings):
    """A toleration of the GPU taint added to a running pod without GPUs, and a privileged debug
    container added to a GPU pod: admitted in audit mode, each with the warning, and labelled."""
    kube = admission.cp.admin
    kube.create(pod("web-later-tolerating", USER_NAMESPACE))
    kube.create(gpu_pod_with(example_settings, "train-audit-debug"))
    switch_mode(admission, example_settings, "audit")
    try:
        wait_until(lambda: admitted(kube, bare_gpu_pod("probe-audit")) and bool(kube.warnings),
                   "audit mode to take effect", timeout=15)
        toleration = example_settings.gpu_nodes.taint.toleration()
        updated = kube.merge_patch("v1", "Pod", "web-later-tolerating",
                                   {"spec": {"tolerations": [toleration]}}, USER_NAMESPACE,
                                   what="add the GPU toleration")
        assert any("tolerates the GPU node taint" in w for w in kube.warnings), kube.warnings
        assert updated["metadata"]["labels"][AUDIT_LABEL] == "violation"
        debugged = kube.request(
            "PATCH", kube.path("v1", "Pod", USER_NAMESPACE, "train-audit-debug",
                               "ephemeralcontainers"),
            body={"spec": {"ephemeralContainers": [{"name": "root-shell", "image": "busybox:1",
                                                    "securityContext": {"privileged": True}}]}},
            content_type="application/strategic-merge-patch+json")
        assert any('ephemeral container "root-shell" is privileged' in w
                   for w in kube.warnings), kube.warnings
        # The API server keeps only the ephemeral containers from this request: the warning,
        # and the API server's audit log, tell of it, not a label.
        assert AUDIT_LABEL not in debugged["metadata"].get("labels", {})
    finally:
        switch_mode(admission, example_settings, "enforce")


def test_where_node_pools_taint_the_gpu_nodes_a_debug_container_gets_no_device_path(
        admission, example_settings):
    """In a node-pool stack the policy knows no GPU node's name, so a pod bound to any node may
    be on one: a privileged debug container added to it is refused, while an unprivileged one
    is added."""
    kube = admission.cp.admin
    kube.create(pod("web-to-debug", USER_NAMESPACE))
    assert placement(kube, USER_NAMESPACE, "web-to-debug") == "cpu-node-1"
    nodes = example_settings.gpu_nodes.model_copy(update={"tainted_by": "nodePool",
                                                          "names": [], "labels": {}})
    roll_out(admission, example_settings.model_copy(update={"gpu_nodes": nodes}), "node pools")
    try:
        def add_debugger(name: str, security: dict) -> None:
            kube.request("PATCH", kube.path("v1", "Pod", USER_NAMESPACE, "web-to-debug",
                                            "ephemeralcontainers"),
                         body={"spec": {"ephemeralContainers": [
                             {"name": name, "image": "busybox:1", "securityContext": security}]}},
                         content_type="application/strategic-merge-patch+json")
        with pytest.raises(ApiError) as refused:
            add_debugger("root-shell", {"privileged": True})
        assert refused.value.status == 403
        assert ('spec.nodeName "cpu-node-1" may be a GPU node (GPU nodes are not named in this '
                "stack)") in refused.value.message
        add_debugger("shell", {})
    finally:
        roll_out(admission, example_settings, "named GPU nodes")


def test_the_reachability_probe_is_admitted_by_opa_itself(admission, declared):
    kube, asked = admission.cp.admin, admission.decisions()
    for dry_run in (True, False):       # preview, then up
        kube.apply(probe_of_a_later_run(declared, "reachable"), TEST_MANAGER, dry_run=dry_run)
    assert admission.decisions() == asked + 2
