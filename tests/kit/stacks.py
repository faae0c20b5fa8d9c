"""The stacks the tests are written against: the minimal stack's settings and changes to them,
as a stack file holds them (without the `gpu-platform:` prefix)."""

import copy

from tests.kit import harness

MINIMAL = {"cluster": {"context": "gpu-cluster"}, "kubernetesVersion": "1.35.10",
           "gpuNodes": {"names": ["gpu-node-1"]}}
# A kubeconfig with two contexts.
KUBECONFIG = harness.FIXTURES / "kubeconfig.yaml"
# Two teams on the minimal stack's one GPU node, of 8 GPUs.
TEAMS = {"enabled": True, "teams": [
    {"name": "research", "namespaces": ["research"], "quota": {"gpu": {"nvidia.com/gpu": 5}}},
    {"name": "vision", "namespaces": ["vision"], "quota": {"gpu": {"nvidia.com/gpu": 3}}}]}


def with_changes(**sections) -> dict:
    """MINIMAL with sections replaced or merged (a section given as a dict is merged)."""
    settings = copy.deepcopy(MINIMAL)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(settings.get(key), dict):
            settings[key] = {**settings[key], **value}
        elif value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
    return settings


def raw(settings: dict) -> dict:
    """Settings as the engine hands them over: structured values as JSON text."""
    return {key: harness.engine_value(value) for key, value in settings.items()}
