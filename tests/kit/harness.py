"""Runs the program under Pulumi's mocks and records every registration: its type, name,
parent, explicit dependencies and inputs, so tests can check the graph a `pulumi up` would
build."""

from __future__ import annotations

import datetime
import functools
import json
import subprocess
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.settings import get_root_resource
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.base.scoring import scoring_strategy
from components.monitoring.inputs import MonitoringInputs
from components.platform.config import load_settings
from components.platform.settings import StackSettings
from components.platform.wiring import ComponentInputs, component_inputs, with_mixins

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE_STACK_NAME = "dev"
EXAMPLE_STACK = ROOT / f"Pulumi.{EXAMPLE_STACK_NAME}.yaml"

# Outputs the mocks cannot know, made up in the shape the real providers return them.
FAKE_CA_PEM = "-----BEGIN CERTIFICATE-----\nZmFrZS1jYQ==\n-----END CERTIFICATE-----\n"
FAKE_SERVER_PEM = "-----BEGIN CERTIFICATE-----\nZmFrZS1zZXJ2ZXI=\n-----END CERTIFICATE-----\n"
FAKE_KEY_PEM = "-----BEGIN PRIVATE KEY-----\nZmFrZS1rZXk=\n-----END PRIVATE KEY-----\n"
FAKE_PASSWORD = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"


# How the Pulumi protocol marks a secret value: {SECRET_SIG_KEY: SECRET_SIG, "value": ...}.
SECRET_SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIG_KEY) == SECRET_SIG


def reveal(value: Any) -> Any:
    """The value with every secret marker removed."""
    if is_secret(value):
        return reveal(value["value"])
    if isinstance(value, dict):
        return {k: reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [reveal(v) for v in value]
    return value


@dataclass
class Registration:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    raw_inputs: dict     # as sent, secrets still marked
    protect: bool = False
    retain_on_delete: bool = False
    aliases: tuple[str, ...] = ()    # URNs this resource had before, by name or type
    provider: str = ""               # the provider reference, "<urn>::<id>" (empty: default)
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False

    @property
    def inputs(self) -> dict:
        return reveal(self.raw_inputs)


@dataclass
class Recording:
    registrations: list[Registration] = field(default_factory=list)
    outputs: dict[str, dict] = field(default_factory=dict)   # registered outputs, by URN
    # The stack's exports as the program made them (the mocks register the stack's outputs
    # before the program runs, so they are read from the stack itself).
    exports: dict[str, Any] = field(default_factory=dict)

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def one(self, type_: str, name: str) -> Registration:
        found = [r for r in self.registrations if r.type == type_ and r.name == name]
        assert len(found) == 1, f"expected one {type_} named {name}, found {len(found)}"
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.registrations if r.urn == urn)

    def manifests(self) -> list[dict]:
        """Every Kubernetes object declared directly (not through a chart), as the provider
        would receive it."""
        objs = []
        for r in self.registrations:
            if r.type.startswith("kubernetes:") and "helm.sh" not in r.type:
                objs.append(integral_numbers(r.inputs))
        return objs


def map_leaves(value: Any, change: Callable[[Any], Any]) -> Any:
    """`value` with `change` applied to every scalar inside its dicts and lists."""
    if isinstance(value, dict):
        return {k: map_leaves(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [map_leaves(v, change) for v in value]
    return change(value)


def integral_numbers(value: Any) -> Any:
    """The mock protocol carries numbers as floats; Kubernetes integers come back as ints."""
    return map_leaves(value, lambda v: int(v) if isinstance(v, float) and v.is_integer() else v)


# When the fake providers create certificates.
FAKE_NOW = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)


class FakeProviders(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outputs = dict(args.inputs)
        if args.typ == "tls:index/privateKey:PrivateKey":
            outputs["privateKeyPem"] = FAKE_KEY_PEM
        elif args.typ == "tls:index/selfSignedCert:SelfSignedCert":
            outputs["certPem"] = FAKE_CA_PEM
        elif args.typ == "tls:index/locallySignedCert:LocallySignedCert":
            outputs["certPem"] = FAKE_SERVER_PEM
            # As the provider reports it: RFC 3339, validity counted from its creation.
            end = FAKE_NOW + datetime.timedelta(hours=args.inputs["validityPeriodHours"])
            outputs["validityEndTime"] = end.strftime("%Y-%m-%dT%H:%M:%SZ")
        elif args.typ == "tls:index/certRequest:CertRequest":
            outputs["certRequestPem"] = "-----BEGIN CERTIFICATE REQUEST-----\n"
        elif args.typ == "random:index/randomPassword:RandomPassword":
            outputs["result"] = FAKE_PASSWORD[: int(args.inputs.get("length", 16))]
        elif args.typ == "kubernetes:helm.sh/v3:Release":
            outputs["status"] = {"status": "deployed"}
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list[tuple[str, str]]]:
        # No outputs and no check failures (the SDK iterates the failures: a list, not None).
        return {}, []


def _alias_urn(urn: str, alias) -> str:
    """The URN an alias names: given whole, or the resource's own URN with another name or
    type (the parent chain unchanged)."""
    if alias.urn:
        return alias.urn
    head, types, name = urn.rsplit("::", 2)
    spec = alias.spec
    if spec.type:
        types = types.rsplit("$", 1)[0] + "$" + spec.type if "$" in types else spec.type
    return f"{head}::{types}::{spec.name or name}"


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, recording: Recording):
        super().__init__(FakeProviders())
        self.recording = recording

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.recording.registrations.append(Registration(
                type=request.type, name=request.name, urn=response.urn, parent=request.parent,
                dependencies=list(request.dependencies),
                raw_inputs=self.resources[response.urn].state if response.urn in self.resources
                else {},
                protect=request.protect, retain_on_delete=request.retainOnDelete,
                aliases=tuple(_alias_urn(response.urn, alias) for alias in request.aliases),
                provider=request.provider,
                replace_on_changes=tuple(request.replaceOnChanges),
                delete_before_replace=request.deleteBeforeReplace))
        return response

    def RegisterResourceOutputs(self, request):
        self.recording.outputs[request.urn] = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)


class PulumiRefused(Exception):
    """Pulumi's own loader refuses the project or a stack file (the message is Pulumi's)."""


@dataclass(frozen=True)
class StackConfig:
    """What the engine hands the program of one stack: each config value as the CLI encodes it
    (structured values as JSON text; secrets read "[secret]") and the keys holding secrets."""
    config: dict[str, str]
    secret_keys: tuple[str, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class PulumiProject:
    name: str
    runtime: str
    stacks: dict[str, StackConfig]


def pulumi_project(project_dir: Path = ROOT) -> PulumiProject:
    """The project and every stack of it, read by Pulumi's own loaders (tests/kit/pulumi_config):
    the project file `Pulumi.yaml` and each `Pulumi.<stack>.yaml` where the project keeps them."""
    from tests.kit import tools  # tools imports this module
    result = subprocess.run([str(tools.pulumi_config()), str(project_dir)], capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise PulumiRefused(result.stderr.strip())
    read = json.loads(result.stdout)
    return PulumiProject(read["project"], read["runtime"], {
        name: StackConfig(stack["config"], tuple(stack["secretKeys"]), tuple(stack["warnings"]))
        for name, stack in read["stacks"].items()})


def pulumi_stacks(project_dir: Path = ROOT) -> dict[str, StackConfig]:
    return pulumi_project(project_dir).stacks


def stack_file_settings(path: Path) -> dict[str, Any]:
    """A stack file's `config` as written (namespaced keys, YAML values), read without Pulumi's
    loaders: the example stacks of the docs and a stack a user points the playground at."""
    import yaml
    return (yaml.safe_load(path.read_text()) or {}).get("config") or {}


def stack_file_engine_config(path: Path) -> dict[str, str]:
    """A stack file's config as the engine gets it (each value as engine_value writes it)."""
    return {key: engine_value(value) for key, value in stack_file_settings(path).items()}


@functools.cache
def _example_stack() -> StackConfig:
    return pulumi_stacks()[EXAMPLE_STACK_NAME]


def example_config() -> dict[str, str]:
    """The example stack's config, exactly as Pulumi's loader hands it to the engine."""
    return dict(_example_stack().config)


def settings_of(config: dict[str, str]) -> StackSettings:
    """The validated settings of a stack's config (keys with the `gpu-platform:` prefix)."""
    return load_settings({key.split(":", 1)[1]: value for key, value in config.items()
                          if key.startswith("gpu-platform:")})


def example_settings() -> StackSettings:
    return settings_of(example_config())


def inputs_of(settings: StackSettings) -> ComponentInputs:
    """Each component's inputs as the platform hands them over (compaction's as if it were on),
    for tests of the manifest builders."""
    return component_inputs(settings)


def _component(field: str) -> Callable[[StackSettings], Any]:
    return lambda settings: getattr(inputs_of(settings), field)


# One component's inputs for a stack's settings.
(nodes_of, operator_of, scheduler_of, admission_of,
 compaction_of) = map(_component, ("gpu_nodes", "gpu_operator", "scheduler", "admission",
                                   "compaction"))


def monitoring_of(settings: StackSettings, certificate_not_after: int | None = None
                  ) -> MonitoringInputs:
    """Monitoring's inputs; with the webhook certificate's alerts when its expiry (seconds since
    the epoch) is given, as the platform hands them over once admission has made it."""
    declared = ({"opa_admission": types.SimpleNamespace(
                    certificate_not_after=certificate_not_after)}
                if certificate_not_after is not None else None)
    return with_mixins(inputs_of(settings), declared).monitoring


def scheduler_scoring(settings: StackSettings) -> dict:
    """The binpack scheduler's NodeResourcesFit scoring strategy for these settings."""
    scheduler = inputs_of(settings).scheduler
    return scoring_strategy(scheduler.scheduler.scoring_strategy, scheduler.scored_resources)


def engine_value(value: Any) -> str:
    """A config value as the CLI hands it to the program: strings as they are, anything else
    as compact JSON with sorted keys (test_pulumi_project.py checks this against Pulumi's own
    encoding of the example stack)."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"),
                                                           sort_keys=True)


def stack_file_config(settings: dict[str, Any]) -> dict[str, str]:
    """Config for a stack given as {key: value} without the `gpu-platform:` prefix."""
    return {f"gpu-platform:{key}": engine_value(value) for key, value in settings.items()}


def run_program(config: dict[str, str] | None = None,
                recording: Recording | None = None,
                secret_keys: Sequence[str] = (), source: str | None = None) -> Recording:
    """Run the real `__main__.py` under mocks with the given stack config (the example stack by
    default) and return what it registered (into `recording`, when given, so that a run that
    raises can still be inspected)."""
    recording = recording if recording is not None else Recording()
    pulumi.runtime.set_mocks(FakeProviders(), project="gpu-platform", stack="test",
                             preview=False, monitor=RecordingMonitor(recording))
    if config is None:
        config, secret_keys = example_config(), _example_stack().secret_keys
    pulumi.runtime.set_all_config(config, list(secret_keys))
    # The real program, or another one (`source`) that uses its components.
    source = source if source is not None else (ROOT / "__main__.py").read_text()

    def program():
        exec(compile(source, str(ROOT / "__main__.py"), "exec"), {"__name__": "__main__"})

    _sync_await(run_pulumi_func(program))
    root = get_root_resource()
    recording.exports = dict(getattr(root, "outputs", {}))
    return recording
