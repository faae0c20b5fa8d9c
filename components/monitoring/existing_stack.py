"""An existing Prometheus Operator stack, as `pulumi preview` finds it (`monitoring.stack:
existing`): whether its Prometheus selects what the platform declares, evaluated as the
Prometheus Operator evaluates its selectors, and whether its kube-state-metrics exports what
the rules and the dashboard read.

The reading is done through `reader` (base.model.ClusterReads, which the platform's cluster
reader is); refusals to read are the reader's to raise."""

from __future__ import annotations

import re

from ..base.model import ClusterReads, Findings, Read
from .inputs import MonitoringInputs
from .monitors import prometheus_objects
from .values import ksm_annotations, ksm_labels

PROMETHEUS_API = "monitoring.coreos.com/v1"
# Which of a Prometheus' selectors pick each kind the platform declares, and which namespaces
# they look in (monitoring.coreos.com/v1 Prometheus: a null selector matches no object, an
# empty one every object; a null namespace selector matches the Prometheus' own namespace
# only, an empty one every namespace).
SELECTORS = {
    "ServiceMonitor": ("serviceMonitorSelector", "serviceMonitorNamespaceSelector"),
    "PodMonitor": ("podMonitorSelector", "podMonitorNamespaceSelector"),
    "PrometheusRule": ("ruleSelector", "ruleNamespaceSelector"),
}
KSM_NAME_LABEL = "app.kubernetes.io/name=kube-state-metrics"


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector (matchLabels, matchExpressions) matches `labels`."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def reads_files(endpoint: dict) -> bool:
    """Whether a ServiceMonitor endpoint reads a file of Prometheus' pod (a bearer token, TLS
    files), which the operator refuses when the Prometheus denies it."""
    tls = endpoint.get("tlsConfig") or {}
    return bool(endpoint.get("bearerTokenFile")
                or any(tls.get(key) for key in ("caFile", "certFile", "keyFile")))


def unselected(prometheus: dict, namespace_labels: dict[str, str],
               objects: list[dict]) -> list[str]:
    """Why `prometheus` would not use each of `objects` (all in one namespace, whose labels
    are `namespace_labels`), naming the selector, or the operator's check that rejects it, and
    what would fix it."""
    spec = prometheus.get("spec") or {}
    where = f"Prometheus {prometheus['metadata']['namespace']}/{prometheus['metadata']['name']}"
    problems = []
    for obj in objects:
        kind, meta = obj["kind"], obj["metadata"]
        selector_field, namespace_field = SELECTORS[kind]
        selector, namespaces = spec.get(selector_field), spec.get(namespace_field)
        what = f"{kind} {meta['namespace']}/{meta['name']}"
        if selector is None:
            problems.append(f"{where} has no spec.{selector_field}, so it uses no {kind}: "
                            f"{what} would be ignored; give it one that matches "
                            f"monitoring.existing.labels")
        elif not selects(selector, meta.get("labels") or {}):
            problems.append(f"{where}'s spec.{selector_field} {selector} does not select {what}, "
                            f"labelled {meta.get('labels')}: set monitoring.existing.labels to "
                            f"labels it selects")
        if namespaces is None and meta["namespace"] != prometheus["metadata"]["namespace"]:
            problems.append(f"{where} looks for {kind}s in its own namespace only (no "
                            f"spec.{namespace_field}), not in {meta['namespace']}: set "
                            f"monitoring.namespace to {prometheus['metadata']['namespace']}")
        elif namespaces is not None and not selects(namespaces, namespace_labels):
            problems.append(f"{where}'s spec.{namespace_field} {namespaces} does not select the "
                            f"namespace {meta['namespace']} (labels {namespace_labels})")
        endpoints = (obj.get("spec") or {}).get("endpoints") or []
        if (kind == "ServiceMonitor" and (spec.get("arbitraryFSAccessThroughSMs") or {}).get("deny")
                and any(reads_files(endpoint) for endpoint in endpoints)):
            problems.append(f"{where} sets spec.arbitraryFSAccessThroughSMs.deny, so the "
                            f"operator rejects {what}, which reads a file of Prometheus' pod "
                            f"(its ServiceAccount token): set it to false (the chart's "
                            f"prometheus.prometheusSpec.arbitraryFSAccessThroughSMs)")
    if spec.get("ignoreNamespaceSelectors"):
        problems.append(f"{where} sets spec.ignoreNamespaceSelectors, so the platform's monitors "
                        f"would scrape only their own namespace, not the GPU Operator's, OPA's "
                        f"and the scheduler's")
    return problems


def allowlisted(arguments: list[str], what: str = "labels") -> dict[str, set[str]]:
    """The labels (or annotations) kube-state-metrics exports, by kind, from its
    --metric-labels-allowlist (--metric-annotations-allowlist)."""
    found: dict[str, set[str]] = {}
    for argument in arguments:
        if argument.startswith(f"--metric-{what}-allowlist="):
            for kind, labels in re.findall(r"([\w.]+)=\[([^\]]*)\]", argument.split("=", 1)[1]):
                found.setdefault(kind, set()).update(label.strip() for label in
                                                     labels.split(",") if label.strip())
    return found


def kube_state_metrics_warnings(deployments: list[dict], inputs: MonitoringInputs) -> list[str]:
    """What the platform's rules and dashboard will miss, from the kube-state-metrics
    Deployments the cluster runs."""
    if not deployments:
        return ["no kube-state-metrics Deployment found (label "
                f"{KSM_NAME_LABEL}): the GPUs pods ask for (kube_pod_container_resource_"
                "requests) are its series, so the dashboard's allocation panels and the "
                "allocation alerts stay empty; install kube-state-metrics beside the stack"]
    warnings = []
    for deployment in deployments:
        arguments = [a for c in deployment["spec"]["template"]["spec"]["containers"]
                     for a in c.get("args") or []]
        meta = deployment["metadata"]
        for what, needed, readers, chart_value in (
                ("labels", ksm_labels(inputs), "the audit mode's panel, the alert on GPU nodes "
                 "without the taint, the free GPUs per network domain and showback's node "
                 "group prices", "metricLabelsAllowlist"),
                ("annotations", ksm_annotations(inputs), "the alerts on idle pods reclaim "
                 "will evict", "metricAnnotationsAllowList")):
            exported = allowlisted(arguments, what)
            missing = {kind: [name for name in names if name not in exported.get(kind, set())
                              and "*" not in exported.get(kind, set())]
                       for kind, names in needed.items()}
            wanted = ",".join(f"{kind}=[{','.join(names)}]" for kind, names in missing.items()
                              if names)
            if wanted:
                warnings.append(
                    f"kube-state-metrics {meta['namespace']}/{meta['name']} does not export "
                    f"the {what} {wanted}: {readers} read them; add them to its "
                    f"--metric-{what}-allowlist (the chart's {chart_value})")
    return warnings


def reads(inputs: MonitoringInputs) -> dict[str, Read]:
    """What `survey` reads: the Prometheus by name (listing them all when it is not found), its
    namespace, and kube-state-metrics' Deployments."""
    mon = inputs.monitoring
    return {"prometheus": Read(PROMETHEUS_API, "prometheuses", namespace=mon.namespace,
                               name=mon.existing.prometheus),
            "prometheuses": Read(PROMETHEUS_API, "prometheuses"),
            "namespace": Read("v1", "namespaces", name=mon.namespace),
            "deployments": Read("apps/v1", "deployments")}


def survey(reader: ClusterReads, inputs: MonitoringInputs) -> Findings:
    """What joining the existing stack would not do (problems, which stop the preview) and
    would do less well (warnings)."""
    mon, read = inputs.monitoring, reads(inputs)
    prometheus = reader.get(read["prometheus"].path())
    if prometheus is None:
        found = [f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                 for p in reader.items(read["prometheuses"].path())]
        return Findings(problems=[
            f"monitoring.existing.prometheus: no Prometheus {mon.namespace}/"
            f"{mon.existing.prometheus} (monitoring.namespace/monitoring.existing."
            f"prometheus); the cluster has {', '.join(found) or 'none'}"])
    namespace = reader.get(read["namespace"].path()) or {}
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    problems = unselected(prometheus, labels, prometheus_objects(inputs))
    warnings = kube_state_metrics_warnings(
        reader.items(read["deployments"].path(), labelSelector=KSM_NAME_LABEL), inputs)
    return Findings(problems, warnings)
