"""Every file `venv/bin/python -m scripts.generate` writes is what the code renders now: the
settings reference, the air-gapped page's lists, each component's zz_generated_args.py, the
example stack's preview identity and the policy parameters the Rego tests decide with. CI runs
this, so a change that alters any of them without regenerating it fails."""

import functools

import pytest

from scripts import generate
from tests.kit import harness


@functools.cache
def rendered() -> dict:
    return generate.rendered()


@pytest.mark.parametrize("path", generate.generated_paths(),
                         ids=lambda p: str(p.relative_to(harness.ROOT)))
def test_the_generated_file_is_current(path):
    assert path.read_text() == rendered()[path], \
        f"{path.relative_to(harness.ROOT)} is stale: run venv/bin/python -m scripts.generate"
