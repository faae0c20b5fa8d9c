"""What every example stack renders stays what it was unless a change means it to: a digest of
each registration (its type, name, parent, inputs, dependencies and options, as `pulumi up`
would send them) per example stack, against `tests/fixtures/rendered.txt`. A refactor that
changes no behaviour leaves every digest as it is; a change that means to alter an object
regenerates the file (`venv/bin/python -m tests.unit.test_rendering`), and the diff names every
object it touched."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.kit import harness

SNAPSHOT = harness.FIXTURES / "rendered.txt"
EXAMPLES = harness.ROOT / "docs" / "operators" / "examples"


def example_stacks() -> dict[str, dict[str, str] | None]:
    """Every example stack: Pulumi.dev.yaml (None: its config as Pulumi reads it), and those of
    docs/operators/examples."""
    return {"dev": None, **{
        path.name.removeprefix("Pulumi.").removesuffix(".yaml"):
            harness.stack_file_engine_config(path)
        for path in sorted(EXAMPLES.glob("Pulumi.*.yaml"))}}


def digests(config: dict[str, str] | None) -> dict[str, str]:
    """Each registration's URN, with the digest of all it sends."""
    recording = harness.run_program(config)
    found = {}
    for r in recording.registrations:
        sent = {"type": r.type, "name": r.name, "parent": r.parent, "inputs": r.raw_inputs,
                "dependencies": sorted(r.dependencies), "protect": r.protect,
                "retainOnDelete": r.retain_on_delete, "aliases": list(r.aliases),
                "provider": r.provider, "replaceOnChanges": list(r.replace_on_changes),
                "deleteBeforeReplace": r.delete_before_replace}
        text = json.dumps(sent, sort_keys=True, separators=(",", ":"), default=str)
        found[r.urn] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return found


def rendered() -> str:
    return "".join(f"{stack} {digest} {urn}\n" for stack, config in example_stacks().items()
                   for urn, digest in sorted(digests(config).items()))


def recorded() -> dict[str, dict[str, str]]:
    by_stack: dict[str, dict[str, str]] = {}
    for line in SNAPSHOT.read_text().splitlines():
        stack, digest, urn = line.split(" ", 2)
        by_stack.setdefault(stack, {})[urn] = digest
    return by_stack


@pytest.mark.parametrize("stack", list(example_stacks()))
def test_every_object_of_the_example_stack_renders_as_recorded(stack):
    now, then = digests(example_stacks()[stack]), recorded()[stack]
    changed = sorted(urn for urn in now.keys() & then.keys() if now[urn] != then[urn])
    assert not changed, "rendered differently (regenerate tests/fixtures/rendered.txt if " \
                        "meant):\n" + "\n".join(changed)
    assert sorted(now.keys() - then.keys()) == [] and sorted(then.keys() - now.keys()) == []


if __name__ == "__main__":
    SNAPSHOT.write_text(rendered())
    print(f"wrote {SNAPSHOT.relative_to(harness.ROOT)}")
