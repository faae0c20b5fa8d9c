"""Kubernetes accepts everything the program declares directly: every object of the example
stack, server-side applied to a real kube-apiserver, and the GPU node patches applied to Nodes."""

import copy

import pytest

from components import opa_admission
from tests.kit.cluster.controlplane import ApiError
from tests.kit.cluster.declared_objects import TEST_MANAGER, apply_declared, read_back_differences
from tests.kit.cluster.nodes_and_pods import create_node


@pytest.fixture(scope="module")
def applied(control_plane, declared):
    return apply_declared(control_plane.admin, declared.objects)


def test_every_declared_object_is_accepted_or_skipped_with_its_reason(applied, declared):
    accepted, skipped = applied
    print(f"\n{len(accepted)} objects applied; skipped:")
    for name, reason in skipped.items():
        print(f"  {name}: {reason}")
    print("charts, rendered by Helm at deploy time:", ", ".join(declared.charts))
    assert len(accepted) + len(skipped) == len(declared.objects)
    assert {name.split()[0] for name in skipped} == {
        "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap",
        # Kueue's, applied with Kueue running in test_teams.py.
        "ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}


def test_with_no_opa_behind_the_webhook_the_run_stops_at_the_reachability_probe(
        applied, example_settings):
    """No OPA runs here, as on a cluster whose firewall keeps the API server from it: the
    probe, applied last, is refused naming its webhook, so `pulumi up` fails there."""
    _, skipped = applied
    refusal = skipped[f"ConfigMap {example_settings.admission.namespace}/"
                      f"{opa_admission.REACHABILITY_PROBE}"]
    assert f'failed calling webhook "{example_settings.admission.reachability_webhook_name}"' \
        in refusal


def test_applied_objects_read_back_as_declared(control_plane, applied, declared):
    """What the API server stores is what the program declares, value for value, so that the
    next preview finds nothing to change (a value the API server or a webhook normalises, such
    as a quantity declared as a number and stored as a string, would show as a change in every
    preview)."""
    kube = control_plane.admin
    accepted = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
                for o in applied[0]}
    objects = [o for o in declared.objects
               if (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) in accepted]
    assert read_back_differences(kube, objects) == {}


def test_a_second_apply_changes_nothing(control_plane, applied, declared):
    """Re-running `pulumi up` on an unchanged stack is a no-op for the API server too."""
    kube = control_plane.admin
    for before in applied[0]:
        meta = before["metadata"]
        obj = next(o for o in declared.objects if o["kind"] == before["kind"]
                   and o["metadata"]["name"] == meta["name"]
                   and o["metadata"].get("namespace") == meta.get("namespace"))
        after = kube.apply(obj, TEST_MANAGER)
        assert after["metadata"]["resourceVersion"] == meta["resourceVersion"], \
            f"{obj['kind']} {meta['name']} changed on a second apply"


def test_gpu_node_patches_set_the_taints_and_labels(control_plane, declared, example_settings):
    kube = control_plane.admin
    for patch in declared.node_patches:
        name = patch["metadata"]["name"]
        create_node(kube, name)
        kube.apply(patch, declared.field_manager, force=declared.force_node_patches)
        node = kube.get("v1", "Node", name)
        taints = example_settings.gpu_nodes.taints
        assert node["spec"]["taints"] == [t.as_manifest() for t in taints]
        assert example_settings.gpu_nodes.labels.items() <= node["metadata"]["labels"].items()
        managers = {m["manager"] for m in node["metadata"]["managedFields"]}
        assert declared.field_manager in managers


def test_a_node_patch_does_not_silently_take_taints_another_manager_set(control_plane, declared,
                                                                          example_settings):
    """Without forceTaintOwnership, a taint list someone else owns stops the apply with a
    conflict, and that manager's taint stays."""
    assert not declared.force_node_patches
    kube = control_plane.admin
    name = "gpu-node-tainted-elsewhere"
    patch = copy.deepcopy(declared.node_patches[0])
    patch["metadata"]["name"] = name
    foreign = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
    create_node(kube, name)
    kube.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                "spec": {"taints": [foreign]}}, "cloud-provider")
    with pytest.raises(ApiError) as conflict:
        kube.apply(patch, declared.field_manager)
    assert conflict.value.status == 409
    assert kube.get("v1", "Node", name)["spec"]["taints"] == [foreign]
