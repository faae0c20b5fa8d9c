"""The control-plane fixture itself: starts in seconds, serves the example stack's Kubernetes
version, and leaves no process or directory behind."""

import os
import time

from components.platform.settings import ClusterSettings
from components.preview import cluster as stack_cluster
from tests.kit import tools
from tests.kit.cluster.controlplane import ControlPlane


def test_starts_quickly_serves_the_stack_version_and_leaves_nothing_behind():
    started = time.monotonic()
    cp = ControlPlane().start()
    startup = time.monotonic() - started
    try:
        version = cp.admin.request("GET", "/version")
        pids = [p.pid for p in cp.processes]
        directory = cp.dir
        print(f"\ncontrol plane ready in {startup:.1f}s, serving {version['gitVersion']}")
    finally:
        cp.stop()
    assert version["gitVersion"] == f"v{tools.kubernetes_version()}"
    assert startup < 30
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"process {pid} still running after stop()"
    assert not directory.exists()


def test_a_preview_reads_the_clusters_version_and_warns_on_skew(control_plane,
                                                                 example_settings):
    """What `pulumi preview` checks, against the real API server, found through a kubeconfig
    context as the stack names it (the version read anonymously)."""
    settings = example_settings.model_copy(update={"cluster": ClusterSettings(
        context="test", kubeconfig=str(control_plane.kubeconfig("preview")))})
    assert stack_cluster.server_version(settings.cluster) == f"v{tools.kubernetes_version()}"
    assert stack_cluster.preview_warnings(settings) == []
    major, minor, _ = tools.kubernetes_version().split(".")
    behind = settings.model_copy(update={"kubernetes_version": f"{major}.{int(minor) - 1}.0"})
    [warning] = stack_cluster.preview_warnings(behind)
    assert "one minor version ahead" in warning
