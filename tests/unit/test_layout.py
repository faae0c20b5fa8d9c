"""The code's layout holds what docs/concepts/architecture.md promises: one package per concern
under components/, meeting the others only through args (GpuPlatform wires them), shared types
and facts below them all in components/base, and the in-cluster planner apart; and no
hand-written file longer than a reader can hold."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit import harness

COMPONENTS = harness.ROOT / "components"
# The packages of one concern each; base is below them all, platform wires them together, and
# preview reads the stack's cluster before anything is declared.
CONCERNS = sorted(p.name for p in COMPONENTS.iterdir() if (p / "__init__.py").exists()
                  and p.name not in ("base", "platform", "preview"))


def imported_packages(path: Path) -> set[str]:
    """The packages under components/ that a module imports (relative imports resolved)."""
    module = path.relative_to(harness.ROOT).with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(module[:len(module) - node.level])
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [target] if node.module else [[*target, a.name] for a in node.names]
            else:
                names = [(node.module or "").split(".")]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        else:
            continue
        found |= {name[1] for name in names if len(name) > 1 and name[0] == "components"}
    return found


def test_every_concern_is_registered_once():
    """A package of a concern is assembled (served, listed for mirrors, drawn) only when its
    descriptor is registered: one left out would be missing from all of those at once."""
    from components.registry import DESCRIPTORS

    registered = [descriptor.package for descriptor in DESCRIPTORS]
    assert sorted(registered) == CONCERNS
    for descriptor in DESCRIPTORS:
        assert descriptor.component.__module__ == f"components.{descriptor.package}.component"


@pytest.mark.parametrize("package", CONCERNS)
def test_a_component_imports_no_other_component(package):
    """What one needs from another comes through its args; shared types and facts are in
    components/base."""
    for path in sorted((COMPONENTS / package).rglob("*.py")):
        others = imported_packages(path) - {package, "base"}
        assert not others, f"{path.relative_to(harness.ROOT)} imports components.{others}"


def test_the_composition_reads_no_cluster():
    """Declaring the platform needs no cluster: what reads it at preview is apart, in preview/,
    and only the program (components/program.py) runs both."""
    for path in sorted((COMPONENTS / "platform").rglob("*.py")):
        assert "preview" not in imported_packages(path), path.relative_to(harness.ROOT)


def test_base_imports_no_component():
    for path in sorted((COMPONENTS / "base").rglob("*.py")):
        assert imported_packages(path) <= {"base"}, path.relative_to(harness.ROOT)


def test_the_in_cluster_planner_needs_nothing_but_the_standard_library():
    planner = COMPONENTS / "gpu_compaction" / "planner" / "compaction_plan.py"
    imported = set()
    for node in ast.walk(ast.parse(planner.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, "the planner runs alone, as one file"
            imported.add((node.module or "").split(".")[0])
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported


# A file a reader can hold at once: past this, split it by what its parts are about.
LONGEST = 600


def hand_written() -> list[Path]:
    """Every tracked source, test, policy and doc file that no command writes."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=harness.ROOT, capture_output=True, text=True, check=True)
    paths = [harness.ROOT / line for line in tracked.stdout.splitlines()
             if line.endswith((".py", ".rego", ".md", ".ts", ".sh", ".yaml"))]
    return [path for path in paths if path.exists()
            and not re.search(r"(Generated|Written) by", path.read_text()[:1000])]


def test_no_hand_written_file_is_longer_than_a_reader_can_hold():
    long = {str(path.relative_to(harness.ROOT)): n for path in hand_written()
            if (n := len(path.read_text().splitlines())) > LONGEST}
    assert not long, f"over {LONGEST} lines: {long}"


def descriptions(path: Path) -> list[tuple[str, int]]:
    """Each description written in a module: the docstring of a settings or inputs model (a
    class with fields), and each literal `description=` of a field, as one paragraph."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and (doc := ast.get_docstring(node)) and any(
                isinstance(item, ast.AnnAssign) for item in node.body):
            found.append((" ".join(doc.split()), node.lineno))
        elif (isinstance(node, ast.keyword) and node.arg == "description"
              and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            found.append((" ".join(node.value.value.split()), node.lineno))
    return found


def test_every_description_is_written_once():
    """A setting's or input's description exists in one place; every other field that means
    the same takes it from there (base.model.section, the field helpers of base)."""
    where: dict[str, list[str]] = {}
    for path in sorted(COMPONENTS.rglob("*.py")):
        if path.name.startswith("zz_generated"):
            continue
        for text, line in descriptions(path):
            where.setdefault(text, []).append(f"{path.relative_to(harness.ROOT)}:{line}")
    copies = {text: places for text, places in where.items() if len(places) > 1}
    assert not copies, "written more than once:\n" + "\n".join(
        f"  {text[:70]}...: {', '.join(places)}" for text, places in copies.items())
