"""The platform's runs that ship Python modules in their ConfigMap (reclaim, reservation,
remediation): the ConfigMap's items put each module at its import path, and the CronJob's or
Deployment's command starts there with the standard library only: none of the program's
packages, nothing installed."""

import json
import subprocess
import sys

import pytest

from components import gpu_reclaim, gpu_remediation, gpu_reservation
from components.platform.settings import StackSettings
from components.platform.wiring import component_inputs
from tests.kit.cluster.declared_objects import find
from tests.kit.stacks import with_changes

RUNS = {
    "gpu-reclaim": (lambda inputs: gpu_reclaim.reclaim_objects(inputs.reclaim),
                    {"reclaim": {"enabled": True, "namespaces": ["ml"]}}, "One idle-GPU"),
    "gpu-reservation": (lambda inputs: gpu_reservation.reservation_objects(inputs.reservation),
                        {"reservation": {"enabled": True}}, "One reservation run"),
    "gpu-remediation": (lambda inputs: gpu_remediation.remediation_objects(inputs.remediation),
                        {"remediation": {"mode": "drain"}}, "Fault remediation"),
}


def pod_template(objects: list[dict], name: str) -> dict:
    """The pod template of the run's CronJob or Deployment."""
    workload = next(o for o in objects if o["kind"] in ("CronJob", "Deployment")
                    and o["metadata"]["name"] == name)
    spec = workload["spec"]
    return (spec["jobTemplate"]["spec"] if workload["kind"] == "CronJob" else spec)["template"]


@pytest.mark.parametrize("name", list(RUNS))
def test_the_run_starts_from_the_config_map_alone(name, tmp_path):
    objects_of, changes, help_text = RUNS[name]
    settings = StackSettings.model_validate(with_changes(**changes))
    objects = objects_of(component_inputs(settings))
    config_map = find(objects, "ConfigMap", name)
    pod = pod_template(objects, name)["spec"]
    [mount] = pod["containers"][0]["volumeMounts"]
    for item in pod["volumes"][0]["configMap"]["items"]:
        path = tmp_path / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_map["data"][item["key"]])
    container = pod["containers"][0]
    env = {e["name"]: e["value"].replace(mount["mountPath"], str(tmp_path))
           for e in container["env"]}
    run = subprocess.run([sys.executable, "-S", *container["command"][1:], "--help"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert help_text in run.stdout
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["controller"].startswith("gpu-platform.io/")
