"""Validation of settings and component inputs: the rules values must follow (names, durations,
cron schedules, image tags), the error that names a setting, its value and what is allowed, and
the formatting of pydantic's errors into such messages."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, Field, ValidationError
from pydantic_core import ErrorDetails

from .facts import RESERVED_NAMESPACES

REGISTRY_MIRROR = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
GO_DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")
CRON_FIELD = re.compile(r"^(\*|[0-9]+(-[0-9]+)?)(/[0-9]+)?(,(\*|[0-9]+(-[0-9]+)?)(/[0-9]+)?)*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class Invalid(ValueError):
    """A validation failure that knows which nested setting it is about and what is allowed."""

    def __init__(self, problem: str, allowed: str, *, at: tuple = (), value: Any = None,
                 has_value: bool = False):
        super().__init__(f"{problem}; allowed: {allowed}")
        self.problem = problem
        self.allowed = allowed
        self.at = at
        self.value = value
        self.has_value = has_value


@dataclass(frozen=True)
class Subject:
    """Whose values are validated, as an error names them: what they are, the root of each
    value's path, and what the failure means for a deployment."""

    name: str
    root: str
    consequence: str


CONFIG_NAMESPACE = "gpu-platform"
# A stack's settings, as errors name them: `gpu-platform:<section>.<key>`.
STACK = Subject("stack settings", f"{CONFIG_NAMESPACE}:", "nothing was deployed")


def args_subject(component: str) -> Subject:
    """A component's args: paths as the component's schema names them (`scheduler.replicas`)."""
    return Subject(f"{component} args", "", "the component declared nothing")


class SettingsError(Exception):
    """Raised for invalid stack settings or component args; the message lists every problem, one
    per line."""

    def __init__(self, problems: list[str], subject: Subject):
        self.problems = problems
        self.subject = subject
        super().__init__(
            f"invalid {subject.name} ({subject.consequence}):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


def is_dns_label(value: str) -> bool:
    return len(value) <= 63 and bool(DNS_LABEL.match(value))


def is_dns_subdomain(value: str) -> bool:
    return 0 < len(value) <= 253 and all(is_dns_label(part) for part in value.split("."))


def is_qualified_name(value: str) -> bool:
    """A label key, annotation key, taint key or extended resource name: [prefix/]name."""
    prefix, _, name = value.rpartition("/")
    if "/" in value and not is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(QUALIFIED_NAME_PART.match(name))


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(LABEL_VALUE.match(value))


QUALIFIED_NAME_RULE = ("[DNS-subdomain prefix/]name, the name at most 63 characters of "
                       "[A-Za-z0-9-_.], alphanumeric at both ends")
LABEL_VALUE_RULE = "at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends, or empty"


def check_qualified_name(name: str, what: str, at: tuple = ()) -> str:
    if not is_qualified_name(name):
        raise Invalid(f"not a valid {what}", QUALIFIED_NAME_RULE, at=at, value=name,
                      has_value=True)
    return name


def check_label_value(text: str, what: str, at: tuple = ()) -> str:
    if not is_label_value(text):
        raise Invalid(f"not a valid {what}", LABEL_VALUE_RULE, at=at, value=text,
                      has_value=True)
    return text


def check_dns_label(value: str) -> str:
    if not is_dns_label(value):
        raise Invalid("not a valid name",
                      "a DNS-1123 label: at most 63 characters, lowercase a-z, 0-9 and '-', "
                      "starting and ending with a letter or digit")
    return value


def check_dns_subdomain(value: str) -> str:
    if not is_dns_subdomain(value):
        raise Invalid("not a valid name",
                      "a DNS-1123 subdomain: at most 253 characters, DNS-1123 labels joined "
                      "by '.'")
    return value


def check_namespace_names(names: list[str]) -> list[str]:
    for index, name in enumerate(names):
        if not is_dns_label(name):
            raise Invalid("not a namespace name", "DNS-1123 labels", at=(index,), value=name,
                          has_value=True)
    return names


def check_own_namespace(value: str) -> str:
    """A namespace the program creates, and deletes with the stack: a valid name that is not one
    of Kubernetes' own."""
    check_dns_label(value)
    if value in RESERVED_NAMESPACES:
        raise Invalid("the program creates and deletes this namespace",
                      f"a namespace of the platform's own, not one of "
                      f"{', '.join(RESERVED_NAMESPACES)}")
    return value


def check_go_duration(value: str) -> str:
    if not GO_DURATION.match(value):
        raise Invalid("not a duration", "a Go duration such as 15s, 30m, 2h or 1h30m (no days)")
    return value


def go_duration_seconds(duration: str) -> float:
    """A Go duration (as check_go_duration accepts it) in seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(int(n) * units[unit] for n, unit in re.findall(r"([0-9]+)(ms|s|m|h)", duration))


def check_cron_schedule(value: str) -> str:
    """A CronJob's schedule: five numeric cron fields (no macros such as @hourly, no names of
    months or days)."""
    fields = value.split()
    if len(fields) != 5 or not all(CRON_FIELD.match(f) for f in fields):
        raise Invalid("not a cron schedule", "five numeric fields: minute hour day-of-month "
                      "month day-of-week, e.g. \"*/10 * * * *\"")
    return value


def check_duration(value: str) -> str:
    if not DURATION.match(value):
        raise Invalid("not a duration", "a Prometheus duration such as 15s, 1m, 1h30m or 15d")
    return value


def duration_seconds(duration: str) -> float:
    """A Prometheus duration (as check_duration accepts it) in seconds (a year is 365 days)."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
             "y": 31536000.0}
    return sum(int(n) * units[unit]
               for n, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", duration))


def release_name_field(default: str):
    return Field(default=default, description="Helm release name.")


def chart_repository_field(default: str):
    return Field(default=default, description="Helm repository of the chart: https://, or an "
                                              "oci:// registry (a mirror, for example).")


def chart_version_field(default: str):
    return Field(default=default, description="Pinned chart version.")


def extra_values_field():
    return Field(default_factory=dict,
                 description="Further chart values, merged over the generated ones; keys that "
                             "other settings own are refused.")


def cron_schedule_field(default: str, run: str):
    """When an in-cluster CronJob's run (`run`, as the description names it) starts."""
    return Field(default=default, description=f"When {run} starts (cron, the cluster's time "
                                              f"zone).")


def cron_job_namespace_field(default: str):
    return Field(default=default, description="Namespace of the CronJob.")


def chart_path_field():
    return Field(default=None,
                 description="Install from this local chart (a directory from `helm pull "
                             "--untar`, or a .tgz) instead of the repository; its version must "
                             "be chartVersion.")


def check_chart_path(value: str | None) -> str | None:
    if value is not None and not Path(value).expanduser().exists():
        raise Invalid("no such chart on this machine", "a chart directory or .tgz that exists "
                      "where pulumi runs, or unset to install from the repository")
    return value


def check_repository(value: str) -> str:
    if not re.match(r"^(https?|oci)://[^\s/]+", value):
        raise Invalid("not a chart repository", "an https:// Helm repository or an oci:// "
                      "registry reference")
    return value


def check_image_tag(value: str) -> str:
    if not IMAGE_TAG.match(value) or value == "latest":
        raise Invalid("not a pinned image tag",
                      "an explicit release tag such as 1.22.2 (never 'latest')")
    return value


def check_prometheus_url(value: str | None) -> str | None:
    if value is not None and not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        raise Invalid("not a URL", "http(s)://host[:port][/path] of Prometheus' HTTP API, "
                      "or unset for the installed stack's")
    return value


def prometheus_url_field(who: str):
    """The Prometheus a platform run queries: unset, the installed stack's."""
    return Field(
        default=None,
        description=f"The Prometheus HTTP API {who} (`http://host:port[/path]`). Unset: the "
                    "Prometheus Service of the kube-prometheus-stack the program installs; "
                    "required with `monitoring.stack: existing`, where it is the existing "
                    "stack's (e.g. `http://prometheus-operated.monitoring.svc:9090`, the "
                    "Prometheus Operator's Service).")


# Values checked by a rule above, as settings and inputs are typed.
DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
OwnNamespace = Annotated[str, AfterValidator(check_own_namespace)]
NamespaceNames = Annotated[list[str], AfterValidator(check_namespace_names)]
GoDuration = Annotated[str, AfterValidator(check_go_duration)]
Duration = Annotated[str, AfterValidator(check_duration)]
CronSchedule = Annotated[str, AfterValidator(check_cron_schedule)]
ChartPath = Annotated[str | None, AfterValidator(check_chart_path)]
PrometheusUrl = Annotated[str | None, AfterValidator(check_prometheus_url)]
Repository = Annotated[str, AfterValidator(check_repository)]
ImageTag = Annotated[str, AfterValidator(check_image_tag)]


def setting_path(root: str, loc: tuple) -> str:
    """A setting's path as a reader writes it: `gpu-platform:scheduler.replicas` for a stack's
    config (root `gpu-platform:`), `scheduler.replicas` for a component's args (root "")."""
    path = root.rstrip(".") if not loc else f"{root}{loc[0]}"
    for part in loc[1:]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _field_model(annotation: Any) -> Any:
    """The settings model a field holds, through `X | None`, `list[X]` and `dict[str, X]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for inner in getattr(annotation, "__args__", ()):
        if (found := _field_model(inner)) is not None:
            return found
    return None


def schema_path(model: Any, loc: tuple) -> tuple:
    """`loc` with every key by its schema name (camelCase, as stack files and the component
    schema write it), whichever name the input used."""
    named = []
    for part in loc:
        field = None
        if isinstance(part, str) and model is not None:
            field = next((f for name, f in model.model_fields.items()
                          if part in (f.alias, name)), None)
        if field is None:   # a list index, a map key or an unknown key
            named.append(part)
            continue
        named.append(field.alias or part)
        model = _field_model(field.annotation)
    return tuple(named)


def _known_keys(model: Any, loc: tuple) -> list[str]:
    """The keys a model accepts at `loc`, to suggest when an unknown key was given."""
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for name, f in model.model_fields.items() if part in (f.alias, name)),
                     None)
        annotation = getattr(field, "annotation", None)
        inner = getattr(annotation, "__args__", (annotation,))[0]
        model = inner if isinstance(inner, type) and issubclass(inner, BaseModel) else annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
    # Every field has an alias (the camelCase name); a field without one goes by its own name.
    return [field.alias or name for name, field in model.model_fields.items()]


def describe_invalid(root: str, loc: tuple, cause: Invalid, given: Any = None) -> str:
    """One problem a rule found in the setting at `loc` (from `root`): the setting, its value
    (`given` unless the rule names it) and what is allowed."""
    value = cause.value if cause.has_value else given
    return (f"{setting_path(root, loc + cause.at)} = {json.dumps(value)}: {cause.problem}; "
            f"allowed: {cause.allowed}")


def describe(error: ErrorDetails, model: type[BaseModel], root: str) -> str:
    """One problem of a validation of `model`, naming the setting from `root`, its value and
    what is allowed."""
    loc = schema_path(model, tuple(part for part in error["loc"]
                                   if part not in ("function-before", "function-after")))
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, Invalid):
        return describe_invalid(root, loc, cause, error.get("input"))
    kind = error["type"]
    if kind == "missing":
        return f"{setting_path(root, loc)}: required setting is missing"
    if kind == "extra_forbidden":
        known = ", ".join(_known_keys(model, loc[:-1])) or "none"
        return f"{setting_path(root, loc)}: unknown setting; allowed keys here: {known}"
    value = json.dumps(error.get("input"), default=str)
    return f"{setting_path(root, loc)} = {value}: {error['msg']}"


Validated = TypeVar("Validated", bound=BaseModel)


def validated(model: type[Validated], data: Any, subject: Subject) -> Validated:
    """`data` validated as `model`, or SettingsError listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise SettingsError([describe(e, model, subject.root) for e in error.errors()],
                            subject) from None
