"""A playground's cluster: the platform of a stack, as the integration suite runs it
(tests/kit/cluster/running_platform.py), with simulated GPU nodes and the namespaces the users'
examples use; reached through a kubeconfig in the playground's directory."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.platform.settings import StackSettings
from playground.nodes import SimulatedNode, simulated_nodes
from tests.kit import harness, tools
from tests.kit.cluster.controlplane import ControlPlane, Kube, wait_until
from tests.kit.cluster.dra_driver import driver_user, operator_grants
from tests.kit.cluster.kueue import API_VERSION as KUEUE_API_VERSION
from tests.kit.cluster.kueue import is_active
from tests.kit.cluster.nodes_and_pods import (
    create_dra_gpu_node,
    create_gpu_node,
    ensure_namespace,
)
from tests.kit.cluster.running_platform import RunningPlatform, run_platform

EXAMPLES = harness.ROOT / "docs" / "users" / "examples"
KUBECONFIG = "kubeconfig"
CONTEXT = "gpu-platform-playground"
# The webhooks (OPA's, Kueue's) are called at their Services' ready endpoints, as on a cluster.
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


def kubernetes_release(settings: StackSettings) -> str | None:
    """The control plane's release: the DRA path's for a DRA stack, else the example stack's
    (None). These are the releases the integration suite runs."""
    return tools.DRA_KUBERNETES_VERSION if settings.gpu_operator.gpu_path == "dra" else None


def example_namespaces() -> set[str]:
    """The namespaces the users' examples are written for."""
    return {doc["metadata"]["namespace"] for path in EXAMPLES.rglob("*.yaml")
            for doc in yaml.safe_load_all(path.read_text())
            if doc and doc.get("metadata", {}).get("namespace")}


def tools_for(settings: StackSettings) -> list:
    """The tools a playground of `settings` runs, to be built (once) before it starts."""
    release = kubernetes_release(settings)
    control_plane = [tools.dra_control_plane] if release else [
        tools.kube_apiserver, tools.kube_scheduler, tools.kube_controller_manager]
    return [tools.etcd, *control_plane, tools.opa,
            *([tools.kueue] if settings.teams.enabled else [])]


@dataclass
class Playground:
    platform: RunningPlatform
    nodes: list[SimulatedNode]
    kubeconfig: Path

    @property
    def kube(self) -> Kube:
        return self.platform.kube


@contextmanager
def running(stack_settings: dict[str, Any], directory: Path, *, nodes: int,
            gpus_per_node: int, nodes_per_domain: int) -> Iterator[Playground]:
    """The playground of `stack_settings` (a stack's settings without the `gpu-platform:`
    prefix), its kubeconfig and credentials in `directory`; everything it started is stopped,
    and `directory` removed, when the context ends."""
    settings = harness.settings_of(harness.stack_file_config(stack_settings))
    dra = settings.gpu_operator.gpu_path == "dra"
    with ExitStack() as stack:
        cp = ControlPlane(apiserver_args=APISERVER_ARGS,
                          kubernetes=kubernetes_release(settings)).start()
        stack.callback(cp.stop)
        # On the DRA path: the GPU Operator's DeviceClass and its driver's rights, and the
        # controller that makes the claims of pods' claim templates.
        platform = run_platform(stack, cp, stack_settings,
                                before_pods=operator_grants(cp) if dra else lambda _: None,
                                controllers=("resourceclaim-controller",) if dra else ())
        kube = cp.admin
        for namespace in sorted(example_namespaces() | set(settings.teams.team_namespaces)
                                if settings.teams.enabled else example_namespaces()):
            ensure_namespace(kube, namespace)
        simulated = simulated_nodes(settings, nodes, nodes_per_domain)
        driver = cp.impersonating(driver_user(settings))
        for node in simulated:
            if dra:
                create_dra_gpu_node(kube, settings, node.name, gpus_per_node, driver,
                                    labels=node.labels)
            else:
                create_gpu_node(kube, settings, node.name, gpus_per_node, labels=node.labels)
        if settings.teams.enabled:
            wait_until(lambda: all_queues_active(kube), "the teams' ClusterQueues to be active",
                       timeout=60)
        stack.callback(shutil.rmtree, directory, ignore_errors=True)
        yield Playground(platform, simulated, write_kubeconfig(cp, directory))


def all_queues_active(kube: Kube) -> bool:
    return all(is_active(queue) for queue in kube.list(KUEUE_API_VERSION, "ClusterQueue"))


def write_kubeconfig(cp: ControlPlane, directory: Path) -> Path:
    """A kubeconfig for the playground's administrator (a member of system:masters, as a
    cluster's admin is: admission still decides every object), its certificates beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {"ca.crt": cp.ca_file, "admin.crt": cp.admin_cert[0], "admin.key": cp.admin_cert[1]}
    for name, source in files.items():
        shutil.copyfile(source, directory / name)
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT,
        "clusters": [{"name": CONTEXT, "cluster": {
            "server": cp.server, "certificate-authority": str(directory.resolve() / "ca.crt")}}],
        "users": [{"name": "playground-admin", "user": {
            "client-certificate": str(directory.resolve() / "admin.crt"),
            "client-key": str(directory.resolve() / "admin.key")}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT,
                                                    "user": "playground-admin"}}],
    }
    path = directory / KUBECONFIG
    path.write_text(yaml.safe_dump(config))
    return path


def client(directory: Path) -> Kube:
    """A client of the playground whose kubeconfig is in `directory`."""
    path = directory / KUBECONFIG
    if not path.exists():
        raise FileNotFoundError(f"no playground runs with its files in {directory} "
                                f"(start one with `bash tests/run playground`)")
    config = yaml.safe_load(path.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    return Kube(cluster["server"], Path(cluster["certificate-authority"]),
                cert=(Path(user["client-certificate"]), Path(user["client-key"])))
