"""Small helpers shared by the components: common manifest pieces, and turning a manifest dict
into the matching pulumi-kubernetes resource."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from .validation import Subject, Validated, args_subject, validated

PART_OF = "gpu-platform"

# Typed classes for the built-in kinds the program declares; anything else (custom resources
# whose CRDs the charts install) becomes an apiextensions.CustomResource.
_KINDS = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "ResourceQuota"): k8s.core.v1.ResourceQuota,
    ("v1", "Node"): k8s.core.v1.NodePatch,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("batch/v1", "CronJob"): k8s.batch.v1.CronJob,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("scheduling.k8s.io/v1", "PriorityClass"): k8s.scheduling.v1.PriorityClass,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("resource.k8s.io/v1", "DeviceClass"): k8s.resource.v1.DeviceClass,
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"):
        k8s.admissionregistration.v1.ValidatingWebhookConfiguration,
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"):
        k8s.admissionregistration.v1.MutatingWebhookConfiguration,
}

# Fields the API server refuses to change in an update: a change replaces the object, the old
# one deleted first, as the new one has the same name.
_IMMUTABLE_FIELDS = {("scheduling.k8s.io/v1", "PriorityClass"): ["value", "preemptionPolicy"]}

_FIELD_ARGS = {"roleRef": "role_ref", "stringData": "string_data",
               "globalDefault": "global_default", "preemptionPolicy": "preemption_policy",
               "automountServiceAccountToken": "automount_service_account_token"}


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


def role_binding(kind: str, name: str, role_kind: str, role: str, account: dict,
                 meta_labels: dict, namespace_: str | None = None) -> dict:
    """A (Cluster)RoleBinding of `role` to one ServiceAccount."""
    metadata = {"name": name, "labels": meta_labels}
    if namespace_:
        metadata["namespace"] = namespace_
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [account]}


def container_resources(resources) -> dict:
    """A container's `resources` from ContainerResources settings (empty parts left out)."""
    return {key: value for key, value in resources.model_dump().items() if value}


def yaml_config_map(name: str, namespace_: str, component: str, owner: str, file: str,
                    content: dict) -> dict:
    """A ConfigMap holding one YAML file, labelled as `owner`'s."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace_,
                         "labels": labels(owner, component)},
            "data": {file: yaml.safe_dump(content, sort_keys=False)}}


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


def content_hash(*parts: Any) -> str:
    """A stable digest of manifest content, used in pod annotations so a change rolls the pods."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True).encode())
    return digest.hexdigest()


def logical_name(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


# The package the components are served as (components/package.py): a component's type token
# is `gpu-platform:index:<its class name>`.
PACKAGE = "gpu-platform"


class Component(pulumi.ComponentResource):
    """A component of the platform, the parent of the resources `declare` creates.

    Its children's logical names start with a prefix, so that two of them in one program cannot
    collide: a component of a platform takes its platform's (GpuPlatform names its own), one
    declared alone its own name (`<name>-`)."""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        # The schema takes a component's docstring as its description, indentation and all.
        cls.__doc__ = inspect.cleandoc(cls.__doc__ or "")

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None,
                 child_prefix: str | None = None):
        super().__init__(f"{PACKAGE}:index:{type(self).__name__}", name, None, opts)
        parent = opts.parent if opts else None
        if child_prefix is None:
            child_prefix = parent._child_prefix if isinstance(parent, Component) else f"{name}-"
        self._child_prefix = child_prefix

    def child_name(self, name: str) -> str:
        """The logical name of a child of this component."""
        return self._child_prefix + name

    @classmethod
    def args_subject(cls) -> Subject:
        """The component's args, as errors name them."""
        return args_subject(cls.__name__)

    @classmethod
    def inputs(cls, model: type[Validated], args: Any) -> Validated:
        """`args` validated as `model` (before anything is registered), or SettingsError."""
        return validated(model, args, cls.args_subject())


def declare(obj: dict[str, Any], parent: Component,
            depends_on: Sequence[pulumi.Resource] | None = None,
            retain: bool = False, name: str | None = None) -> pulumi.CustomResource:
    """Declare one manifest as a resource that is a child of `parent`; with `retain`, removing
    it from the stack leaves the object in the cluster. Its logical name is `name` (for an
    object whose own name changes as a new one replaces it), else `namespace/name`."""
    opts = pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on or []),
                                  retain_on_delete=retain or None)
    if immutable := _IMMUTABLE_FIELDS.get((obj["apiVersion"], obj["kind"])):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
            replace_on_changes=immutable, delete_before_replace=True))
    fields = {_FIELD_ARGS.get(key, key): value for key, value in obj.items()
              if key not in ("apiVersion", "kind")}
    resource_class = _KINDS.get((obj["apiVersion"], obj["kind"]))
    resource_name = parent.child_name(name or logical_name(obj))
    if resource_class is None and set(obj) - {"apiVersion", "kind", "metadata", "spec"}:
        return _CustomResourceWithFields(resource_name, obj, opts)
    if resource_class is None:
        return k8s.apiextensions.CustomResource(
            resource_name, api_version=obj["apiVersion"], kind=obj["kind"], opts=opts,
            **fields)
    return resource_class(resource_name, opts=opts, **fields)


class _CustomResourceWithFields(pulumi.CustomResource):
    """An object of a custom resource with fields beside `spec` (a WorkloadPriorityClass's
    `value`), which pulumi-kubernetes' CustomResource does not take: the provider applies every
    field it is given."""

    def __init__(self, name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions):
        version = pulumi.ResourceOptions(version=importlib.metadata.version("pulumi-kubernetes"))
        super().__init__(f"kubernetes:{obj['apiVersion']}:{obj['kind']}", name, dict(obj),
                         pulumi.ResourceOptions.merge(opts, version))


def declare_all(objs: Sequence[dict], parent: Component,
                depends_on: Sequence[pulumi.Resource] | None = None
                ) -> dict[str, pulumi.CustomResource]:
    """Declare manifests in order; returns them keyed by `Kind/namespace/name`."""
    return {f"{obj['kind']}/{logical_name(obj)}": declare(obj, parent, depends_on)
            for obj in objs}


def base64_text(text: str) -> str:
    """`text` base64-encoded, as Kubernetes carries bytes in JSON (caBundle, Secret data)."""
    return base64.b64encode(text.encode()).decode()
