"""How kube-state-metrics names what it exports (pinned in monitoring/values.py): extended
resources in the `resource` label, allow-listed Kubernetes labels as `label_<key>` of
`kube_<kind>_labels` and annotations as `annotation_<key>` of `kube_<kind>_annotations`."""

from __future__ import annotations

import re


def ksm_resource(name: str) -> str:
    """The `resource` label kube-state-metrics gives an extended resource."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def ksm_label(key: str, prefix: str = "label") -> str:
    """The label kube-state-metrics gives an allow-listed Kubernetes label in its
    `kube_<kind>_labels` series (sanitized, then snake case); with prefix `annotation`, an
    allow-listed annotation in `kube_<kind>_annotations`."""
    return f"{prefix}_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", ksm_resource(key)).lower()
