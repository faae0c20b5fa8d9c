"""The control-plane fixture itself: starts in seconds, serves the example stack's Kubernetes
version, and leaves no process or directory behind."""

import os
import time

import tools
from controlplane import ControlPlane


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
