"""Fixtures of the integration suite: a fresh local control plane per test module, and the
example stack's declared objects with real certificates."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster  # noqa: E402
from controlplane import ControlPlane  # noqa: E402


@pytest.fixture(scope="module")
def control_plane():
    cp = ControlPlane().start()
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def certificates(example_settings) -> cluster.TestCertificates:
    return cluster.TestCertificates(example_settings)


@pytest.fixture(scope="session")
def declared(example_run, certificates) -> cluster.Declared:
    return cluster.declared(example_run, certificates)
