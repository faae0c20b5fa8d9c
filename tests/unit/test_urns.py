"""Resource identity: a refactor must not change what Pulumi thinks a resource is. A URN that
changes without an alias makes Pulumi delete the old resource and create a new one; for the
gpu-operator release that uninstalls the driver, toolkit and device plugin from every GPU node.

`tests/fixtures/urns.txt` holds the example stack's URNs. When a change adds or removes a
resource on purpose, regenerate it with `venv/bin/python -m tests.unit.test_urns`; a rename must
instead keep the old URN through an alias (pulumi.Alias), which this test accepts."""


from tests.kit import harness
from tests.kit.stacks import with_changes

SNAPSHOT = harness.FIXTURES / "urns.txt"
K8S = "kubernetes:"


def current_urns(recording) -> set[str]:
    return {r.urn for r in recording.registrations}


def test_no_resource_of_the_example_stack_changes_its_urn_without_an_alias(example_run):
    known = set(SNAPSHOT.read_text().split())
    reachable = current_urns(example_run) | {a for r in example_run.registrations
                                             for a in r.aliases}
    lost = sorted(known - reachable)
    assert not lost, ("these resources would be deleted and created anew (add a pulumi.Alias "
                      "for a rename, or regenerate the snapshot for a deliberate removal):\n"
                      + "\n".join(lost))


def test_the_snapshot_guard_catches_a_rename(example_run):
    """The guard itself: the gpu-operator release under another name is caught."""
    known = set(SNAPSHOT.read_text().split())
    release = example_run.one(f"{K8S}helm.sh/v3:Release", "gpu-operator")
    renamed = current_urns(example_run) - {release.urn} | {release.urn + "-renamed"}
    assert release.urn in known - renamed


def test_the_gpu_operator_release_is_protected_by_default_and_monitoring_is_not(example_run):
    releases = {r.name: r for r in example_run.of_type(f"{K8S}helm.sh/v3:Release")}
    assert releases["gpu-operator"].protect is True
    assert releases["kube-prometheus-stack"].protect is False
    assert not any(r.retain_on_delete for r in releases.values())


def test_protection_is_a_setting():
    recording = harness.run_program(harness.stack_file_config(with_changes(
        gpuOperator={"protection": {"protect": False, "retainOnDelete": True}})))
    release = recording.one(f"{K8S}helm.sh/v3:Release", "gpu-operator")
    assert (release.protect, release.retain_on_delete) == (False, True)


TWO_PLATFORMS = """
from components.platform.component import GpuPlatform
from components.platform.config import load_settings, stack_config

# As a program hands args to the component: plain values, validated by the component.
args = load_settings(stack_config()).model_dump()
for name in ("gpu-platform", "lab"):
    GpuPlatform(name, args)
"""


def test_two_platforms_in_one_program_do_not_collide():
    recording = harness.run_program(harness.stack_file_config(with_changes()),
                                    source=TWO_PLATFORMS)
    urns = [r.urn for r in recording.registrations]
    assert len(urns) == len(set(urns))
    # Each on its own cluster's provider.
    providers = recording.of_type("pulumi:providers:kubernetes")
    assert sorted(p.name for p in providers) == ["cluster", "lab-cluster"]
    names = {r.name for r in recording.of_type(f"{K8S}helm.sh/v3:Release")}
    assert names == {"gpu-operator", "kube-prometheus-stack", "lab-gpu-operator",
                     "lab-kube-prometheus-stack"}
    # The default platform's resources keep the names of the single-platform program.
    single = harness.run_program(harness.stack_file_config(with_changes()))
    assert current_urns(single) <= set(urns)


if __name__ == "__main__":
    SNAPSHOT.write_text("\n".join(sorted(current_urns(harness.run_program()))) + "\n")
    print(f"wrote {SNAPSHOT}")


def test_a_changed_priority_class_value_replaces_the_class(example_run):
    """The API server refuses to change a PriorityClass's value or preemption policy in place
    (test_preemption.py shows it): such a change replaces the class, the old one deleted first
    since the new one has its name. Nothing else is replaced that way."""
    replaced = {r.name: r for r in example_run.registrations if r.replace_on_changes}
    assert list(replaced) == ["gpu-preemptible"]
    assert sorted(replaced["gpu-preemptible"].replace_on_changes) == ["preemptionPolicy", "value"]
    assert replaced["gpu-preemptible"].delete_before_replace is True
