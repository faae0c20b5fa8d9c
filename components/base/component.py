"""The components' base class, and the declaring of a manifest dict as the matching
pulumi-kubernetes resource, a child of its component."""

from __future__ import annotations

import importlib.metadata
import inspect
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel

from .facts import KUEUE_API
from .validation import Subject, args_subject, validated

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
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"):
        k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"):
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
}
# Fields the API server refuses to change: a change replaces the object, the old one deleted
# first, as the new one has the same name. (Kueue's Topology keeps its levels for life.)
_IMMUTABLE_FIELDS = {("scheduling.k8s.io/v1", "PriorityClass"): ["value", "preemptionPolicy"],
                     (KUEUE_API, "Topology"): ["spec"]}
_FIELD_ARGS = {"roleRef": "role_ref", "stringData": "string_data",
               "globalDefault": "global_default", "preemptionPolicy": "preemption_policy",
               "automountServiceAccountToken": "automount_service_account_token"}


@dataclass(frozen=True)
class Declared:
    """An object a component declares (a Helm release: `helm.sh/v3` `Release`), as the preview
    identity's rights are made from them."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    role_ref: tuple[str, str] | None = None   # a binding's (kind, name) of the role it binds
    # A ValidatingAdmissionPolicy's (apiVersion, kind) of its parameters.
    param_kind: tuple[str, str] | None = None


def logical_name(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


# The package the components are served as (components/package.py): a component's type token
# is `gpu-platform:index:<its class name>`.
PACKAGE = "gpu-platform"


InputsT = TypeVar("InputsT", bound=BaseModel)


class Component(pulumi.ComponentResource, Generic[InputsT]):
    """A component of the platform (`Component[<its inputs>]`), the parent of the resources
    `declare` creates.

    A program in any language declares it with its args, a dict: they are validated as its
    inputs first, and nothing is declared when they are not valid. GpuPlatform, which validated
    the stack's settings once, declares each component with `from_inputs`, from inputs already
    valid. A subclass redefines `__init__` only to type its args for the schema analyzer, and
    declares its resources in `_declare`.

    Its children's logical names start with a prefix, so that two of them in one program cannot
    collide: a component of a platform takes its platform's (GpuPlatform names its own), one
    declared alone its own name (`<name>-`)."""

    _inputs_model: ClassVar[type[BaseModel]]

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        # The schema takes a component's docstring as its description, indentation and all.
        cls.__doc__ = inspect.cleandoc(cls.__doc__ or "")
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is Component:
                cls._inputs_model = typing.get_args(base)[0]

    def __init__(self, name: str, args: Any, opts: pulumi.ResourceOptions | None = None):
        inputs = typing.cast(InputsT, validated(self._inputs_model, args, self.args_subject()))
        self._check(inputs, self.args_subject())
        self._declare(name, inputs, opts)

    @classmethod
    def from_inputs(cls, name: str, inputs: InputsT,
                    opts: pulumi.ResourceOptions | None = None) -> Self:
        """The component declared from inputs that are valid already (not validated again)."""
        component = cls.__new__(cls)
        component._declare(name, inputs, opts)
        return component

    @classmethod
    def inputs_model(cls) -> type[BaseModel]:
        """What the component's args are validated as."""
        return cls._inputs_model

    def _check(self, inputs: InputsT, subject: Subject) -> None:
        """What its args must also satisfy beyond their model (SettingsError naming `subject`'s
        settings), before anything is declared."""

    def _declare(self, name: str, inputs: InputsT, opts: pulumi.ResourceOptions | None) -> None:
        raise NotImplementedError

    def _register(self, name: str, opts: pulumi.ResourceOptions | None,
                  child_prefix: str | None = None) -> None:
        """Registers the component itself, before its children."""
        super().__init__(f"{PACKAGE}:index:{type(self).__name__}", name, None, opts)
        self.declared: list[Declared] = []
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


def declare(obj: dict[str, Any], parent: Component,
            depends_on: Sequence[pulumi.Resource] | None = None,
            retain: bool = False, name: str | None = None) -> pulumi.CustomResource:
    """Declare one manifest as a resource that is a child of `parent`; with `retain`, removing
    it from the stack leaves the object in the cluster. Its logical name is `name` (for an
    object whose own name changes as a new one replaces it), else `namespace/name`."""
    meta = obj["metadata"]
    spec = obj.get("spec")
    role_ref = obj.get("roleRef")
    param_kind = spec.get("paramKind") if isinstance(spec, dict) else None
    parent.declared.append(Declared(
        obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"],
        (role_ref["kind"], role_ref["name"]) if role_ref else None,
        (param_kind["apiVersion"], param_kind["kind"]) if param_kind else None))
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
