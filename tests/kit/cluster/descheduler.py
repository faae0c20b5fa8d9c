"""The descheduler as the declared compaction CronJob runs it: one run of the CronJob's pod, its
containers started as local processes from the declared objects, the way the kubelet would start
them (LocalContainer)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from components import gpu_compaction
from components.platform.settings import StackSettings
from tests.kit import tools
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.declared_objects import find


def descheduler_command(args: list[str], kubeconfig) -> list[str]:
    """The descheduler built from its module, with `args`, as a client of `kubeconfig`. Its
    health port (10258 in the pod) is not served here, so runs cannot collide."""
    return [str(tools.descheduler()), *args, f"--kubeconfig={kubeconfig}", "--secure-port=0"]


def compaction_run(cp: ControlPlane, settings: StackSettings, objects: list[dict],
                   policy: dict | None = None) -> str:
    """One run of the declared compaction CronJob's pod, as the kubelet would run it: the plan
    init container (when declared) with Python, then the descheduler container, each with its
    flags, the declared ConfigMap's files (its policy replaced by `policy` if given) and the
    ServiceAccount's credentials. Waits until the run ends; returns the plan's and the
    descheduler's logs."""
    compaction = settings.compaction
    cron_job = find(objects, "CronJob", compaction.name)
    job = {"metadata": cron_job["metadata"], "spec": cron_job["spec"]["jobTemplate"]["spec"]}
    token = cp.service_account_token(compaction.namespace, compaction.name)
    containers = [LocalContainer(cp, objects, job, c["name"], ports={})
                  for c in job["spec"]["template"]["spec"].get("initContainers", [])]
    descheduler = LocalContainer(cp, objects, job, "descheduler", ports={})
    if policy is not None:
        for container in (*containers, descheduler):
            policy_dir = container.mounts.get(gpu_compaction.POLICY_DIR)
            if policy_dir:
                Path(policy_dir, gpu_compaction.POLICY_FILE).write_text(json.dumps(policy))
    log = ""
    token_file = cp.write(f"volumes/{compaction.name}/token", token)
    for plan in containers:
        run = subprocess.run([sys.executable, *plan.args()[1:], f"--server={cp.server}",
                              f"--token-file={token_file}", f"--ca-file={cp.ca_file}"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"the compaction plan failed\n{run.stderr}"
        log += run.stdout
    process = cp.start_process(f"descheduler-{len(cp.processes)}", descheduler_command(
        descheduler.args()[1:], cp.kubeconfig(compaction.name, token=token)))
    wait_until(lambda: not process.running(), "the compaction run to end", timeout=120,
               explain=process.tail)
    assert process.exit_code == 0, f"the compaction run failed\n{process.tail(60)}"
    return log + process.log.read_text(errors="replace")


# --- running a declared container on this machine -------------------------------------------

class LocalContainer:
    """A container of a declared Deployment, run as a local process the way the kubelet would
    start it: its Secret and ConfigMap volumes written to directories, its flags given with the
    mount paths pointing there and its listening ports moved to free loopback ports."""

    def __init__(self, cp: ControlPlane, objects: list[dict], deployment: dict, container: str,
                 ports: dict[int, int]):
        pod_spec = deployment["spec"]["template"]["spec"]
        self.spec = next(c for c in pod_spec.get("initContainers", []) + pod_spec["containers"]
                         if c["name"] == container)
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        namespace = deployment["metadata"]["namespace"]
        self.mounts: dict[str, str] = {}
        for mount in self.spec.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "emptyDir" in volume:    # shared by the pod's containers, as in a pod
                local = cp.dir / "volumes" / deployment["metadata"]["name"] / mount["name"]
                local.mkdir(parents=True, exist_ok=True)
            else:
                local = cp.dir / "volumes" / container / mount["name"]
                for key, text in _volume_files(objects, volume, namespace).items():
                    cp.write(str((local / key).relative_to(cp.dir)), text)
            self.mounts[mount["mountPath"]] = str(local)
        self.ports = ports

    def localize(self, arg: str) -> str:
        for mount_path, local in self.mounts.items():
            arg = arg.replace(mount_path + "/", local + "/").replace(
                ":" + mount_path, ":" + local)
            if arg == mount_path:
                arg = local
        for port, local_port in self.ports.items():
            for host in ("0.0.0.0", "127.0.0.1"):
                arg = arg.replace(f"{host}:{port}", f"127.0.0.1:{local_port}")
        return arg

    def args(self) -> list[str]:
        return [self.localize(a) for a in self.spec.get("command", []) + self.spec.get("args", [])]

    def env(self) -> dict[str, str]:
        return {e["name"]: self.localize(e["value"]) for e in self.spec.get("env", [])}


def _volume_files(objects: list[dict], volume: dict, namespace: str) -> dict[str, str]:
    if "secret" in volume:
        source = volume["secret"]
        obj = find(objects, "Secret", source["secretName"])
        data = dict(obj.get("stringData", {}))
        data |= {k: base64.b64decode(v).decode() for k, v in obj.get("data", {}).items()}
    elif "configMap" in volume:
        source = volume["configMap"]
        obj = find(objects, "ConfigMap", source["name"])
        data = dict(obj.get("data", {}))
    else:
        raise AssertionError(f"volume {volume['name']}: only Secret and ConfigMap volumes can be "
                             f"run locally")
    assert obj["metadata"]["namespace"] == namespace
    items = source.get("items")
    return {i["path"]: data[i["key"]] for i in items} if items else data
