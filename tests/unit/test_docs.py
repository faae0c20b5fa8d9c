"""The docs stay true to the code: generated pages are what their sources render, every relative
link and anchor resolves, every page is reachable from README.md, and the minimal stack file is
what the quick start's commands write and deploys the platform."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from benchmark import report
from benchmark.experiments import EXPERIMENTS
from components.binpack_scheduler import preemption
from components.binpack_scheduler.sizing import (
    DRA_FLEET_CLIENT_RATE,
    DRA_FLEET_GPU_NODES,
    DRA_FLEET_SHARE,
    SIZING_PAGE,
)
from components.platform.settings import StackSettings
from scripts import generate, reference
from tests.kit import harness
from tests.unit.test_settings import setting_paths

ROOT = harness.ROOT
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MINIMAL_STACK = DOCS / "operators" / "examples" / "Pulumi.minimal.yaml"
README_MAX_LINES = 200


# --- generated pages ------------------------------------------------------------------------

def test_settings_reference_names_every_setting():
    page = reference.SETTINGS_PAGE.read_text()
    missing = [path for path in setting_paths(StackSettings) if f"| `{path}` |" not in page]
    assert not missing, f"docs/operators/settings.md lacks {missing}"


def test_every_setting_has_a_description():
    page = reference.render_settings()
    undescribed = [line.split("|")[1].strip() for line in page.splitlines()
                   if line.startswith("| `") and line.rstrip().endswith("|  |")]
    assert not undescribed, f"settings without a Field description: {undescribed}"


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda experiment: experiment.name)
def test_benchmark_pages_are_current(experiment):
    """Each experiment's page is what its kept rows render: a change to a page's renderer or
    a row kept by hand shows here."""
    rendered = experiment.render(report.kept(report.RESULTS, experiment.results))
    assert (report.DOCS / experiment.page).read_text() == rendered, \
        f"docs/benchmarks/{experiment.page} is stale: run bash tests/run benchmark " \
        f"{experiment.report_command}"


def test_every_kept_results_file_is_an_experiments():
    kept = {path.name for path in report.RESULTS.glob("*.jsonl")}
    assert kept == {experiment.results for experiment in EXPERIMENTS}


def test_benchmark_report_needs_no_plotting_library():
    assert "matplotlib" not in (ROOT / "benchmark" / "report.py").read_text()


# --- links ----------------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(text: str) -> Iterable[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation other than '-' and '_'
    dropped, spaces turned into '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)     # a link: its text
    text = CODE_SPAN.sub(lambda m: m[2], text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """Every link target of a Markdown text, outside code."""
    targets = []
    for line in prose_lines(text):
        targets += LINK.findall(CODE_SPAN.sub("", line))
    return targets


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of `page` whose file, or whose #anchor in a Markdown file, does not
    exist; each as 'target: why'."""
    problems = []
    for target in links(page.read_text()):
        if not is_relative(target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{target}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {resolved.name}")
        elif anchor and resolved.suffix != ".md":
            problems.append(f"{target}: an anchor into a file that is not Markdown")
    return problems


def linked_pages(page: Path) -> set[Path]:
    """The Markdown files `page` links to."""
    found = set()
    for target in links(page.read_text()):
        path_part = target.partition("#")[0]
        if is_relative(target) and path_part:
            resolved = (page.parent / path_part).resolve()
            if resolved.suffix == ".md" and resolved.is_file():
                found.add(resolved)
    return found


def reachable(start: Path) -> set[Path]:
    seen, todo = set(), [start.resolve()]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        todo += linked_pages(page) - seen
    return seen


def doc_pages() -> list[Path]:
    return [README, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md",
            *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    problems = broken_links(page)
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_every_docs_page_is_reachable_from_the_readme():
    found = reachable(README)
    orphans = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if p.resolve()
                     not in found)
    assert not orphans, f"not reachable from README.md by following links: {orphans}"


def test_troubleshooting_contents_name_every_section():
    page = DOCS / "operators" / "troubleshooting.md"
    text = page.read_text()
    sections = {slug(h) for h in re.findall(r"^## (.+)$", text, re.MULTILINE)}
    listed = {target.partition("#")[2] for target in links(text.split("\n## ", 1)[0])}
    assert listed == sections, (sections - listed, listed - sections)


def test_contributing_lists_every_generated_file():
    """Each file that says it is generated (or written by a command) is in CONTRIBUTING's
    table of generated files, with the command that makes it."""
    table = (ROOT / "CONTRIBUTING.md").read_text().split("## Generated docs", 1)[1]
    marked = [path.relative_to(ROOT).as_posix() for path in
              [*ROOT.glob("components/**/*.py"), *DOCS.rglob("*.md"),
               *ROOT.glob("policy/**/*.rego")]
              if re.search(r"^(<!-- |# )?(\"\"\".*\n\n)?(Generated|Written) by",
                           path.read_text()[:1000], re.MULTILINE)
              # a generated part of a hand-written page, anywhere in it
              or path.suffix == ".md" and re.search(r"^<!-- Generated by", path.read_text(),
                                                    re.MULTILINE)]
    assert {"docs/benchmarks/teams.md", "components/teams/zz_generated_args.py",
            "policy/admission/testing/zz_generated_params_test.rego",
            "docs/operators/air-gapped.md"} <= set(marked)
    listed = re.findall(r"`([^`]+)`", table)
    assert [path for path in marked
            if not any(fnmatch.fnmatch(path, pattern) for pattern in listed)] == []


def test_the_package_examples_name_the_example_stacks_kubernetes_version(example_settings):
    pages = [DOCS / "operators" / "component-package.md",
             *(DOCS / "operators" / "examples" / "typescript").glob("*.ts")]
    versions = {version for page in pages
                for version in re.findall(r'kubernetesVersion: "([^"]+)"', page.read_text())}
    assert versions == {example_settings.kubernetes_version}


def test_readme_is_at_most_200_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; details belong in docs/"


def test_link_checker_finds_broken_links_and_anchors(tmp_path):
    """The checks above can fail: a missing file, a missing heading and a page no link reaches
    are each found, and code is not read as links."""
    (tmp_path / "a.md").write_text(
        "# Top\n\n## Día two: `upgrades`, and more\n\n## Top\n\n"
        "[ok](b.md#b-heading) [ok](#top-1) [ok](#día-two-upgrades-and-more) "
        "[missing](nope.md) [bad anchor](b.md#nowhere) [web](https://example.com/x.md)\n\n"
        "```\n[in code](nope-too.md)\n# not a heading\n```\n`[span](nope-three.md)`\n")
    (tmp_path / "b.md").write_text("## B heading\n")
    (tmp_path / "orphan.md").write_text("# Orphan\n")
    problems = broken_links(tmp_path / "a.md", tmp_path)
    assert problems == ["nope.md: no such file", "b.md#nowhere: no heading #nowhere in b.md"]
    assert anchors((tmp_path / "a.md").read_text()) == {"top", "top-1",
                                                        "día-two-upgrades-and-more"}
    assert (tmp_path / "orphan.md").resolve() not in reachable(tmp_path / "a.md")
    assert (tmp_path / "b.md").resolve() in reachable(tmp_path / "a.md")


def test_example_stack_points_to_sections_of_the_settings_reference():
    page_anchors = anchors(reference.SETTINGS_PAGE.read_text())
    pointers = re.findall(r"docs/operators/settings\.md#([\w-]+)", harness.EXAMPLE_STACK
                          .read_text())
    assert pointers, "Pulumi.dev.yaml points to no section of the settings reference"
    assert set(pointers) <= page_anchors, set(pointers) - page_anchors


# --- the minimal stack ----------------------------------------------------------------------

CONFIG_SET = re.compile(r"^pulumi config set (--path )?('[^']+'|\S+) (\S+)")


def config_set_commands(text: str) -> list[tuple[bool, str, str]]:
    """(--path given, key, value) of every `pulumi config set` line in the text's code blocks."""
    commands = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif fenced and (match := CONFIG_SET.match(line.strip())):
            commands.append((bool(match[1]), match[2].strip("'"), match[3]))
    return commands


def pulumi_config_set(config: dict, path: bool, key: str, value: str) -> None:
    """What `pulumi config set [--path] key value` writes into a stack file's `config:` of the
    project gpu-platform: with --path, true/false and integers are stored as such, anything else
    as a string; top-level values are always strings."""
    if not path:
        config[f"gpu-platform:{key}"] = value
        return
    top, *rest = re.findall(r"[^.\[\]]+|\[\d+\]", key)
    parts: list[str | int] = [f"gpu-platform:{top}",
                              *(int(p[1:-1]) if p.startswith("[") else p for p in rest)]
    typed: object = value
    if value in ("true", "false"):
        typed = value == "true"
    elif re.fullmatch(r"-?\d+", value):
        typed = int(value)
    node: dict | list = config
    for part, following in zip(parts, [*parts[1:], None], strict=True):
        if following is None:
            if isinstance(node, list):
                assert isinstance(part, int)
                node.extend([None] * (part + 1 - len(node)))
            node[part] = typed  # type: ignore[index]
            break
        empty: dict | list = [] if isinstance(following, int) else {}
        if isinstance(node, list):
            assert isinstance(part, int)
            node.extend([None] * (part + 1 - len(node)))
            if node[part] is None:
                node[part] = empty
            node = node[part]
        else:
            assert isinstance(part, str)
            node = node.setdefault(part, empty)


def written_by(commands: list[tuple[bool, str, str]]) -> dict:
    config: dict = {}
    for path, key, value in commands:
        pulumi_config_set(config, path, key, value)
    return config


def minimal_stack() -> dict:
    return yaml.safe_load(MINIMAL_STACK.read_text())["config"]


def leaf_paths(value, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in leaf_paths(v, f"{prefix}{k}.")}
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in leaf_paths(v, f"{prefix[:-1]}[{i}].")}
    return {prefix[:-1]}


def test_minimal_stack_is_what_the_install_page_commands_write():
    commands = config_set_commands((DOCS / "operators" / "install.md").read_text())
    assert len(commands) == 3, commands
    assert written_by(commands) == minimal_stack()


def test_readme_quick_start_sets_the_settings_of_the_minimal_stack():
    commands = config_set_commands(README.read_text())
    assert leaf_paths(written_by(commands)) == leaf_paths(minimal_stack())


def test_config_set_is_simulated_as_pulumi_documents_it():
    assert written_by([(True, "names[0]", "a"), (True, "names[1]", "b"),
                       (True, "parent.nested", "value"), (True, "parent.on", "true"),
                       (True, "parent.count", "3"), (False, "version", "1.36")]) == {
        "gpu-platform:names": ["a", "b"],
        "gpu-platform:parent": {"nested": "value", "on": True, "count": 3},
        "gpu-platform:version": "1.36"}


def test_minimal_stack_deploys_the_platform_under_the_mocks(tmp_path):
    """The file as Pulumi's own loader reads it (tests/kit/pulumi_config), next to the project's
    Pulumi.yaml, and the program run with exactly the config that hands the engine."""
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.minimal.yaml").write_text(MINIMAL_STACK.read_text())
    stack = harness.pulumi_stacks(tmp_path)["minimal"]
    assert not stack.warnings and not stack.secret_keys
    assert stack.config == harness.stack_file_config(
        {key.removeprefix("gpu-platform:"): value for key, value in minimal_stack().items()})
    recording = harness.run_program(stack.config)
    types = {r.type for r in recording.registrations}
    assert {"gpu-platform:index:GpuNodes", "gpu-platform:index:GpuOperator",
            "gpu-platform:index:BinpackScheduler", "gpu-platform:index:OpaAdmission",
            "gpu-platform:index:Monitoring"} <= types
    assert "gpu-platform:index:GpuCompaction" not in types
    platform = next(v for k, v in recording.outputs.items() if k.endswith("::gpu-platform"))
    assert platform["gpuNodes"] == minimal_stack()["gpu-platform:gpuNodes"]["names"]
    assert platform["clusterContext"] == minimal_stack()["gpu-platform:cluster"]["context"]


def test_the_monitoring_page_shows_the_example_stack_s_grafana_command(example_run):
    shown = re.search(r'^eval "\$\(pulumi stack output grafanaPortForward\)" +# (.+)$',
                      (DOCS / "operators" / "monitoring.md").read_text(), re.MULTILINE)
    (platform,) = example_run.of_type("gpu-platform:index:GpuPlatform")
    assert shown and shown[1] == example_run.outputs[platform.urn]["grafanaPortForward"]


def _host(reference: str) -> str:
    """The host a chart (`<repository> <chart> <version>`, or `oci://...`) or an image comes
    from; an image without a registry host is Docker Hub's."""
    if "://" in reference:
        return reference.split("://", 1)[1].split("/", 1)[0]
    first = reference.split("/", 1)[0]
    return first if "." in first or ":" in first else "docker.io"


@pytest.mark.parametrize("page", [README, DOCS / "operators" / "install.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_prerequisites_name_where_the_charts_and_the_images_come_from(page):
    """The hosts the prerequisites name: the charts' for the machine that runs `pulumi`, the
    images' for the nodes, each exactly the hosts of the air-gapped page's list."""
    text = " ".join(page.read_text().split("## Prerequisites", 1)[1].split("\n## ", 1)[0]
                    .split())
    found = re.search(r"fetches (?:the Helm charts|them)(.*?); the nodes pull the images(.*?)"
                      r"\.(?: |$)", text)
    assert found, f"{page.name}: no sentence on where the charts and the images come from"
    charts, images = found.groups()
    lists = generate.render_deployable_lists().split("Images, pulled by the nodes", 1)
    hosts = [{_host(reference) for reference in re.findall(r"^\| `([^`]+)` \|", part,
                                                           re.MULTILINE)} for part in lists]
    named = [set(re.findall(r"`([a-z0-9-]+(?:\.[a-z0-9-]+)+)`", part)) for part in (charts,
                                                                                   images)]
    assert named == hosts


def test_the_previews_fleet_advice_is_what_the_sizing_page_advises():
    page, anchor = SIZING_PAGE.split("#")
    text = (ROOT / page).read_text()
    assert anchor in anchors(text)
    qps, burst = DRA_FLEET_CLIENT_RATE
    for advised in (f"scheduler.percentageOfNodesToScore: {DRA_FLEET_SHARE}`",
                    f"`scheduler.clientConnection` qps {qps}, burst {burst}",
                    f"{DRA_FLEET_GPU_NODES:,} GPU nodes"):
        assert advised in text, f"{page} does not advise {advised!r} as the preview does"


def test_the_page_the_dra_preemption_warning_names_says_so():
    page, anchor = preemption.PAGE.split("#")
    text = (ROOT / page).read_text()
    assert anchor in anchors(text)
    section = text.split("## On the DRA path", 1)[1].split("\n## ", 1)[0]
    assert "KEP-5690" in section and "1.37" in section
