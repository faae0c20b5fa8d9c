"""The identity `pulumi preview` runs as in pull requests, made from what the stack declares and
what its preview reads, so that a kind the program comes to declare or read cannot be missed:

- on every object the stack declares, the rights a preview uses (read it, and dry-run its
  server-side apply, which creates where nothing exists yet), in the object's namespace, or
  cluster-wide for a cluster-scoped kind; `escalate` on the roles it declares and `bind` on
  those its bindings name, which writing RBAC needs; reading every object of the kind an
  admission policy takes its parameters from, which writing the policy needs;
- on a Secret, only on the Secrets the stack declares, by name; where it installs a Helm
  release, the release records Helm keeps as Secrets of the release's namespace;
- each read of the preview's survey (components/preview/conflicts.py and the existing
  stacks' reads), by name where it reads one object.

RBAC cannot tell a dry run from a write, so a ValidatingAdmissionPolicy refuses every request of
this identity that is not a dry run. The stack exports it as `previewAccess`; a test applies it
for a matrix of stacks and previews each as it (tests/integration/test_preview_access.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import yaml

from ..base.charts import HELM_RELEASE
from ..base.component import Declared
from ..base.model import Read
from ..monitoring import existing_stack
from ..platform.settings import StackSettings
from ..platform.wiring import component_inputs
from .conflicts import ADVICE, CHECKS
from .existing_kueue import KueueReads
from .framework_crds import framework_reads
from .prices import price_reads

NAME = "gpu-platform-preview"
NAMESPACE = NAME
USER = f"system:serviceaccount:{NAMESPACE}:{NAME}"
SECRETS_ROLE = f"{NAME}-secrets"
DECLARED_VERBS = ("get", "list", "watch", "create", "patch")
RBAC_API = "rbac.authorization.k8s.io"
# Kinds whose plural is not the kind's name with an `s`.
_PLURALS = {"Topology": "topologies", "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
            "PriorityClass": "priorityclasses", "DeviceClass": "deviceclasses",
            "WorkloadPriorityClass": "workloadpriorityclasses"}


def resource_of(kind: str) -> str:
    """The resource (plural) of a kind the program declares, as the API server serves it
    (tests/integration/test_preview_access.py checks each against discovery)."""
    return _PLURALS.get(kind, kind.lower() + "s")


def preview_reads(settings: StackSettings) -> list[Read]:
    """Every read the stack's preview makes of the cluster."""
    reads = [read for found in (*CHECKS, *ADVICE) if found.applies(settings)
             for read in found.reads]
    reads += KueueReads(settings).all() + framework_reads(settings) + price_reads(settings)
    if settings.monitoring.stack == "existing":
        reads += existing_stack.reads(component_inputs(settings).monitoring).values()
    return list(dict.fromkeys(reads))


@dataclass(frozen=True)
class _Grant:
    namespace: str | None        # None: cluster-wide
    group: str
    resource: str
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()  # resourceNames; empty: every object


def _grants(declared: Iterable[Declared], reads: Iterable[Read]) -> set[_Grant]:
    grants: set[_Grant] = set()
    secrets: dict[str, set[str]] = {}
    for obj in declared:
        if (obj.api_version, obj.kind) == HELM_RELEASE:
            # Helm's records of the release: Secrets it lists and reads by its labels.
            grants.add(_Grant(obj.namespace, "", "secrets", ("get", "list")))
            continue
        if (obj.api_version, obj.kind) == ("v1", "Secret"):
            secrets.setdefault(obj.namespace or "", set()).add(obj.name)
            continue
        group = obj.api_version.rpartition("/")[0]
        grants.add(_Grant(obj.namespace, group, resource_of(obj.kind), DECLARED_VERBS))
        # Writing a role, dry run or not, needs `escalate` unless the identity holds every
        # right it grants; binding one, `bind` on that role.
        if group == RBAC_API and obj.role_ref is None:
            grants.add(_Grant(obj.namespace, RBAC_API, resource_of(obj.kind), ("escalate",)))
        elif group == RBAC_API and obj.role_ref is not None:
            kind, role = obj.role_ref
            grants.add(_Grant(obj.namespace, RBAC_API, resource_of(kind), ("bind",), (role,)))
        # Writing an admission policy with parameters needs to read every object of their kind.
        if obj.param_kind:
            api_version, kind = obj.param_kind
            grants.add(_Grant(None, api_version.rpartition("/")[0], resource_of(kind),
                              ("get", "list")))
    for namespace, names in secrets.items():
        grants.add(_Grant(namespace, "", "secrets", ("get", "create", "patch"),
                          tuple(sorted(names))))
    for read in reads:
        grants.add(_Grant(read.namespace, read.group, read.resource, (read.rbac_verb,),
                          (read.name,) if read.name else ()))
    return grants


def _covered(grant: _Grant, grants: set[_Grant]) -> bool:
    """Whether another grant gives all `grant` does."""
    return any(other != grant and other.namespace == grant.namespace
               and other.group == grant.group and other.resource == grant.resource
               and set(grant.verbs) <= set(other.verbs)
               and (not other.names or set(grant.names) <= set(other.names))
               for other in grants)


def _rules(grants: set[_Grant]) -> list[dict]:
    """RBAC rules for the grants of one scope: one per group and verbs of its resources, and
    one per group, resource and verbs of the objects it names."""
    grants = {g for g in grants if not _covered(g, grants)}
    every: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    named: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for grant in grants:
        if grant.names:
            named.setdefault((grant.group, grant.resource, grant.verbs), set()).update(
                grant.names)
        else:
            every.setdefault((grant.group, grant.verbs), set()).add(grant.resource)
    rules = [{"apiGroups": [group], "resources": sorted(resources), "verbs": list(verbs)}
             for (group, verbs), resources in sorted(every.items())]
    rules += [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs),
               "resourceNames": sorted(names)}
              for (group, resource, verbs), names in sorted(named.items())]
    return rules


def _subject() -> dict:
    return {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}


def _role_ref(kind: str) -> dict:
    return {"apiGroup": RBAC_API, "kind": kind, "name": NAME}


def preview_access(declared: Iterable[Declared], reads: Iterable[Read]) -> list[dict]:
    """The preview identity's objects: its namespace and ServiceAccount, a ClusterRole for what
    is cluster-wide and a Role in each namespace for the rest, their bindings, and the policy
    that lets it only dry-run."""
    grants = _grants(declared, reads)
    namespaces = sorted({g.namespace for g in grants if g.namespace})
    rbac = f"{RBAC_API}/v1"
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": NAME},
         "rules": _rules({g for g in grants if g.namespace is None})},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": NAME},
         "roleRef": _role_ref("ClusterRole"), "subjects": [_subject()]}]
    for namespace in namespaces:
        objects += [
            {"apiVersion": rbac, "kind": "Role", "metadata": {"name": NAME, "namespace": namespace},
             "rules": _rules({g for g in grants if g.namespace == namespace})},
            {"apiVersion": rbac, "kind": "RoleBinding",
             "metadata": {"name": NAME, "namespace": namespace},
             "roleRef": _role_ref("Role"), "subjects": [_subject()]}]
    admission = "admissionregistration.k8s.io/v1"
    return objects + [
        {"apiVersion": admission, "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": f"{NAME}-dry-run-only"},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{
                      "apiGroups": ["*"], "apiVersions": ["*"],
                      "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
                      "resources": ["*/*"]}]},
                  "matchConditions": [{"name": "preview-identity",
                                       "expression": f"request.userInfo.username == '{USER}'"}],
                  "validations": [{"expression": "request.dryRun == true",
                                   "message": "the pull-request preview identity may only "
                                              "dry-run (pulumi preview); it changes nothing"}]}},
        {"apiVersion": admission, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": f"{NAME}-dry-run-only"},
         "spec": {"policyName": f"{NAME}-dry-run-only", "validationActions": ["Deny"]}}]


HEADER = """\
# The identity `pulumi preview` runs as in pull requests, for this stack: it may read what the
# program declares and what its preview reads of the cluster, and dry-run its changes, and
# nothing else (a ValidatingAdmissionPolicy refuses every request of it that is not a dry run).
# Generated from what the stack declares: `pulumi stack output previewAccess`; apply it after
# the first `pulumi up`, and again when the stack changes (docs/operators/pull-request-previews.md):
#
#   kubectl apply --server-side -f preview-access.yaml
#   kubectl -n gpu-platform-preview create token gpu-platform-preview --duration=720h
"""


def preview_access_yaml(declared: Iterable[Declared], settings: StackSettings) -> str:
    """The preview identity of a stack, as the file `kubectl apply` takes."""
    return HEADER + yaml.safe_dump_all(preview_access(declared, preview_reads(settings)),
                                       sort_keys=False, explicit_start=True)
