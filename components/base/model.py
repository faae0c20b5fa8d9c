"""The settings types several components take: the settings base model (camelCase keys,
unknown keys refused), taints, images, container resources, release protection, the
Kubernetes version and the registry mirror, and the GPU nodes as other components know
them."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from .facts import MIN_KUBERNETES, split_registry
from .validation import (
    REGISTRY_MIRROR,
    VERSION,
    ImageTag,
    Invalid,
    check_label_value,
    check_qualified_name,
    is_dns_subdomain,
)


class Model(BaseModel):
    """Settings objects: camelCase keys as written in the stack file, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)


def described(model: type[BaseModel]) -> str:
    """A settings model's description: its docstring, as one paragraph."""
    return " ".join(inspect.cleandoc(model.__doc__ or "").split())


def section(model: type[BaseModel], *, required: bool = False, switched: bool = False) -> Any:
    """The field of a settings section, in the stack settings or a component's inputs: the
    section's docstring describes it, once. `switched`: in a component's inputs, a section whose
    `enabled` is the platform's switch, which the component itself does not read."""
    description = described(model) + (" (`enabled` is GpuPlatform's switch: this component "
                                      "always declares what it configures)" if switched else "")
    if required:
        return Field(description=description)
    return Field(default_factory=model, description=description)


def check_kubernetes_version(value: str) -> str:
    match = VERSION.match(value)
    if not match:
        raise Invalid("not a Kubernetes release",
                      "MAJOR.MINOR.PATCH without a leading v, e.g. 1.35.10 (quote it in YAML)")
    if (int(match[1]), int(match[2])) < MIN_KUBERNETES:
        raise Invalid("Kubernetes older than 1.30 is not supported",
                      "1.30.0 or newer (webhook matchConditions are GA from 1.30)")
    return value


def minor_release(version: str) -> tuple[int, int]:
    """(major, minor) of a checked Kubernetes version, for comparing releases."""
    major, minor, _ = (int(n) for n in version.split("."))
    return major, minor


def kubernetes_version_field():
    return Field(description="Kubernetes version of the cluster, MAJOR.MINOR.PATCH (required; "
                             "1.30 or newer). Selects the kube-scheduler image.")


def check_registry_mirror(value: str | None) -> str | None:
    if value is not None and not REGISTRY_MIRROR.match(value):
        raise Invalid("not a registry", "host[:port][/path] without a scheme, e.g. "
                      "registry.example.com:5000/mirror")
    return value


KubernetesVersion = Annotated[str, AfterValidator(check_kubernetes_version)]
RegistryMirror = Annotated[str | None, AfterValidator(check_registry_mirror)]


def mirror_field():
    return Field(
        default=None,
        description="Registry (`host[:port][/path]`) that mirrors every image the platform "
                    "runs: each image's registry host is replaced by it, the path kept "
                    "(`nvcr.io/nvidia/gpu-operator` becomes `<mirror>/nvidia/gpu-operator`). "
                    "Unset: the images' own registries. The `images` output lists what to "
                    "mirror.")


def mirrored(mirror: str | None, repository: str) -> str:
    """An image repository as the nodes pull it: from the mirror when one is set."""
    return f"{mirror}/{split_registry(repository)[1]}" if mirror else repository


TaintKey = Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "taint key"))]
TaintValue = Annotated[str, AfterValidator(lambda v: check_label_value(v, "taint value"))]
LabelKey = Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "label key"))]


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        check_qualified_name(key, "label key", at=(key,))
        check_label_value(value, "label value", at=(key,))
    return labels


# Labels as a node or a selector carries them: keys and values as Kubernetes checks them.
Labels = Annotated[dict[str, str], AfterValidator(check_labels)]


class Taint(Model):
    """A node taint. In the stack file it may also be written as kubectl does:
    `key=value:Effect`."""

    key: TaintKey = Field(description="The taint's key, such as nvidia.com/gpu.")
    value: TaintValue = Field(default="", description="Its value (may be empty).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="What it does to pods that do not tolerate it.")

    @model_validator(mode="before")
    @classmethod
    def parse_kubectl_form(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        spec, sep, effect = data.rpartition(":")
        if not sep:
            raise Invalid("a taint needs an effect",
                          "key=value:Effect or key:Effect, Effect one of NoSchedule, "
                          "PreferNoSchedule, NoExecute")
        key, _, value = spec.partition("=")
        return {"key": key, "value": value, "effect": effect}


    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value \
            else f"{self.key}:{self.effect}"

    def toleration(self) -> dict:
        """The toleration that lets a pod onto a node with this taint."""
        if self.value:
            return {"key": self.key, "operator": "Equal", "value": self.value,
                    "effect": self.effect}
        return {"key": self.key, "operator": "Exists", "effect": self.effect}

    def as_manifest(self) -> dict:
        taint = {"key": self.key, "effect": self.effect}
        if self.value:
            taint["value"] = self.value
        return taint


def refuse_chart_settings(settings: Model, chart_only: tuple[str, ...], chart: str,
                          switch: str, kept: str) -> None:
    """With an existing install instead of the chart (`switch`, as `key: value`): a setting of
    `chart_only` that is set would be silently ignored, so it is refused (Invalid naming it);
    `kept`, what stays the existing install's."""
    key, _, _ = switch.partition(":")
    for setting in chart_only:
        if to_snake(setting) in settings.model_fields_set:
            value = getattr(settings, to_snake(setting))
            raise Invalid(f"set, but it configures the {chart} chart, which `{switch}` does "
                          f"not install", f"unset ({kept}), or `{key}: install`", at=(setting,),
                          value=value.model_dump(by_alias=True) if isinstance(value, Model)
                          else value, has_value=True)


class ReleaseProtection(Model):
    """What Pulumi may do to a Helm release: delete or replace it, and uninstall it when it
    leaves the stack."""

    protect: bool = Field(description="Pulumi refuses to delete or replace the release (a "
                                      "rename, a replacing change or `pulumi destroy` stops "
                                      "with an error) until this is turned off.")
    retain_on_delete: bool = Field(
        default=False,
        description="Removing the release from the stack leaves it installed in the cluster.")


class ContainerResources(Model):
    """A container's resource requests and limits."""

    requests: dict[str, str] = Field(default_factory=dict,
                                     description="Requested CPU (cores) and memory (bytes, "
                                                 "Kubernetes quantities).")
    limits: dict[str, str] = Field(default_factory=dict,
                                   description="CPU and memory limits (Kubernetes quantities).")


class ImageSettings(Model):
    """A pinned container image."""

    repository: str = Field(description="Repository, with its registry host unless Docker "
                                        "Hub's.")
    tag: ImageTag = Field(description="Release tag (never `latest`).")


# The image the platform's standard-library scripts run in (compaction's plan, reclaim,
# reservation): pinned here, once.
PYTHON_IMAGE = ("docker.io/library/python", "3.13.9-alpine3.22")


def python_image_field(runs: str):
    """The setting of the image that runs `runs`, the pinned Python image by default."""
    return Field(default_factory=lambda: ImageSettings(repository=PYTHON_IMAGE[0],
                                                       tag=PYTHON_IMAGE[1]),
                 description=f"Image that runs {runs} (pinned; standard library only).")


def script_resources_field(of: str, memory_limit: str = "256Mi", why: str = ""):
    """The requests and limits of a standard-library script's container: small by default."""
    return Field(default_factory=lambda: ContainerResources(
        requests={"cpu": "20m", "memory": "64Mi"}, limits={"memory": memory_limit}),
        description=f"Requests and limits of {of}.{' ' + why if why else ''}")


def to_snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


class PulumiInput:
    """Marks an input that may be a pulumi Output (known only once another resource exists);
    the component applies over it. `type_` is its type once known."""

    def __init__(self, type_: Any):
        self.type_ = type_


def check_node_names(names: list[str] | None) -> list[str] | None:
    for index, name in enumerate(names or []):
        if not is_dns_subdomain(name):
            raise Invalid("not a valid node name", "DNS-1123 subdomains", at=(index,),
                          value=name, has_value=True)
    if names == []:
        raise Invalid("no GPU node is named", "the GPU nodes' names, or unset when node pools "
                      "set the taint and the names are not known", value=[], has_value=True)
    return names


NodeNames = Annotated[list[str] | None, AfterValidator(check_node_names)]


class PassingTaint(Model):
    """A taint the platform puts on a GPU node for a while, and who may give its toleration."""

    key: str = Field(description="The taint's key.")
    meaning: str = Field(
        description="What a node carrying it is, and who tolerates it: what a refusal says.")
    given_by: str | None = Field(
        default=None,
        description="The user (a ServiceAccount's) that adds its toleration to a pod, by "
                    "update; unset: nobody does.")


class GpuNodeFacts(Model):
    """The GPU nodes, as other components need to know them."""

    taints: list[Taint] = Field(
        min_length=1,
        description="The taints every GPU node carries, the GPU taint that keeps other pods "
                    "off first (the GpuNodes component's `taints` output).")
    names: NodeNames = Field(
        default=None,
        description="The GPU nodes' names (the GpuNodes component's `nodeNames` output); unset "
                    "when node pools set the taint and the names are not known.")
    passing_taints: list[PassingTaint] = Field(
        default_factory=list,
        description="The taints the platform puts on a GPU node for a while (a reservation's, "
                    "a fault's): the DaemonSets of GPU nodes tolerate them, so that a pod of "
                    "theirs recreated on such a node is not held back, and admission lets no "
                    "other pod tolerate them by name.")


def gpu_nodes_field():
    return Field(description="The GPU nodes: their taints and, when known, their names.")


class PulledImages(Model):
    """Inputs of a component that runs images: where the nodes pull them from."""

    image_registry_mirror: RegistryMirror = mirror_field()


    def mirrored(self, repository: str) -> str:
        return mirrored(self.image_registry_mirror, repository)

    def image(self, image: ImageSettings) -> str:
        """A pinned image as the nodes pull it."""
        return f"{self.mirrored(image.repository)}:{image.tag}"


GpuPath = Literal["devicePlugin", "dra"]


@dataclass
class Findings:
    """What a preview finds of an existing stack the platform joins (the cluster's monitoring
    stack, its Kueue): what stops the preview (problems) and what it only warns of."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, other: Findings) -> Findings:
        self.problems += other.problems
        self.warnings += other.warnings
        return self


@dataclass(frozen=True)
class Read:
    """One read a preview makes of the cluster: a list (or, named, one object) of a resource,
    in a namespace or cluster-wide, with `verb` where it is not the usual one (a `get` of an
    object whose name the preview learns as it reads). The preview identity's RBAC is generated
    from these."""

    api: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    verb: Literal["get", "list"] | None = None

    @property
    def group(self) -> str:
        return self.api.rpartition("/")[0]

    def path(self, name: str | None = None) -> str:
        """The URL path of the read, or of the object `name` for a read of unnamed gets."""
        root = f"/apis/{self.api}" if self.group else f"/api/{self.api}"
        scope = f"/namespaces/{self.namespace}" if self.namespace else ""
        named = name or self.name
        return f"{root}{scope}/{self.resource}" + (f"/{named}" if named else "")

    @property
    def rbac_verb(self) -> str:
        return self.verb or ("get" if self.name else "list")

    @property
    def rule(self) -> str:
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.rbac_verb} {resource} {where}"


class ClusterReads(Protocol):
    """What a preview reads of the cluster (the platform's ClusterReader): an object by its
    path, or None where it is not served; a list's items."""

    def get(self, path: str, **params: str) -> dict | None: ...

    def items(self, path: str, **params: str) -> list[dict]: ...
