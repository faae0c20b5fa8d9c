"""The components as a Pulumi package, checked by Pulumi's own code: the schema the provider
serves (Pulumi's schema analyzer, through the provider process `pulumi package add` runs), the
plugin manifest and schema as the CLI loads and binds them (tests/kit/pulumi_package), and the
TypeScript SDK Pulumi generates from them, which the docs' TypeScript examples must compile
against."""

import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc
from pydantic import BaseModel

from components.package import COMPONENTS, PACKAGE, VERSION
from components.platform.settings import StackSettings
from scripts import reference
from tests.kit import harness, tools

PROVIDER = harness.ROOT / "provider"
EXAMPLES = harness.ROOT / "docs" / "operators" / "examples" / "typescript"
CHANGELOG = harness.ROOT / "CHANGELOG.md"



@pytest.fixture(scope="module")
def served_schema() -> dict:
    """The schema as the provider process serves it to the CLI (GetSchema over gRPC)."""
    process = subprocess.Popen([sys.executable, str(PROVIDER), "127.0.0.1:1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().decode().strip()
        assert port.isdigit(), process.stderr.read().decode() if process.stderr else port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            response = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60)
        return json.loads(response.schema)
    finally:
        process.terminate()
        process.wait(timeout=10)


def token(component: type) -> str:
    return f"{PACKAGE}:index:{component.__name__}"


def test_the_provider_serves_every_component_as_the_analyzer_infers_it(served_schema):
    inferred = json.loads(ComponentProvider(COMPONENTS, PACKAGE, version=VERSION).schema or "")
    assert served_schema == inferred
    assert (served_schema["name"], served_schema["version"]) == (PACKAGE, VERSION)
    assert set(served_schema["resources"]) == {token(c) for c in COMPONENTS}
    assert all(r["isComponent"] for r in served_schema["resources"].values())


def properties(schema: dict):
    """(where, name, property) of every input and output of every component and type."""
    for name, resource in schema["resources"].items():
        for kind in ("inputProperties", "properties"):
            for prop_name, prop in resource.get(kind, {}).items():
                yield f"{name} {kind}", prop_name, prop
    for name, type_ in schema["types"].items():
        for prop_name, prop in type_.get("properties", {}).items():
            yield name, prop_name, prop


def test_every_input_and_output_is_typed_and_described(served_schema):
    untyped = [(w, n) for w, n, p in properties(served_schema)
               if not (p.get("type") or p.get("$ref"))]
    undescribed = [(w, n) for w, n, p in properties(served_schema) if not p.get("description")]
    assert not untyped and not undescribed, (untyped, undescribed)
    assert all(t.get("description") for t in served_schema["types"].values())
    for component in COMPONENTS:
        resource = served_schema["resources"][token(component)]
        assert resource.get("description"), component.__name__
        assert resource.get("properties"), f"{component.__name__} has no outputs"


def test_a_component_takes_its_section_of_the_stack_file_under_the_same_keys(served_schema):
    """GpuPlatform's args are the stack file's sections, and every settings type keeps the
    stack file's keys, so that a stack file and a TypeScript program say the same things."""
    platform = served_schema["resources"][token(COMPONENTS[0])]["inputProperties"]
    sections = {f.alias for f in StackSettings.model_fields.values()}
    assert set(platform) == sections | {"secretSections"}
    models = {m.__name__: m for m in _settings_models()}
    for name, type_ in served_schema["types"].items():
        model = models[name.rsplit(":", 1)[1]]
        assert set(type_["properties"]) == {f.alias for f in model.model_fields.values()}, name


def _settings_models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    for component in COMPONENTS:
        reference._collect(component.inputs_model(), found)
    return found


def test_each_component_takes_the_args_generated_from_its_inputs():
    for component in COMPONENTS:
        annotation = inspect.signature(component.__init__).parameters["args"].annotation
        generated = importlib.import_module(
            component.__module__.rsplit(".", 1)[0] + ".zz_generated_args")
        assert annotation is getattr(generated, f"{component.__name__}Args")


def test_no_generated_args_module_is_left_over():
    on_disk = set((harness.ROOT / "components").glob("*/zz_generated_args.py"))
    assert on_disk == set(reference.render_args()), \
        "a zz_generated_args.py no component's inputs need"


# --- the package as `pulumi package add` meets it ------------------------------------------

@pytest.fixture(scope="module")
def typescript_sdk(served_schema, tmp_path_factory) -> tuple[dict, Path]:
    """Pulumi's plugin loader, schema binder and Node.js SDK generator run on the provider's
    schema: their report, and the directory of the generated SDK."""
    work = tmp_path_factory.mktemp("package")
    schema = work / "schema.json"
    schema.write_text(json.dumps(served_schema))
    result = subprocess.run([str(tools.pulumi_package()), str(PROVIDER), str(schema),
                             str(work / "sdk")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), work


def test_pulumi_loads_the_plugin_and_binds_its_schema_without_warnings(typescript_sdk):
    report, _ = typescript_sdk
    assert report["runtime"] == "python"
    assert (report["package"], report["version"]) == (PACKAGE, VERSION)
    assert report["warnings"] == []
    assert {"gpuPlatform.ts", "binpackScheduler.ts", "opaAdmission.ts"} <= set(report["files"])


def type_check(work: Path, program: str) -> subprocess.CompletedProcess:
    """`tsc --noEmit` of `program` against the generated SDK, as `@pulumi/gpu-platform`."""
    modules = tools.typescript()
    (work / "app.ts").write_text(program)
    (work / "tsconfig.json").write_text(json.dumps({
        "compilerOptions": {
            "strict": True, "noEmit": True, "target": "ES2020", "module": "commonjs",
            "moduleResolution": "node", "esModuleInterop": True, "skipLibCheck": True,
            "baseUrl": ".", "typeRoots": [str(modules / "@types")], "types": ["node"],
            "paths": {"@pulumi/gpu-platform": ["sdk"], "*": [str(modules / "*")]}},
        "files": ["app.ts"]}))
    return subprocess.run([str(modules / ".bin" / "tsc"), "-p", str(work / "tsconfig.json")],
                          capture_output=True, text=True)


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.ts")))
def test_the_typescript_examples_compile_against_the_generated_sdk(typescript_sdk, example):
    _, work = typescript_sdk
    result = type_check(work, (EXAMPLES / example).read_text())
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_typescript_program_with_a_mistyped_setting_does_not_compile(typescript_sdk):
    """The check above can fail: a setting of the wrong type, and one that does not exist."""
    _, work = typescript_sdk
    program = (EXAMPLES / "platform.ts").read_text().replace(
        "scheduler: { replicas: 3 }", 'scheduler: { replicas: "3", replica: 3 }')
    result = type_check(work, program)
    assert result.returncode != 0
    assert "Type 'string' is not assignable to type 'number'" in result.stdout


def test_the_release_is_the_newest_in_the_changelog():
    """`v<VERSION>` is the tag that pins this release; the changelog records it."""
    releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", CHANGELOG.read_text(), re.MULTILINE)
    assert releases and releases[0] == VERSION


def test_the_package_page_shows_the_typescript_examples_as_they_are_checked():
    page = (harness.ROOT / "docs" / "operators" / "component-package.md").read_text()
    shown = re.findall(r"```ts\n(.*?)```", page, re.DOTALL)
    assert sorted(shown) == sorted(p.read_text() for p in EXAMPLES.glob("*.ts"))
