"""What `admission.mode: enforce` would refuse on a cluster, and why: the report a platform
engineer reads before switching audit mode to enforce (docs/operators/adopting.md).

    venv/bin/python scripts/admission_report.py --context <context> [--kubeconfig <file>]
        [--output table|json]

It asks the cluster's own admission webhooks, so the answer is the policy the stack deployed,
in whatever mode. First it applies the reachability probe as a server-side dry run: that goes
to OPA's decision through a webhook that fails closed, so it stops here when OPA does not
answer (in audit mode the pod webhooks fail open, and every dry run would come back admitted
without OPA having been asked). Then each workload that runs now (one per Deployment's
ReplicaSet, StatefulSet, DaemonSet, Job or bare pod), and each workload of a pod labelled as
admitted against the rules in audit mode, has one of its pods created again as a server-side
dry run, as its controller would create it (the identity it creates pods as). A labelled pod
whose workload would be admitted now (labelled before a fix or an exemption) is reported apart
and counts as admitted. Nothing is created. The summary line goes to stderr.

Exit status:
  0  every workload was checked, and enforce would refuse none
  1  every workload was checked, and enforce would refuse some
  2  the cluster cannot be asked: unreachable, the platform's reachability webhook not
     registered, or OPA not answering through it
  3  some workloads could not be checked (the dry run failed for a reason other than the
     platform's webhooks: impersonation refused, another webhook or a quota refused it, ...):
     the report is incomplete, whatever it found for the others

Needs the rights of `kubectl create --dry-run=server --as=<controller>`, to list pods and
webhook configurations, and to apply the probe ConfigMap (cluster-admin has them).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import requests

from components.base.facts import AUDIT_LABEL
from components.opa_admission.webhooks import PROBE_LABEL, REACHABILITY_PROBE
from components.platform.settings import ClusterSettings
from components.preview import cluster as stack_cluster

# What the platform's webhooks put before each violation in audit mode.
AUDIT_PREFIX = "gpu-platform audit: "
# Who creates a controller's pods (kube-controller-manager with its controllers' own
# ServiceAccounts), by the kind of the pod's controller.
CREATORS = {"ReplicaSet": "replicaset-controller", "StatefulSet": "statefulset-controller",
            "DaemonSet": "daemon-set-controller", "Job": "job-controller"}
# Fields the API server sets on a pod, which a create may not carry.
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation",
              "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")
# Pods per list request: each page is a bounded request however large the cluster.
# The field manager of the probe's dry-run apply (it sets only the label the webhook selects).
FIELD_MANAGER = "gpu-platform-admission-report"
WEBHOOK_CONFIGURATIONS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
WEBHOOK_DENIED = re.compile(r'admission webhook "([^"]+)" denied the request: (.*)', re.DOTALL)
WEBHOOK_FAILED = re.compile(r'failed calling webhook "([^"]+)"')


class CannotAsk(Exception):
    """The cluster cannot tell what enforce would refuse; the message says why."""


@dataclass
class Workload:
    namespace: str
    kind: str
    name: str
    pods: list[str] = field(default_factory=list)
    # What enforce would refuse its next pod for.
    refused: list[str] = field(default_factory=list)
    # Why its dry run did not reach a verdict of the platform's webhooks, in short, and the API
    # server's answer.
    not_checked: str = ""
    error: str = ""
    # Its pods labelled as admitted against the rules in audit mode.
    labelled: list[str] = field(default_factory=list)


@dataclass
class Report:
    workloads: int
    refused: list[Workload]
    not_checked: list[Workload]
    labelled_earlier_admitted_now: list[Workload]

    def exit_status(self) -> int:
        return 3 if self.not_checked else 1 if self.refused else 0

    def summary(self) -> str:
        if self.not_checked:
            causes = Counter(w.not_checked for w in self.not_checked)
            why = ", ".join(f"{cause} ({count})" for cause, count in sorted(causes.items()))
            return (f"{len(self.not_checked)} of {self.workloads} workloads could not be checked, "
                    f"so the report is incomplete: {why}; of the others, enforce would refuse "
                    f"{len(self.refused)}")
        labelled = len(self.labelled_earlier_admitted_now)
        return (f"{self.workloads} workloads checked: enforce would refuse {len(self.refused)}"
                + (f"; {labelled} with pods labelled earlier, admitted now" if labelled else ""))


def controller(pod: dict) -> dict | None:
    return next((o for o in pod["metadata"].get("ownerReferences") or []
                 if o.get("controller")), None)


def runs(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and pod.get("status", {}).get(
        "phase") not in ("Succeeded", "Failed")


def labelled(pod: dict) -> bool:
    return (pod["metadata"].get("labels") or {}).get(AUDIT_LABEL) == "violation"


def set_by_creator(pod: dict, path: tuple[str, ...]) -> bool:
    """Whether the pod's creator set the field (a scheduler's binding records no field owner)."""
    for entry in pod["metadata"].get("managedFields") or []:
        if entry.get("subresource"):
            continue
        fields: Any = entry.get("fieldsV1") or {}
        for key in path:
            fields = fields.get(f"f:{key}") if isinstance(fields, dict) else None
        if fields is not None:
            return True
    return False


def as_created(pod: dict) -> dict:
    """The pod as it was submitted: what the server set removed, a node only if its creator
    named one, and a name generated (a dry run beside the running pod)."""
    created = copy.deepcopy(pod)
    created.pop("status", None)
    meta = created["metadata"]
    for key in SERVER_SET:
        meta.pop(key, None)
    meta["generateName"] = meta.pop("name") + "-"
    if not set_by_creator(pod, ("spec", "nodeName")):
        created["spec"].pop("nodeName", None)
    # Debug containers are added to a running pod, never created with it.
    created["spec"].pop("ephemeralContainers", None)
    # The Priority admission plugin resolves the class again; a given priority must match it.
    created["spec"].pop("priority", None)
    return created


def creator(pod: dict) -> str | None:
    """The user the pod's controller creates it as; None for a bare pod (its creator is not
    recorded: the report's own user is asked)."""
    owner = controller(pod)
    if owner and owner["kind"] in CREATORS:
        return f"system:serviceaccount:kube-system:{CREATORS[owner['kind']]}"
    return None


def workloads_of(pods: Iterable[dict]) -> list[tuple[Workload, dict]]:
    """Each workload that runs now or has a labelled pod, once, with the pod to check it by (a
    running one when it has one). Keeps one pod per workload, however many `pods` yields."""
    found: dict[tuple[str, str, str], tuple[Workload, dict]] = {}
    for pod in pods:
        if not (runs(pod) or labelled(pod)):
            continue
        meta, owner = pod["metadata"], controller(pod)
        kind, name = (owner["kind"], owner["name"]) if owner else ("Pod", meta["name"])
        key = (meta["namespace"], kind, name)
        workload, checked_by = found.get(key) or (Workload(*key), pod)
        if runs(pod):
            workload.pods.append(meta["name"])
            if not runs(checked_by):
                checked_by = pod
        if labelled(pod):
            workload.labelled.append(meta["name"])
        found[key] = (workload, checked_by)
    return list(found.values())


def message_of(response: requests.Response) -> str:
    if response.headers.get("Content-Type", "").startswith("application/json"):
        return response.json().get("message", response.text)
    return response.text


def not_checked_because(status: int, message: str) -> str:
    """In short, why a dry run that failed reached no verdict of the platform's webhooks."""
    if "cannot impersonate" in message:
        return "impersonation refused"
    denied, failed = WEBHOOK_DENIED.search(message), WEBHOOK_FAILED.search(message)
    if denied:
        return f"refused by the webhook {denied[1]}"
    if failed:
        return f"no answer from the webhook {failed[1]}"
    if "quota" in message:
        return "refused by a quota"
    return f"HTTP {status}"


def check(workload: Workload, response: requests.Response, platform_webhooks: set[str]) -> None:
    """Record a dry run's answer: what the platform's webhooks would refuse (their refusal, or
    their warnings in audit mode), or why it reached no verdict of theirs."""
    warnings = stack_cluster.api_warnings(response)
    workload.refused = [w[w.index(AUDIT_PREFIX) + len(AUDIT_PREFIX):] for w in warnings
                        if AUDIT_PREFIX in w]
    # Audit warnings are the platform's verdict, whatever else then failed the dry run.
    if response.ok or workload.refused:
        return
    message = message_of(response)
    denied = WEBHOOK_DENIED.search(message)
    if denied and denied[1] in platform_webhooks:
        workload.refused = [denied[2]]
        return
    workload.not_checked = not_checked_because(response.status_code, message)
    workload.error = f"HTTP {response.status_code}: {message}"


class Cluster(stack_cluster.ClusterReader):
    """The cluster, asked as the report's user: its pods, its webhooks, and dry runs."""

    def __init__(self, cluster: ClusterSettings):
        super().__init__(cluster, timeout=60)

    def pods(self) -> Iterator[dict]:
        """Every pod, a page at a time."""
        return self.pages("/api/v1/pods")

    def webhooks(self) -> list[dict]:
        return [webhook for kind in WEBHOOK_CONFIGURATIONS
                for configuration in self.items(f"/apis/admissionregistration.k8s.io/v1/{kind}")
                for webhook in configuration.get("webhooks") or []]

    def probe_dry_run(self, namespace: str) -> requests.Response:
        probe = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": REACHABILITY_PROBE, "namespace": namespace,
                              "labels": dict([PROBE_LABEL])}}
        return self.request(
            "PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{REACHABILITY_PROBE}",
            params={"dryRun": "All", "fieldManager": FIELD_MANAGER}, data=json.dumps(probe),
            headers={"Content-Type": "application/apply-patch+yaml"})

    def dry_run(self, pod: dict, user: str | None) -> requests.Response:
        headers = {"Impersonate-User": user} if user else {}
        return self.request(
            "POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods",
            params={"dryRun": "All"}, json=pod, headers=headers)


def platform_webhooks(cluster: Cluster) -> tuple[str, set[str]]:
    """OPA's namespace and the names of the platform's webhooks (those that call a Service
    there), found from the reachability webhook the cluster has registered."""
    webhooks = cluster.webhooks()
    reachability = next((w for w in webhooks if (w.get("objectSelector") or {}).get(
        "matchLabels") == dict([PROBE_LABEL])), None)
    if reachability is None:
        raise CannotAsk("no reachability webhook is registered (a webhook selecting the label "
                        f"{'='.join(PROBE_LABEL)}): is the platform installed on this cluster?")
    namespace = reachability["clientConfig"]["service"]["namespace"]
    return namespace, {w["name"] for w in webhooks
                       if (w["clientConfig"].get("service") or {}).get("namespace") == namespace}


def report(cluster: Cluster) -> Report:
    namespace, webhooks = platform_webhooks(cluster)
    answer = cluster.probe_dry_run(namespace)
    if not answer.ok:
        raise CannotAsk(
            f"OPA does not answer through the reachability webhook (HTTP {answer.status_code}: "
            f"{message_of(answer)}); until it does, no dry run is decided by the policy (see "
            f"docs/operators/troubleshooting.md#pulumi-up-fails-at-webhook-reachability)")
    workloads = workloads_of(cluster.pods())
    for workload, pod in workloads:
        check(workload, cluster.dry_run(as_created(pod), creator(pod)), webhooks)
    ordered = sorted((w for w, _ in workloads), key=lambda w: (w.namespace, w.kind, w.name))
    return Report(
        workloads=len(ordered),
        refused=[w for w in ordered if w.refused],
        not_checked=[w for w in ordered if w.not_checked],
        labelled_earlier_admitted_now=[w for w in ordered if w.labelled and not w.refused
                                       and not w.not_checked])


def table(found: Report) -> str:
    lines = []
    for w in found.refused + found.not_checked:
        lines.append(f"{w.namespace}/{w.kind}/{w.name} ({len(w.pods)} running pods)")
        lines += [f"  would be refused: {message}" for message in w.refused]
        if w.not_checked:
            lines.append(f"  not checked, {w.not_checked}: {w.error}")
        if w.labelled:
            lines.append(f"  admitted against the rules in audit mode: "
                         f"{', '.join(sorted(w.labelled))}")
    if found.labelled_earlier_admitted_now:
        lines.append("Labelled earlier, admitted now (fixed or exempted since):")
        lines += [f"  {w.namespace}/{w.kind}/{w.name}: {', '.join(sorted(w.labelled))}"
                  for w in found.labelled_earlier_admitted_now]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--context", required=True, help="the stack's cluster.context")
    parser.add_argument("--kubeconfig", help="the stack's cluster.kubeconfig (default: as "
                                             "kubectl finds it)")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    try:
        cluster = Cluster(ClusterSettings(context=args.context, kubeconfig=args.kubeconfig))
    except stack_cluster.ClusterUnreachable as error:
        print(f"admission_report: {error}", file=sys.stderr)
        return 2
    try:
        found = report(cluster)
    except (CannotAsk, stack_cluster.ClusterUnreachable, stack_cluster.NotAllowed) as error:
        print(f"admission_report: {error}", file=sys.stderr)
        return 2
    finally:
        cluster.close()
    if args.output == "json":
        print(json.dumps({"workloads": found.workloads, **{
            section: [asdict(w) for w in getattr(found, section)]
            for section in ("refused", "not_checked", "labelled_earlier_admitted_now")}},
            indent=2))
    elif text := table(found):
        print(text)
    print(f"admission_report: {found.summary()}", file=sys.stderr)
    return found.exit_status()


if __name__ == "__main__":
    sys.exit(main())
