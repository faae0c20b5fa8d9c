"""Manifest pieces the components share: the platform's labels, namespaces, the quota of
critical pods, disruption budgets, RBAC rules, ConfigMaps, the restricted security contexts, and
the CronJob of scheduled runs with the container that runs a Python script from a ConfigMap.
Pure functions: settings in, dicts out."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from .facts import KUEUE_API

PART_OF = "gpu-platform"


def labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def selector_labels(name: str, component: str) -> dict[str, str]:
    """The subset of `labels` that is stable for the life of a Deployment (its selector)."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component}


def namespace(name: str, pod_security: str, component: str) -> dict:
    """A namespace of the platform's own, with the Pod Security level its pods need."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                **labels(name, component),
                "pod-security.kubernetes.io/enforce": pod_security,
                "pod-security.kubernetes.io/warn": pod_security,
                "pod-security.kubernetes.io/audit": pod_security,
            },
        },
    }


# The priority of the platform's control pods (binpack scheduler, OPA): GPU pods cannot be
# scheduled or admitted without them, so they must not be preempted by workloads.
CRITICAL_PRIORITY = "system-cluster-critical"
# The priority of the GPU Operator's pods (its chart sets it for the operator, every operand
# and Node Feature Discovery).
NODE_CRITICAL_PRIORITY = "system-node-critical"
# The ResourceQuota of each platform namespace whose pods have one of those priorities.
CRITICAL_PODS_QUOTA = "critical-pods"


def replicas_quota(replicas: int) -> int:
    """Pods of a Deployment's critical priority: every replica twice and one more, for a
    rolling update with pods still terminating."""
    return 2 * replicas + 1


def critical_pods_quota(namespace_: str, component: str, pods: int,
                        priority_classes: Sequence[str] = (CRITICAL_PRIORITY,)) -> dict:
    """A quota that admits up to `pods` of the namespace's pods of the critical priority
    classes. GKE (and any cluster whose ResourceQuota admission limits those classes) refuses
    such pods outside kube-system unless a quota with a matching scope covers them; elsewhere
    it only caps them."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": CRITICAL_PODS_QUOTA, "namespace": namespace_,
                     "labels": labels(CRITICAL_PODS_QUOTA, component)},
        "spec": {
            "hard": {"pods": str(pods)},
            "scopeSelector": {"matchExpressions": [{
                "scopeName": "PriorityClass", "operator": "In",
                "values": list(priority_classes)}]},
        },
    }


def pod_disruption_budget(name: str, namespace_: str, component: str) -> dict:
    """Keep at least one replica through voluntary disruptions such as node drains."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace_, "labels": labels(name, component)},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": selector_labels(name, component)}},
    }


def spread_by_node(name: str, component: str) -> dict:
    """Prefer replicas on different nodes, so that losing one node keeps the service up."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": selector_labels(name, component)},
                },
            }],
        },
    }


READ = ["get", "list", "watch"]


def rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict:
    """One RBAC policy rule."""
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def requeue_rules(workload_owners: dict[str, str]) -> list[dict]:
    """What putting a team's workload back in its queue takes (base/kueue_requeue.py): take a
    Kueue Workload off its queue and put it back (`spec.active`), and read the kinds Kueue
    admits (`group/Kind` -> resource), to follow a pod's controllers to its Workload."""
    rules = [rule([KUEUE_API.partition("/")[0]], ["workloads"], ["get", "list", "patch"])]
    by_group: dict[str, list[str]] = {}
    for owner, resource in sorted(workload_owners.items()):
        by_group.setdefault(owner.partition("/")[0], []).append(resource)
    return rules + [rule([group], resources, ["get"]) for group, resources in by_group.items()]


def role_binding(kind: str, name: str, role_kind: str, role: str, account: dict,
                 meta_labels: dict, namespace_: str | None = None) -> dict:
    """A (Cluster)RoleBinding of `role` to one ServiceAccount."""
    metadata = {"name": name, "labels": meta_labels}
    if namespace_:
        metadata["namespace"] = namespace_
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [account]}


def account_with_cluster_role(name: str, namespace_: str, component: str,
                              rules: list[dict]) -> list[dict]:
    """A ServiceAccount `name` and a ClusterRole of `rules` bound to it, all named `name`."""
    meta_labels = labels(name, component)
    account = {"kind": "ServiceAccount", "name": name, "namespace": namespace_}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": namespace_, "labels": meta_labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name, "labels": meta_labels}, "rules": rules},
        role_binding("ClusterRoleBinding", name, "ClusterRole", name, account, meta_labels),
    ]


def container_resources(resources) -> dict:
    """A container's `resources` from ContainerResources settings (empty parts left out)."""
    return {key: value for key, value in resources.model_dump().items() if value}


def config_map(name: str, namespace_: str, component: str, owner: str,
               files: dict[str, str]) -> dict:
    """A ConfigMap holding `files` (name: text), labelled as `owner`'s."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace_,
                         "labels": labels(owner, component)},
            "data": files}


def yaml_config_map(name: str, namespace_: str, component: str, owner: str, file: str,
                    content: dict) -> dict:
    """A ConfigMap holding one YAML file, labelled as `owner`'s."""
    return config_map(name, namespace_, component, owner,
                      {file: yaml.safe_dump(content, sort_keys=False)})


def config_map_mount(volume: str, mount_path: str, config_map: str) -> tuple[dict, dict]:
    """(volumeMount, volume) of a ConfigMap mounted read-only into a container."""
    return ({"name": volume, "mountPath": mount_path, "readOnly": True},
            {"name": volume, "configMap": {"name": config_map}})


RESTRICTED_POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def python_script_container(name: str, image: str, script: str, args: list[str], resources,
                            volume_mounts: list[dict]) -> dict:
    """A restricted container that runs `script`, a standard-library Python script at a path
    of `volume_mounts` (a ConfigMap's), in a stock Python `image`; `resources` are its
    ContainerResources settings."""
    return _python_container(name, image, [script, *args], {}, resources, volume_mounts)


def python_module_container(name: str, image: str, directory: str, module: ModuleType,
                            args: list[str], resources, volume_mounts: list[dict]) -> dict:
    """As python_script_container, running `module` from `directory`, where a ConfigMap ships
    it and the modules it imports at their import paths (python_module_files)."""
    return _python_container(name, image, ["-m", module.__name__, *args],
                             {"PYTHONPATH": directory}, resources, volume_mounts)


def _python_container(name: str, image: str, arguments: list[str], env: dict[str, str],
                      resources, volume_mounts: list[dict]) -> dict:
    return {
        "name": name,
        "image": image,
        "command": ["python3", *arguments],
        # The script's directory and the root filesystem are read-only: no bytecode to write.
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                *({"name": key, "value": value} for key, value in env.items())],
        "resources": container_resources(resources),
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
        "volumeMounts": volume_mounts,
    }


def python_module_files(*modules: ModuleType) -> dict[str, str]:
    """ConfigMap data shipping standard-library modules of the program at their import paths:
    each module's source keyed by its dotted name, and an empty `__init__.py` for each package
    above it (the program's own packages import more than the standard library)."""
    files: dict[str, str] = {}
    for module in modules:
        parts = module.__name__.split(".")
        files |= {".".join([*parts[:depth], "__init__.py"]): "" for depth in range(1, len(parts))}
        files[f"{module.__name__}.py"] = Path(module.__file__ or "").read_text()
    return files


def python_modules_mount(volume: str, mount_path: str, config_map_: str, data: dict[str, str]
                         ) -> tuple[dict, dict]:
    """(volumeMount, volume) of a ConfigMap holding python_module_files (and other files),
    each module at its import path below `mount_path`."""
    def path(key: str) -> str:
        return key.removesuffix(".py").replace(".", "/") + ".py" if key.endswith(".py") else key
    mount, volume_ = config_map_mount(volume, mount_path, config_map_)
    volume_["configMap"]["items"] = [{"key": key, "path": path(key)} for key in sorted(data)]
    return mount, volume_


# Where a standard-library run reads its settings (module_run).
MODULE_RUN_CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class ModuleRun:
    """A standard-library run shipped in a ConfigMap (its settings as MODULE_RUN_CONFIG_FILE,
    its modules at their import paths), and the container that runs its module from there,
    with the volume it mounts and a digest of what the ConfigMap holds (a change rolls the
    pod)."""

    config_map: dict
    container: dict
    volume: dict
    content_hash: str


def module_run(name: str, namespace_: str, component: str, image: str, directory: str,
               config: Mapping[str, Any], module: ModuleType, modules: Sequence[ModuleType],
               resources) -> ModuleRun:
    """The run of `module` (with `modules` beside it) from a ConfigMap `name`, mounted at
    `directory`, reading `config`; its container is named after the component."""
    data = {MODULE_RUN_CONFIG_FILE: json.dumps(config, indent=1),
            **python_module_files(*modules)}
    mount, volume = python_modules_mount(component, directory, name, data)
    container = python_module_container(
        component, image, directory, module,
        [f"--config={directory}/{MODULE_RUN_CONFIG_FILE}"], resources, [mount])
    return ModuleRun(config_map(name, namespace_, component, name, data), container, volume,
                     content_hash(data))


def cron_job(name: str, namespace_: str, component: str, schedule: str, deadline_seconds: int,
             pod_annotations: dict[str, str], pod: dict,
             scheduler_name: str | None = None) -> dict:
    """A CronJob `name` whose runs are one restricted pod each, of the ServiceAccount `name`,
    never two at once and never retried: a run not started, or not ended, within
    `deadline_seconds` fails and the next scheduled one starts over. `pod` holds the pod's
    (init) containers and volumes; `scheduler_name`, when given, is the scheduler that places it."""
    scheduler = {"schedulerName": scheduler_name} if scheduler_name else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": namespace_,
                     "labels": labels(name, component)},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": deadline_seconds,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline_seconds,
                "template": {
                    "metadata": {"labels": labels(name, component),
                                 "annotations": pod_annotations},
                    "spec": {
                        **scheduler,
                        "serviceAccountName": name,
                        "restartPolicy": "Never",
                        "securityContext": RESTRICTED_POD_SECURITY,
                        **pod,
                    },
                },
            }},
        },
    }


def single_pod_deployment(name: str, namespace_: str, component: str,
                          pod_annotations: dict[str, str], pod: dict) -> dict:
    """A Deployment of one restricted pod of the ServiceAccount `name`, replaced (never run
    beside its successor: Recreate) when its content changes. `pod` holds its containers and
    volumes."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace_, "labels": labels(name, component)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector_labels(name, component)},
            "template": {
                "metadata": {"labels": labels(name, component), "annotations": pod_annotations},
                "spec": {"serviceAccountName": name, "securityContext": RESTRICTED_POD_SECURITY,
                         **pod},
            },
        },
    }


def content_hash(*parts: Any) -> str:
    """A stable digest of manifest content, used in pod annotations so a change rolls the pods."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True).encode())
    return digest.hexdigest()


def base64_text(text: str) -> str:
    """`text` base64-encoded, as Kubernetes carries bytes in JSON (caBundle, Secret data)."""
    return base64.b64encode(text.encode()).decode()
