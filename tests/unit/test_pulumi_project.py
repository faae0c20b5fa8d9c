"""The project and stack files as Pulumi itself reads them.

`pulumi up` reads `Pulumi.yaml` and `Pulumi.<stack>.yaml` with the Go loaders of Pulumi's SDK
(`go/common/workspace`), not with PyYAML, and hands the program each config value as a string
(structured values as JSON text) with the keys that hold secrets. tests/kit/pulumi_config runs those
loaders; every test here goes through it, and `harness.run_program` runs the program with
exactly the config it returns. A project file Pulumi refuses, or a stack value Pulumi reads
otherwise than a YAML library would, fails here rather than in a user's terminal."""

import json
import shutil
from pathlib import Path

import pytest

from components.base.validation import CONFIG_NAMESPACE, SettingsError
from tests.kit import harness

PLATFORM = "gpu-platform:index:GpuPlatform"
KUBERNETES = "kubernetes:"


def project_with(tmp_path: Path, stack_files: dict[str, str],
                 project_file: str | None = None) -> Path:
    """A copy of the project's Pulumi.yaml (or `project_file`) with the given stack files."""
    (tmp_path / "Pulumi.yaml").write_text(
        project_file if project_file is not None
        else (harness.ROOT / "Pulumi.yaml").read_text())
    for name, text in stack_files.items():
        (tmp_path / f"Pulumi.{name}.yaml").write_text(text)
    return tmp_path


def minimal_stack(**extra: str) -> str:
    """The smallest stack file, with extra top-level `gpu-platform:` keys given as YAML text."""
    lines = ["config:",
             "  gpu-platform:cluster:",
             "    context: gpu-cluster",
             "  gpu-platform:kubernetesVersion: 1.36.4",
             "  gpu-platform:gpuNodes:",
             "    names: [gpu-node-1]"]
    lines += [f"  gpu-platform:{key}:{text}" for key, text in extra.items()]
    return "\n".join(lines) + "\n"


def test_pulumi_loads_the_project_and_every_stack_file_without_a_warning():
    project = harness.pulumi_project()
    # The project's name is the namespace of its config keys, and the Python runtime runs it.
    assert (project.name, project.runtime) == (CONFIG_NAMESPACE, "python")
    stacks = project.stacks
    assert harness.EXAMPLE_STACK_NAME in stacks
    assert set(stacks) == {path.name.split(".")[1] for path in harness.ROOT.glob("Pulumi.*.yaml")}
    for name, stack in stacks.items():
        assert not stack.warnings, f"Pulumi.{name}.yaml: {stack.warnings}"


@pytest.mark.parametrize("stack_name", sorted(harness.pulumi_stacks()))
def test_every_stack_runs_under_the_mocks_with_the_config_pulumi_hands_it(stack_name):
    stack = harness.pulumi_stacks()[stack_name]
    recording = harness.run_program(stack.config, secret_keys=stack.secret_keys)
    assert len(recording.of_type(PLATFORM)) == 1
    assert any(r.type.startswith(KUBERNETES) for r in recording.registrations)


def test_the_harness_encodes_config_as_pulumi_does():
    """Tests that vary a stack build its config with harness.engine_value; for the example
    stack that encoding gives exactly what Pulumi's loader gives."""
    pulumi_config = harness.example_config()
    decoded = {key: json.loads(value) if value[:1] in "{[" else value
               for key, value in pulumi_config.items()}
    assert {key: harness.engine_value(value) for key, value in decoded.items()} == pulumi_config


def test_a_project_file_pulumi_cannot_parse_is_refused(tmp_path):
    """The project file as it was until it was fixed: an unquoted ': ' in the description."""
    broken = (harness.ROOT / "Pulumi.yaml").read_text().replace(
        "description: >-\n  NVIDIA GPU nodes as a shared platform:",
        "description: NVIDIA GPU nodes as a shared platform:")
    assert broken != (harness.ROOT / "Pulumi.yaml").read_text()
    with pytest.raises(harness.PulumiRefused) as refused:
        harness.pulumi_stacks(project_with(tmp_path, {}, broken))
    assert "mapping values are not allowed in this context" in str(refused.value)


def test_a_project_file_pulumi_cannot_validate_is_refused(tmp_path):
    """Pulumi also checks the file against its project schema: runtime options are a map."""
    project = (harness.ROOT / "Pulumi.yaml").read_text().replace(
        "  options:\n    toolchain: pip\n    virtualenv: venv\n", "  options: [pip, venv]\n")
    with pytest.raises(harness.PulumiRefused) as refused:
        harness.pulumi_stacks(project_with(tmp_path, {}, project))
    assert "#/runtime/options: expected object, but got array" in str(refused.value)


def test_a_key_set_twice_is_refused_as_pulumi_refuses_it(tmp_path):
    """A stack file with one section pasted twice: a YAML library keeps the last, Pulumi stops."""
    twice = minimal_stack() + ("  gpu-platform:scheduler:\n    replicas: 1\n"
                               "  gpu-platform:scheduler:\n    replicas: 3\n")
    with pytest.raises(harness.PulumiRefused) as refused:
        harness.pulumi_stacks(project_with(tmp_path, {"twice": twice}))
    assert "already defined" in str(refused.value)


def test_a_yaml_1_1_boolean_reaches_the_program_as_pulumi_reads_it(tmp_path):
    """`yes` is a boolean to YAML 1.1 readers and a string to Pulumi: the node label it sets is
    the string, as `pulumi up` would set it."""
    stack = minimal_stack().replace("names: [gpu-node-1]",
                                    "names: [gpu-node-1]\n    labels: {example.com/spot: yes}")
    config = harness.pulumi_stacks(project_with(tmp_path, {"labels": stack}))["labels"].config
    recording = harness.run_program(config)
    patch = recording.one(f"{KUBERNETES}core/v1:NodePatch", "gpu-node-1").inputs
    assert patch["metadata"]["labels"] == {"example.com/spot": "yes"}


@pytest.mark.parametrize("unquoted, handed_over, problem", [
    # A minor version written as a number: Pulumi formats the float, trailing zero lost.
    (" 1.30", "1.3", "not a Kubernetes release"),
    # A date-like value: Pulumi formats it as a Go time.
    (" 2026-01-01", "2026-01-01 00:00:00 +0000 UTC", "not a Kubernetes release"),
])
def test_a_value_pulumi_reads_otherwise_fails_validation_naming_the_setting(
        tmp_path, unquoted, handed_over, problem):
    stack = minimal_stack().replace(" 1.36.4", unquoted)
    config = harness.pulumi_stacks(project_with(tmp_path, {"odd": stack}))["odd"].config
    assert config["gpu-platform:kubernetesVersion"] == handed_over
    recording = harness.Recording()
    with pytest.raises(SettingsError) as raised:
        harness.run_program(config, recording)
    assert f'gpu-platform:kubernetesVersion = "{handed_over}": {problem}' in str(raised.value)
    assert recording.registrations == []


def test_a_key_without_a_value_is_named_as_empty(tmp_path):
    """Pulumi hands `key:` with nothing after it to the program as "" (and warns)."""
    stacks = harness.pulumi_stacks(project_with(tmp_path, {"empty": minimal_stack(
        imageRegistryMirror="")}))
    assert stacks["empty"].config["gpu-platform:imageRegistryMirror"] == ""
    assert any("imageRegistryMirror" in w for w in stacks["empty"].warnings)
    with pytest.raises(SettingsError) as raised:
        harness.run_program(stacks["empty"].config)
    assert raised.value.problems == [
        'gpu-platform:imageRegistryMirror = "": the stack file gives this key no value; '
        "allowed: a value, or no such key to keep the default"]


def test_secrets_are_marked_as_pulumi_marks_them(tmp_path):
    """A value set with `pulumi config set --secret --path` is stored encrypted; the engine
    hands its key over as a secret key, and the release values that carry it become a secret
    input as a whole. Under a section that reaches ConfigMaps or node patches it is refused."""
    ciphertext = "AAABAHkL9vBqHcL0f0Xo9Q=="    # never decrypted: the loader blinds it
    password = f"\n    grafana:\n      adminPassword:\n        secure: {ciphertext}"
    label = f"labels:\n      team:\n        secure: {ciphertext}"
    stacks = harness.pulumi_stacks(project_with(tmp_path, {
        "password": minimal_stack(monitoring=password),
        "label": minimal_stack().replace("names: [gpu-node-1]",
                                         f"names: [gpu-node-1]\n    {label}")}))
    password_stack = stacks["password"]
    assert password_stack.secret_keys == ("gpu-platform:monitoring",)
    recording = harness.run_program(password_stack.config,
                                    secret_keys=password_stack.secret_keys)
    release = recording.one(f"{KUBERNETES}helm.sh/v3:Release", "kube-prometheus-stack")
    assert harness.is_secret(release.raw_inputs["values"])
    label_stack = stacks["label"]
    assert label_stack.secret_keys == ("gpu-platform:gpuNodes",)
    with pytest.raises(SettingsError) as raised:
        harness.run_program(label_stack.config, secret_keys=label_stack.secret_keys)
    assert "gpu-platform:gpuNodes: stored as a secret" in str(raised.value)


def test_the_loader_reads_the_stack_config_dir_a_project_sets(tmp_path):
    """`stackConfigDir` moves the stack files; the loader follows the project file, as the CLI
    does."""
    project = (harness.ROOT / "Pulumi.yaml").read_text() + "stackConfigDir: stacks\n"
    (tmp_path / "stacks").mkdir()
    shutil.copy(harness.EXAMPLE_STACK, tmp_path / "stacks" / harness.EXAMPLE_STACK.name)
    stacks = harness.pulumi_stacks(project_with(tmp_path, {}, project))
    assert stacks[harness.EXAMPLE_STACK_NAME].config == harness.example_config()
