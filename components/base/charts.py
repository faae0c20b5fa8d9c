"""Helm releases: merging a stack's extra chart values over the generated ones, and declaring a
pinned release."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .component import Component, Declared
from .descriptor import Deployable
from .model import ReleaseProtection
from .validation import SettingsError, Subject, setting_path

# How a Helm release is named among the objects a component declares.
HELM_RELEASE = ("helm.sh/v3", "Release")


def _leaf_paths(values: Mapping[str, Any], prefix: tuple = ()) -> list[tuple]:
    paths = []
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            paths.extend(_leaf_paths(value, prefix + (key,)))
        else:
            paths.append(prefix + (key,))
    return paths


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def check_extra_values(generated: Mapping[str, Any], extra: Mapping[str, Any], setting: str,
                       subject: Subject,
                       unsupported: Mapping[tuple[str, ...], str] | None = None) -> None:
    """`extra` (the `<setting>` value of `subject`) may be merged over `generated`.

    A value the program generates is derived from other settings (a taint, a namespace, a
    switch); overriding it through extra values would let the copies disagree, so that is
    refused with the path of the offending key. So is any key at or under an `unsupported` path
    (with the reason given for it).
    """
    owned = set(_leaf_paths(generated))
    problems = []
    for path in _leaf_paths(extra):
        reason = next((why for key, why in (unsupported or {}).items()
                       if path[:len(key)] == key), None)
        where = setting_path(subject.root, (*setting.split("."), *path))
        if reason is not None:
            problems.append(f"{where}: {reason}")
            continue
        clash = next((p for p in owned if p[:len(path)] == path or path[:len(p)] == p), None)
        if clash is not None:
            problems.append(
                f"{where}: this chart value is generated from "
                f"other settings ({'.'.join(clash)}); allowed: keys the program does not set, "
                f"see docs/operators/settings.md for the setting that controls it")
    if problems:
        raise SettingsError(problems, subject)


def values_input(values: dict, secret: bool) -> Any:
    """A release's values as its input: secret as a whole when they hold a secret (Helm values
    are one input; there is no marking part of it)."""
    return pulumi.Output.secret(values) if secret else values


def chart_source(chart: str, repository: str,
                 chart_path: str | None) -> tuple[str, str | None]:
    """(chart, repository) as Helm takes them: a local chart path as it is; an oci:// registry
    holds the chart under its name; an https:// repository is searched for it."""
    if chart_path:
        return chart_path, None
    if repository.startswith("oci://"):
        return f"{repository.rstrip('/')}/{chart}", None
    return chart, repository


def chart_reference(chart: str, version: str, repository: str, chart_path: str | None) -> str:
    """Where the chart is installed from, as a person mirroring it reads it."""
    source, repo = chart_source(chart, repository, chart_path)
    return f"{source} (version {version})" if repo is None else f"{repo} {chart} {version}"


def chart_deployable(chart: str, release: Any, brought_by: tuple[str, ...], deployed: bool
                     ) -> Deployable:
    """The chart a release of `release`'s settings (its version, repository, chart path)
    installs, as the air-gapped lists show it."""
    return Deployable(chart_reference(chart, release.chart_version, release.repository,
                                      release.chart_path), brought_by, deployed)


def release(name: str, *, chart: str, version: str, repository: str, namespace: str,
            values: Any, parent: Component, protection: ReleaseProtection,
            chart_path: str | None = None,
            depends_on: Sequence[pulumi.Resource] | None = None) -> k8s.helm.v3.Release:
    """A Helm release pinned to one chart version, rolled back as a whole if it fails.
    `values`: a mapping, or an Output of one (a secret). `protection`: whether Pulumi refuses
    to delete or replace it, and whether deleting it from the stack leaves it installed."""
    source, repo = chart_source(chart, repository, chart_path)
    parent.declared.append(Declared(HELM_RELEASE[0], HELM_RELEASE[1], namespace, name))
    return k8s.helm.v3.Release(
        parent.child_name(name),
        name=name,
        chart=source,
        version=version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo) if repo else None,
        namespace=namespace,
        create_namespace=False,
        values=values,
        atomic=True,
        cleanup_on_fail=True,
        timeout=900,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on or []),
                                    protect=protection.protect,
                                    retain_on_delete=protection.retain_on_delete),
    )
