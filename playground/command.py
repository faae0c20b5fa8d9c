"""`bash tests/run playground`: start a playground, and work with the one running.

  playground [up] [--stack NAME|FILE] [--nodes N] [--gpus-per-node G] [--nodes-per-domain K]
  playground status              each GPU node's GPUs, who holds them, what waits and why
  playground apply FILE...       create the objects of manifests (- reads standard input)
  playground delete FILE...      delete them again

Every command takes --dir, the playground's directory (its kubeconfig), .playground/ by
default."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import requests
import yaml

from components.base.facts import GPU_RESOURCE
from components.base.gpu_count import DeviceView, node_gpus
from components.base.validation import SettingsError
from components.gpu_operator.dra import NVIDIA_DRA_DRIVER
from playground import cluster, summary
from tests.kit import harness, tools
from tests.kit.cluster.controlplane import ApiError, Kube
from tests.kit.cluster.kueue import API_VERSION as KUEUE_API_VERSION

DEFAULT_DIR = harness.ROOT / ".playground"
PREFIX = "gpu-platform:"


def stack_file(stack: str) -> Path:
    """A stack's file: `stack` names one of the project's (Pulumi.<stack>.yaml) or is a path."""
    for path in (Path(stack), harness.ROOT / f"Pulumi.{stack}.yaml"):
        if path.is_file():
            return path
    stacks = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                    for p in harness.ROOT.glob("Pulumi.*.yaml"))
    raise SystemExit(f"--stack {stack!r}: no such stack file; allowed: a stack of the project "
                     f"({', '.join(stacks)}) or the path of a stack file")


def stack_settings(path: Path) -> dict[str, Any]:
    """The stack file's settings, without the `gpu-platform:` prefix."""
    return {key.removeprefix(PREFIX): value
            for key, value in harness.stack_file_settings(path).items() if key.startswith(PREFIX)}


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM stop the playground, also where it was started in the background
    (which leaves SIGINT ignored)."""
    def stop(signum: int, frame: object) -> NoReturn:
        raise KeyboardInterrupt
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, stop)


def _answers(directory: Path) -> bool:
    try:
        cluster.client(directory).request("GET", "/readyz")
        return True
    except (FileNotFoundError, ApiError, requests.ConnectionError):
        return False


def up(args: argparse.Namespace) -> None:
    path = stack_file(args.stack)
    settings_file = stack_settings(path)
    try:
        settings = harness.settings_of(harness.stack_file_config(settings_file))
    except SettingsError as error:
        raise SystemExit(f"{path}: {error}") from None
    directory: Path = args.dir
    if _answers(directory):
        raise SystemExit(f"a playground already runs ({directory / cluster.KUBECONFIG}); "
                         f"stop it with Ctrl-C where it was started")
    _stop_on_signals()
    if failed := tools.build(cluster.tools_for(settings)):
        raise SystemExit("\n".join(failed))
    started = time.monotonic()
    print(f"starting the platform of {path.name} ...", flush=True)
    try:
        with cluster.running(settings_file, directory, nodes=args.nodes,
                             gpus_per_node=args.gpus_per_node,
                             nodes_per_domain=args.nodes_per_domain) as playground:
            print(banner(playground, path, time.monotonic() - started), flush=True)
            print(status(playground.kube), flush=True)
            try:
                watch(playground)
            except KeyboardInterrupt:
                print("stopping ...", flush=True)
    except KeyboardInterrupt:
        pass        # while starting: what had started is stopped all the same
    print("stopped: every process the playground started has ended, and "
          f"{directory} is removed", flush=True)


def watch(playground: cluster.Playground) -> None:
    """Until Ctrl-C: fail if a piece of the platform stops."""
    processes = playground.platform.cp.processes
    while True:
        time.sleep(1)
        for process in processes:
            if not process.running():
                raise SystemExit(f"{process.name} stopped\n{process.tail()}")


def banner(playground: cluster.Playground, path: Path, seconds: float) -> str:
    platform = playground.platform
    settings = platform.settings
    release = platform.cp.kubernetes or tools.kubernetes_version()
    gpus = {node_gpus(n, GPU_RESOURCE, devices(playground.kube))
            for n in playground.kube.list("v1", "Node")} - {0}
    real = ["etcd and kube-apiserver", f"OPA {tools.opa_version()} with the policy, behind the "
            "webhooks", f"{settings.scheduler.name} (kube-scheduler)",
            "kube-controller-manager", "the default scheduler"]
    if platform.kueue is not None:
        real.append(f"Kueue {tools.kueue_version()}")
    return "\n".join([
        f"The platform of {path.name} runs on Kubernetes {release}, started in {seconds:.0f} s.",
        f"  real:       {', '.join(real)}",
        f"  simulated:  {len(playground.nodes)} GPU nodes of {', '.join(map(str, sorted(gpus)))}"
        " GPUs and a CPU node; no container runs, no GPU metrics (docs/users/playground.md)",
        f"  kubeconfig: {playground.kubeconfig.resolve()}",
        "  try:        bash tests/run playground apply docs/users/examples/allowed/pod.yaml",
        "              bash tests/run playground status",
        "Ctrl-C stops it and removes what it started.",
    ])


def status(kube: Kube) -> str:
    topologies = (kube.list(KUEUE_API_VERSION, "Topology")
                  if kube.serves(KUEUE_API_VERSION, "Topology") else [])
    levels = list(dict.fromkeys(level["nodeLabel"] for topology in topologies
                                for level in topology["spec"]["levels"]))
    workloads = (kube.list_everywhere(KUEUE_API_VERSION, "Workload")
                 if kube.serves(KUEUE_API_VERSION, "Workload") else [])
    return summary.render(kube.list("v1", "Node"), kube.list_everywhere("v1", "Pod"), workloads,
                          levels, devices(kube))


def devices(kube: Kube) -> DeviceView | None:
    """On the DRA path (GPUs published as ResourceSlices), where the GPUs are and who holds
    them; None on the device plugin path."""
    slices = (kube.list("resource.k8s.io/v1", "ResourceSlice")
              if kube.serves("resource.k8s.io/v1", "ResourceSlice") else [])
    if not slices:
        return None
    return DeviceView(slices, kube.list_everywhere("resource.k8s.io/v1", "ResourceClaim"),
                      NVIDIA_DRA_DRIVER)


def manifests(files: list[str]) -> list[dict]:
    docs = []
    for name in files:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
        docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


def _named(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta['namespace'] + '/' if meta.get('namespace') else ''}{meta['name']}"


def apply(kube: Kube, docs: list[dict]) -> bool:
    """Create each object, printing what the API server answers; whether all were created."""
    created = True
    for obj in docs:
        if not kube.serves(obj["apiVersion"], obj["kind"]):
            print(f"not served here: {obj['apiVersion']} {obj['kind']} (its controller and CRD "
                  f"are not part of the playground)")
            created = False
            continue
        try:
            kube.create(obj)
            print(f"created {_named(obj)}")
        except ApiError as error:
            print(f"refused {_named(obj)}: {error.message}")
            created = False
        for warning in kube.warnings:
            print(f"  warning: {warning}")
    return created


def delete(kube: Kube, docs: list[dict]) -> None:
    for obj in docs:
        if kube.serves(obj["apiVersion"], obj["kind"]):
            meta = obj["metadata"]
            kube.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"),
                        propagation="Background")
            print(f"deleted {_named(obj)}")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="bash tests/run playground", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command")
    start = commands.add_parser("up", help="start a playground (the default command)")
    start.add_argument("--stack", default=harness.EXAMPLE_STACK_NAME,
                       help="a stack of the project (Pulumi.<stack>.yaml) or a stack file's "
                            "path (default: %(default)s)")
    start.add_argument("--nodes", type=_positive, default=4,
                       help="simulated GPU nodes (default: %(default)s)")
    start.add_argument("--gpus-per-node", type=_positive, default=8,
                       help="GPUs of each (default: %(default)s)")
    start.add_argument("--nodes-per-domain", type=_positive, default=2,
                       help="with a topology (teams.topology), nodes in each domain of its "
                            "lowest level above the node; each level above holds two of the "
                            "level below (default: %(default)s)")
    commands.add_parser("status", help="each GPU node's GPUs, who holds them, what waits")
    for name, what in (("apply", "create the objects of manifests"),
                       ("delete", "delete the objects of manifests")):
        command = commands.add_parser(name, help=what)
        command.add_argument("files", nargs="+", help="manifest files (-: standard input)")
    for command in commands.choices.values():
        command.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                             help="the playground's directory (default: .playground/)")
    return top


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["up", *argv]
    args = parser().parse_args(argv)
    if args.command == "up":
        up(args)
        return
    try:
        kube = cluster.client(args.dir)
    except FileNotFoundError as error:
        raise SystemExit(str(error)) from None
    if args.command == "status":
        print(status(kube))
    elif args.command == "apply":
        sys.exit(0 if apply(kube, manifests(args.files)) else 1)
    else:
        delete(kube, manifests(args.files))
