"""Fixtures both suites share: the example stack run once, its settings and deployed policy,
and the tools the unit suite runs."""

from pathlib import Path

import pulumi
import pytest

from tests.kit import harness, policy_harness, tools


@pytest.fixture(scope="session")
def opa_bin() -> Path:
    return tools.opa()


@pytest.fixture(scope="session")
def promtool_bin() -> Path:
    return tools.promtool()


@pytest.fixture(scope="session")
def example_run() -> harness.Recording:
    """The example stack (Pulumi.dev.yaml) run once under mocks."""
    return harness.run_program()


@pytest.fixture(scope="session")
def example_settings():
    return harness.example_settings()


@pytest.fixture
def aggressive_compaction_settings():
    """The example stack with the most aggressive compaction limits the benchmark measured."""
    base = harness.example_settings()
    return base.model_copy(update={"compaction": base.compaction.model_copy(update={
        "underused_percent": 75, "max_evictions_per_node": 8, "max_evictions_per_run": 16})})


@pytest.fixture(scope="session")
def deployed(example_run, example_settings, tmp_path_factory):
    """The admission policy as the example stack deploys it (see policy_harness)."""
    return policy_harness.deployed_policy(example_run, example_settings,
                                          tmp_path_factory.mktemp)


@pytest.fixture
def logged(monkeypatch) -> dict[str, list[str]]:
    """What the program logs through pulumi.log (warnings and infos), instead of the engine."""
    said: dict[str, list[str]] = {"warn": [], "info": []}
    for level in said:
        monkeypatch.setattr(pulumi.log, level, said[level].append)
    return said
