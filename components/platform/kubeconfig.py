"""The kubeconfig the stack names, checked with its settings: a stack whose file cannot take
the program to its context is refused before anything is declared."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..base.validation import Invalid
from .settings import ClusterSettings


def kubeconfig_problem(cluster: ClusterSettings) -> Invalid | None:
    """Why `cluster.kubeconfig`, when set, cannot take the program to `cluster.context`: read
    from the file, once, with the settings (a model's validator reads no files)."""
    if cluster.kubeconfig is None:
        return None
    path = Path(cluster.kubeconfig).expanduser()
    if not path.is_file():
        return Invalid("no such kubeconfig file", "the path of a kubeconfig file on the "
                       "machine that runs pulumi, or unset for $KUBECONFIG / ~/.kube/config",
                       at=("kubeconfig",), value=cluster.kubeconfig, has_value=True)
    try:
        config = yaml.safe_load(path.read_text()) or {}
        contexts = [c["name"] for c in config.get("contexts") or []]
    except (yaml.YAMLError, KeyError, TypeError, AttributeError):
        return Invalid("not a kubeconfig file", "a kubeconfig (YAML with contexts)",
                       at=("kubeconfig",), value=cluster.kubeconfig, has_value=True)
    if cluster.context not in contexts:
        return Invalid(f"no such context in {cluster.kubeconfig}",
                       f"one of {', '.join(contexts) or '(none defined)'}", at=("context",),
                       value=cluster.context, has_value=True)
    return None
