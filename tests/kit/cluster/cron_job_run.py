"""One run of a declared CronJob's or Deployment's pod whose container runs Python modules from
its ConfigMap (reclaim's, reservation's, remediation's), as the kubelet would run it: the
modules at the ConfigMap's paths, the container's command and environment, the
ServiceAccount's token; no site-packages, started where the modules are, so only what the
ConfigMap ships is imported."""

from __future__ import annotations

import subprocess
import sys

from tests.kit.cluster.controlplane import ControlPlane
from tests.kit.cluster.declared_objects import find
from tests.kit.cluster.descheduler import LocalContainer


def cron_job_run(cp: ControlPlane, objects: list[dict], name: str, namespace: str,
                 container: str, *args: str) -> str:
    """What the run printed; `args` are given after the container's own. `name` is a CronJob's
    or, where no CronJob has it, a Deployment's."""
    workload = next((o for o in objects if o["kind"] == "CronJob"
                     and o["metadata"]["name"] == name), None)
    if workload is not None:
        workload = {"metadata": workload["metadata"],
                    "spec": workload["spec"]["jobTemplate"]["spec"]}
    else:
        workload = find(objects, "Deployment", name)
    local = LocalContainer(cp, objects, workload, container, ports={})
    token = cp.write(f"volumes/{name}/token", cp.service_account_token(namespace, name))
    command = local.args()
    assert command[0] == "python3"
    env = local.env()
    run = subprocess.run([sys.executable, "-S", *command[1:], f"--server={cp.server}",
                          f"--token-file={token}", f"--ca-file={cp.ca_file}", *args],
                         cwd=env["PYTHONPATH"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, f"the {container} run failed\n{run.stdout}\n{run.stderr}"
    assert not run.stderr, run.stderr
    return run.stdout
