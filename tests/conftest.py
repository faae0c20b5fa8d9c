import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import harness  # noqa: E402
import tools  # noqa: E402


@pytest.fixture(scope="session")
def opa_bin() -> Path:
    return tools.opa()


@pytest.fixture(scope="session")
def example_run() -> harness.Recording:
    """The example stack (Pulumi.dev.yaml) run once under mocks."""
    return harness.run_program()


@pytest.fixture(scope="session")
def example_settings():
    return harness.example_settings()
