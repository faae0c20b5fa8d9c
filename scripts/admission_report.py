"""What `admission.mode: enforce` would refuse on a cluster, and why: the report a platform
engineer reads before switching audit mode to enforce (docs/operators/adopting.md).

    venv/bin/python scripts/admission_report.py --context <context> [--kubeconfig <file>]
        [--output table|json]

It asks the cluster's own admission webhooks, so the answer is the policy the stack deployed,
in whatever mode: each workload's pod (one per Deployment, StatefulSet, DaemonSet, Job or bare
pod that runs now), created again as a server-side dry run, as its controller would create it
(the identity it creates pods as), and the pods labelled as admitted against the rules since
audit mode was on. Nothing is created. Exit status: 0 when enforce would refuse nothing, 1 when
it would, 2 when the cluster cannot be asked. Needs the rights of `kubectl create
--dry-run=server --as=<controller>` (cluster-admin has them).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from components.base.facts import AUDIT_LABEL  # noqa: E402
from components.platform import stack_cluster  # noqa: E402
from components.platform.settings import ClusterSettings  # noqa: E402

# What the platform's webhooks put before each violation in audit mode.
AUDIT_PREFIX = "gpu-platform audit: "
# Who creates a controller's pods (kube-controller-manager with its controllers' own
# ServiceAccounts), by the kind of the pod's controller.
CREATORS = {"ReplicaSet": "replicaset-controller", "StatefulSet": "statefulset-controller",
            "DaemonSet": "daemon-set-controller", "Job": "job-controller"}
# Fields the API server sets on a pod, which a create may not carry.
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation",
              "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")


@dataclass
class Workload:
    namespace: str
    kind: str
    name: str
    pods: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    unchecked: str = ""
    labelled: list[str] = field(default_factory=list)


def controller(pod: dict) -> dict | None:
    return next((o for o in pod["metadata"].get("ownerReferences") or []
                 if o.get("controller")), None)


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


def workloads_of(pods: list[dict]) -> dict[tuple[str, str, str], tuple[Workload, dict]]:
    """Each running workload once, with one of its pods."""
    found: dict[tuple[str, str, str], tuple[Workload, dict]] = {}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") or pod.get("status", {}).get("phase") in (
                "Succeeded", "Failed"):
            continue
        owner = controller(pod)
        kind, name = (owner["kind"], owner["name"]) if owner else ("Pod", pod["metadata"]["name"])
        key = (pod["metadata"]["namespace"], kind, name)
        workload, _ = found.setdefault(key, (Workload(*key), pod))
        workload.pods.append(pod["metadata"]["name"])
    return found


def verdict(response: requests.Response) -> tuple[list[str], str]:
    """(what enforce would refuse, why it could not be checked)."""
    warnings = stack_cluster.api_warnings(response)
    audited = [w[w.index(AUDIT_PREFIX) + len(AUDIT_PREFIX):] for w in warnings
               if AUDIT_PREFIX in w]
    if response.ok:
        return audited, ""
    message = (response.json() if response.headers.get("Content-Type", "").startswith(
        "application/json") else {}).get("message", response.text)
    if response.status_code == 403 and "admission webhook" in message:
        return [message.split("denied the request: ", 1)[-1]], ""
    return audited, f"HTTP {response.status_code}: {message}"


class Cluster:
    def __init__(self, cluster: ClusterSettings):
        self.server, options, ca = stack_cluster.endpoint(cluster)
        credentials, made = stack_cluster.user_credentials(cluster)
        self.made = [f for f in (ca, *made) if f]
        self.session = requests.Session()
        # Given with each request: a session's own `verify` gives way to REQUESTS_CA_BUNDLE.
        self.options = options
        self.session.cert = credentials.get("cert")
        self.session.headers.update(credentials.get("headers", {}))

    def close(self) -> None:
        for path in self.made:
            os.unlink(path)

    def pods(self, selector: str | None = None) -> list[dict]:
        params = {"labelSelector": selector} if selector else {}
        reply = self.session.get(f"{self.server}/api/v1/pods", params=params, timeout=60,
                                 **self.options)
        reply.raise_for_status()
        return reply.json()["items"]

    def dry_run(self, pod: dict, user: str | None) -> requests.Response:
        headers = {"Impersonate-User": user} if user else {}
        return self.session.post(
            f"{self.server}/api/v1/namespaces/{pod['metadata']['namespace']}/pods",
            params={"dryRun": "All"}, json=pod, headers=headers, timeout=60, **self.options)


def report(cluster: Cluster) -> list[Workload]:
    workloads = workloads_of(cluster.pods())
    for workload, pod in workloads.values():
        workload.refused, workload.unchecked = verdict(cluster.dry_run(as_created(pod),
                                                                      creator(pod)))
    for pod in cluster.pods(f"{AUDIT_LABEL}=violation"):
        owner = controller(pod)
        kind, name = (owner["kind"], owner["name"]) if owner else ("Pod", pod["metadata"]["name"])
        key = (pod["metadata"]["namespace"], kind, name)
        workload, _ = workloads.setdefault(key, (Workload(*key), pod))
        workload.labelled.append(pod["metadata"]["name"])
    return sorted((w for w, _ in workloads.values() if w.refused or w.unchecked or w.labelled),
                  key=lambda w: (w.namespace, w.kind, w.name))


def table(found: list[Workload]) -> str:
    if not found:
        return "Nothing that runs now would be refused in enforce mode."
    lines = []
    for w in found:
        lines.append(f"{w.namespace}/{w.kind}/{w.name} ({len(w.pods)} running pods)")
        lines += [f"  would be refused: {message}" for message in w.refused]
        if w.unchecked:
            lines.append(f"  not checked: {w.unchecked}")
        if w.labelled:
            lines.append(f"  admitted against the rules in audit mode: "
                         f"{', '.join(sorted(w.labelled))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    except requests.RequestException as error:
        print(f"admission_report: {error}", file=sys.stderr)
        return 2
    finally:
        cluster.close()
    if args.output == "json":
        print(json.dumps([w.__dict__ for w in found], indent=2))
    else:
        print(table(found))
    return 1 if any(w.refused or w.labelled for w in found) else 0


if __name__ == "__main__":
    sys.exit(main())
