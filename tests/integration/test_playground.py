"""The playground as the tour (docs/users/playground.md) runs it: `python -m playground` started
on the example stack (and on it moved to the DRA path), the users' examples applied with its own
command, their outcomes as the tour shows them, and Ctrl-C leaving no process and no file
behind.

Marked serial: it times the start, which the tour promises takes under a minute."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from components.platform.settings import ClusterSettings
from components.preview.cluster import ClusterReader
from playground import cluster
from tests.kit import harness, tools
from tests.kit.cluster.controlplane import Kube, wait_until

pytestmark = pytest.mark.serial

EXAMPLES = harness.ROOT / "docs" / "users" / "examples"
STARTED = re.compile(r"started in (\d+) s\.")
START_SECONDS = 60


@dataclass
class Running:
    process: subprocess.Popen
    directory: Path
    output: list[str]
    started_seconds: int
    descendants: set[int]

    @property
    def kube(self) -> Kube:
        return cluster.client(self.directory)


def playground(*args: str, stdin: str | None = None,
               directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "playground", *args, "--dir", str(directory)],
                          cwd=harness.ROOT, input=stdin, capture_output=True, text=True,
                          timeout=60)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (its children started their own sessions, so this
    follows parents, not groups)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue        # ended meanwhile
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def dra_stack(path: Path) -> Path:
    """The example stack on the DRA path (and without compaction, which that path refuses)."""
    stack = yaml.safe_load(harness.EXAMPLE_STACK.read_text())
    config = stack["config"]
    config["gpu-platform:kubernetesVersion"] = tools.DRA_KUBERNETES_VERSION
    config["gpu-platform:gpuOperator"]["gpuPath"] = "dra"
    config["gpu-platform:compaction"]["enabled"] = False
    path.write_text(yaml.safe_dump(stack))
    return path


@pytest.fixture(scope="module", params=["devicePlugin", "dra"])
def running(request, tmp_path_factory) -> Iterator[Running]:
    """The example stack's playground; on the DRA path, the same stack with its GPUs published
    as ResourceSlices: the tour behaves the same on both."""
    work = tmp_path_factory.mktemp("playground")
    directory = work / "state"
    stack = (["--stack", str(dra_stack(work / "Pulumi.dra.yaml"))]
             if request.param == "dra" else [])
    process = subprocess.Popen([sys.executable, "-m", "playground", *stack,
                                "--dir", str(directory)],
                               cwd=harness.ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line.rstrip())
        if line.startswith("Ctrl-C stops it"):
            break
    else:
        pytest.fail("the playground ended before it was up:\n" + "\n".join(output))
    started = next(int(m[1]) for line in output if (m := STARTED.search(line)))
    run = Running(process, directory, output, started, descendants(process.pid))
    try:
        yield run
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def expected_refusal(path: Path) -> str:
    """The refusal the example's first line promises."""
    expect = re.fullmatch(r"# expect: refused: (.+)", path.read_text().splitlines()[0])
    assert expect, f"{path} does not say which refusal it gets"
    return expect[1]


def node_of(kube: Kube, namespace: str, name_prefix: str) -> list[str]:
    return [p["spec"].get("nodeName") for p in kube.list("v1", "Pod", namespace)
            if p["metadata"]["name"].startswith(name_prefix)
            and p["status"].get("phase") == "Running"]


def test_it_starts_within_a_minute_and_says_how_to_reach_it(running):
    assert running.started_seconds < START_SECONDS, running.output
    assert f"kubeconfig: {running.directory.resolve() / cluster.KUBECONFIG}" in \
        "\n".join(running.output)
    assert running.kube.request("GET", "/readyz") == "ok"
    # The kubeconfig is one a stack could name: the program's own reader reaches the cluster
    # through its context, as `pulumi preview` would.
    kubeconfig = running.directory / cluster.KUBECONFIG
    with ClusterReader(ClusterSettings(context=cluster.CONTEXT,
                                       kubeconfig=str(kubeconfig))) as reader:
        nodes = {n["metadata"]["name"] for n in reader.items("/api/v1/nodes")}
    assert nodes == {"cpu-node-1", "gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"}


def test_allowed_examples_are_packed_onto_one_node(running):
    kube, directory = running.kube, running.directory
    first = playground("apply", str(EXAMPLES / "allowed" / "pod.yaml"), directory=directory)
    assert first.returncode == 0 and first.stdout == "created Pod team-a/train-0\n", first
    node = wait_until(lambda: (node_of(kube, "team-a", "train-0") or [None])[0],
                      "train-0 to run")
    job = playground("apply", str(EXAMPLES / "allowed" / "job.yaml"), directory=directory)
    assert job.stdout == "created Job team-a/finetune\n", job
    assert wait_until(lambda: node_of(kube, "team-a", "finetune-"), "finetune to run") == [node]
    status = playground("status", directory=directory).stdout
    assert re.search(rf"{node} +6/8 GPUs in use, 2 free\n    team-a/finetune-\w+: 4 GPUs "
                     rf"\(Job finetune\)\n    team-a/train-0: 2 GPUs\n", status), status


@pytest.mark.parametrize("example", ["default-scheduler.yaml", "node-name.yaml"])
def test_refused_examples_are_refused_with_their_reason(running, example):
    path = EXAMPLES / "refused" / example
    refused = playground("apply", str(path), directory=running.directory)
    assert refused.returncode == 1
    assert refused.stdout.startswith("refused Pod team-a/")
    assert expected_refusal(path) in refused.stdout


def test_a_teams_gang_waits_for_quota_and_lands_whole_when_it_frees(running):
    kube, directory = running.kube, running.directory
    job = EXAMPLES / "queued" / "job.yaml"
    assert playground("apply", str(job), str(EXAMPLES / "queued" / "pod.yaml"),
                      directory=directory).returncode == 0
    wait_until(lambda: len(node_of(kube, "research", "train-resnet-")) == 2,
               "train-resnet's two pods to run")
    wait_until(lambda: node_of(kube, "vision", "notebook-0"), "vision's notebook to run")
    second = job.read_text().replace("name: train-resnet", "name: train-resnet-2")
    assert playground("apply", "-", stdin=second, directory=directory).stdout == \
        "created Job research/train-resnet-2\n"
    # research's quota (10) and what it may borrow of vision's (6, the notebook holds 1) hold
    # 8 + 8 GPUs but one.
    wait_until(lambda: "(Job train-resnet-2): waits for quota: couldn't assign flavors to pod "
               "set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, 1 more "
               "needed" in playground("status", directory=directory).stdout,
               "train-resnet-2 to wait for quota", timeout=20)
    assert node_of(kube, "research", "train-resnet-2-") == []
    assert playground("delete", str(job), directory=directory).stdout == \
        "deleted Job research/train-resnet\n"
    nodes = wait_until(lambda: (found := node_of(kube, "research", "train-resnet-2-"))
                       and len(found) == 2 and found, "train-resnet-2's two pods to run",
                       timeout=30)
    assert len(set(nodes)) == 1, f"a gang of 4 + 4 GPUs is packed on one free node: {nodes}"


def test_ctrl_c_stops_everything_it_started(running):
    assert running.descendants, "the playground runs its processes as its children"
    started = time.monotonic()
    running.process.send_signal(signal.SIGINT)
    assert running.process.wait(timeout=60) == 0
    assert running.process.stdout is not None
    rest = running.process.stdout.read()
    assert "stopped: every process the playground started has ended" in rest, rest
    assert [pid for pid in running.descendants if alive(pid)] == []
    assert not running.directory.exists()
    print(f"stopped in {time.monotonic() - started:.1f} s")
