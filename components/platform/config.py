"""The stack's `gpu-platform:` config as the engine hands it to the program, read into settings
once: secrets only where a setting takes one, retired keys named in a warning, every problem
named with its setting."""

import json
from collections.abc import Collection, Mapping
from typing import Any

from pulumi.runtime import config as runtime_config
from pydantic import ValidationError

from ..base.validation import CONFIG_NAMESPACE, STACK, SettingsError, describe
from .settings import StackSettings
from .wiring import check_platform

# The config keys whose settings may hold secrets (free-form chart values, the Grafana password),
# with the inputs that then carry them: those Helm releases' values, marked secret as a whole.
SECRET_CAPABLE = ("gpuOperator", "monitoring")


def stack_config() -> dict[str, Any]:
    """The stack's `gpu-platform:` config, keys without the prefix.

    Every key is read, not only known ones, so that a misspelt setting is reported rather than
    silently ignored. The engine hands config over either in the PULUMI_CONFIG environment or
    through the runtime's config map; both are read.
    """
    prefix = f"{CONFIG_NAMESPACE}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    return {key[len(prefix):]: runtime_config.get_config(key)
            for key in sorted(keys) if key.startswith(prefix)}


def stack_secret_keys() -> set[str]:
    """The `gpu-platform:` config keys stored as secrets (prefix removed): a key holds a secret
    when any value under it was set with `pulumi config set --secret --path`."""
    prefix = f"{CONFIG_NAMESPACE}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    secret = {key for key in keys if runtime_config.is_config_secret(key)}
    secret |= set(runtime_config.get_config_secret_keys_env())
    return {key[len(prefix):] for key in secret if key.startswith(prefix)}


def check_secret_keys(secret_keys: Collection[str]) -> None:
    """A secret in a section whose values reach ConfigMaps, node patches or webhook
    configurations would leave the program in plain text: refused, naming the key."""
    problems = [
        f"{CONFIG_NAMESPACE}:{key}: stored as a secret, but none of its settings takes one, so "
        f"its values would reach the cluster and the state in plain text; allowed: plain values "
        f"here, and secrets only under "
        f"{' and '.join(CONFIG_NAMESPACE + ':' + k for k in SECRET_CAPABLE)}"
        for key in sorted(secret_keys) if key not in SECRET_CAPABLE]
    if problems:
        raise SettingsError(problems, STACK)


def parse_config_value(raw: str) -> Any:
    """Pulumi hands structured config values to the program as JSON text; scalars stay strings."""
    if isinstance(raw, str) and raw.lstrip()[:1] in ("{", "["):
        return json.loads(raw)
    return raw


# Settings of earlier releases that no longer do anything: accepted, ignored and named in a
# warning (retired_settings), so that a stack file written for an earlier release deploys.
ONE_THRESHOLD = ("idle is judged by one threshold, `monitoring.usage.activeThreshold`, for the "
                 "dashboard, the GpuAllocatedIdle alert and reclaim alike; set that instead")
RETIRED_SETTINGS = {
    ("admission", "kubeMgmt"): "kube-mgmt no longer runs (OPA loads its policy from its "
                               "ConfigMap itself); remove the key",
    ("reclaim", "idleBelow"): ONE_THRESHOLD,
    ("monitoring", "alerts", "idleUtilizationPercent"): ONE_THRESHOLD,
}


def _without_retired(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    parsed = {key: parse_config_value(value) for key, value in config.items()}
    found = []
    for (*parents, key), why in RETIRED_SETTINGS.items():
        node: Any = parsed
        for parent in parents:
            node = node.get(parent) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node:
            del node[key]
            found.append(f"{CONFIG_NAMESPACE}:{'.'.join((*parents, key))} is ignored: {why}")
    return parsed, found


def retired_settings(config: Mapping[str, Any]) -> list[str]:
    """A warning for each setting of an earlier release the config still sets."""
    return _without_retired(config)[1]


def load_settings(config: Mapping[str, Any]) -> StackSettings:
    """Validate the stack's `gpu-platform:` config (keys without the namespace prefix)."""
    # Pulumi hands a key written without a value (`key:` or `key: ~`) to the program as "".
    empty = [f'{CONFIG_NAMESPACE}:{key} = "": the stack file gives this key no value; allowed: '
             f"a value, or no such key to keep the default" for key, value in config.items()
             if value == ""]
    parsed, _ = _without_retired(config)
    try:
        settings = StackSettings.model_validate({key: value for key, value in parsed.items()
                                                 if value != ""})
    except ValidationError as error:
        # A required key written without a value is reported once, as empty.
        missing = {f"{CONFIG_NAMESPACE}:{key}: required setting is missing"
                   for key, value in config.items() if value == ""}
        raise SettingsError(empty + [problem for problem in (
            describe(e, StackSettings, STACK.root) for e in error.errors())
            if problem not in missing], STACK) from None
    if empty:
        raise SettingsError(empty, STACK)
    check_platform(settings, STACK)
    return settings
