"""The pull-request preview identity each stack exports (`previewAccess`), through real API
servers of both Kubernetes releases the suite runs (the example stack's and the DRA path's), for
a matrix of stacks that between them declare every kind the program can: the example stack, the
minimal one and those of each kind of cluster, teams with a topology and idle reclaim, the
existing monitoring stack and Kueue, the DRA path with teams in mutate mode.

For each stack: every object it declares is accepted by the API server (server-side apply, as a
dry run and for real); its identity dry-runs every object, creating it and then changing it, and
makes every read its preview makes, with no refusal; it can write nothing, and it reads no
Secret the stack does not declare. Kueue's and the Prometheus Operator's CRDs (from their
modules) are served; their controllers and webhooks do not run here (tests/integration/
test_kueue.py and test_existing_monitoring.py run them)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from components.base.component import _KINDS
from components.base.facts import KUEUE_API
from components.monitoring import existing_stack
from components.platform.settings import ClusterSettings, StackSettings
from components.preview.access import NAME, NAMESPACE, preview_reads, resource_of
from components.preview.cluster import ClusterReader
from components.preview.conflicts import survey
from components.preview.existing_kueue import KueueReads, read_kueue
from components.preview.framework_crds import CRD_READS
from tests.kit import harness, tools
from tests.kit.cluster import prometheus_operator
from tests.kit.cluster.controlplane import ApiError, ControlPlane, Kube, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, TestCertificates, declared
from tests.kit.cluster.kueue import crds as kueue_crds
from tests.kit.cluster.nodes_and_pods import create_node
from tests.kit.stacks import TEAMS, with_changes

EXAMPLES = harness.ROOT / "docs" / "operators" / "examples"
# A preview applies as the field manager that `pulumi up` used.
MANAGER = TEST_MANAGER
# The control plane's release: the example stack's, and the DRA path's.
RELEASES = (None, tools.DRA_KUBERNETES_VERSION)


def _stack(**sections) -> dict[str, str]:
    return harness.stack_file_config(with_changes(kubernetesVersion="1.36.4", **sections))


# Every stack of the matrix, as the config Pulumi hands the program (None: the example stack).
STACKS: dict[str, dict[str, str] | None] = {
    "example": None,
    **{path.name.removeprefix("Pulumi.").removesuffix(".yaml"):
       harness.stack_file_engine_config(path) for path in sorted(EXAMPLES.glob("Pulumi.*.yaml"))},
    "topology-reclaim-reservation-remediation": _stack(
        teams={**TEAMS, "topology": {"preset": "eks"}},
        reclaim={"enabled": True, "action": "evict", "teams": ["research"],
                 "namespaces": ["notebooks"]}, reservation={"enabled": True},
        remediation={"mode": "drain"}),
    "existing-stacks": _stack(monitoring={"stack": "existing"},
                              teams={**TEAMS, "kueue": {"mode": "existing"}}),
    "dra-mutate": harness.stack_file_config(with_changes(
        kubernetesVersion=tools.DRA_KUBERNETES_VERSION, gpuOperator={"gpuPath": "dra"},
        admission={"mode": "mutate"}, teams=TEAMS, reservation={"enabled": True},
        remediation={"mode": "drain"})),
}
# Only the DRA path's release serves what its stack declares.
ON_1_36 = [name for name in STACKS if name != "dra-mutate"]


# Registered for real, they would send what later stacks apply to an OPA that does not run here:
# the identity dry-runs them, and the admin applies them as a dry run only.
WEBHOOK_CONFIGURATIONS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


@dataclass
class Stack:
    settings: StackSettings
    objects: list[dict]
    access: list[dict]


@functools.cache
def stack(name: str) -> Stack:
    config = STACKS[name]
    run = harness.run_program(config)
    settings = harness.example_settings() if config is None else harness.settings_of(config)
    access = run.exports["previewAccess"]
    objects = declared(run, TestCertificates(harness.inputs_of(settings).admission))
    return Stack(settings, objects.objects + objects.node_patches,
                 [o for o in yaml.safe_load_all(access) if o])


def test_the_matrix_declares_every_kind_the_program_declares_directly():
    kinds = {(o["apiVersion"], o["kind"]) for name in STACKS for o in stack(name).objects}
    assert set(_KINDS) <= kinds, f"no stack of the matrix declares {set(_KINDS) - kinds}"


@pytest.fixture(scope="module", params=RELEASES, ids=("example-release", "dra-release"))
def cluster(request) -> Iterator[ControlPlane]:
    cp = ControlPlane(kubernetes=request.param).start()
    try:
        cp.admin.install_crds(kueue_crds() + prometheus_operator.crds(), TEST_MANAGER)

        def listed() -> bool:
            try:
                return all(cp.admin.list(KUEUE_API, kind) is not None
                           for kind in ("ClusterQueue", "ResourceFlavor", "Topology"))
            except ApiError:    # 429 while their storage initializes
                return False
        wait_until(listed, "Kueue's kinds to be stored", timeout=30)
        yield cp
    finally:
        cp.stop()


def served_on(cluster: ControlPlane, name: str) -> bool:
    return name in ON_1_36 or cluster.kubernetes == tools.DRA_KUBERNETES_VERSION


def identity(cluster: ControlPlane, access: list[dict]) -> Kube:
    """The stack's preview identity, its rights alone (those of an earlier stack removed), once
    the dry-run-only policy refuses its writes."""
    admin = cluster.admin
    roles = admin.request("GET", "/apis/rbac.authorization.k8s.io/v1/roles",
                          what="list Roles")["items"]
    for role in roles:
        if role["metadata"]["name"] == NAME:
            admin.delete("rbac.authorization.k8s.io/v1", "Role", NAME,
                         role["metadata"]["namespace"])
    # The namespaces its Roles live in: those the stack declares, and those it works in (a
    # reclaimed namespace of the users').
    for role in access:
        if role["kind"] == "Role":
            admin.apply({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": role["metadata"]["namespace"]}}, "users")
    for obj in access:
        admin.apply(obj, TEST_MANAGER)
    kube = cluster.client(cluster.service_account_token(NAMESPACE, NAME))
    namespace = next(o for o in access if o["kind"] == "Namespace")

    def refused() -> bool:
        try:
            kube.apply(namespace, MANAGER)
            return False
        except ApiError as error:
            return "may only dry-run" in error.message
    wait_until(refused, "the dry-run-only policy to take effect", timeout=30)
    return kube


def dry_run_all(kube: Kube, objects: list[dict]) -> dict[str, str]:
    """Each object the identity may not dry-run, with the API server's answer."""
    refused = {}
    for obj in objects:
        try:
            kube.apply(obj, MANAGER, dry_run=True)
        except ApiError as error:
            refused[f"{obj['kind']} {obj['metadata'].get('namespace')}/"
                    f"{obj['metadata']['name']}"] = f"{error.status}: {error.message}"
    return refused


@pytest.mark.parametrize("name", list(STACKS))
def test_the_identity_previews_the_stack_and_changes_nothing(cluster, name):
    if not served_on(cluster, name):
        pytest.skip(f"{name} declares what Kubernetes {cluster.kubernetes} does not serve")
    admin, declared_stack = cluster.admin, stack(name)
    # Kueue refuses to take a flavor's topology away: the stacks without one start afresh.
    for kind in ("ClusterQueue", "ResourceFlavor", "Topology"):
        for obj in admin.list(KUEUE_API, kind):
            admin.delete(KUEUE_API, kind, obj["metadata"]["name"])
    # The cluster's GPU nodes the stack names, and its namespaces (the Roles live there).
    for obj in declared_stack.objects:
        if obj["kind"] == "Node" and not admin.list("v1", "Node",
                                                    fieldSelector=f"metadata.name="
                                                                  f"{obj['metadata']['name']}"):
            create_node(admin, obj["metadata"]["name"])
        elif obj["kind"] == "Namespace":
            admin.apply(obj, TEST_MANAGER)
    kube = identity(cluster, declared_stack.access)
    # Before the first `pulumi up` has made them (but their namespaces): a dry-run create. The
    # API server refuses a binding of an admission policy with parameters that does not exist
    # yet to anyone who may not list every resource (docs/operators/pull-request-previews.md).
    refused = dry_run_all(kube, declared_stack.objects)
    refused = {k: v for k, v in refused.items() if not (
        k.startswith("ValidatingAdmissionPolicyBinding ")
        and "unable to get policy" in v and "to determine minimum required permissions" in v)}
    assert refused == {}, "\n".join(f"{k}: {v}" for k, v in refused.items())
    # Every object is accepted by the API server; then a preview of changes patches them.
    for obj in declared_stack.objects:
        admin.apply(obj, TEST_MANAGER, dry_run=obj["kind"] in WEBHOOK_CONFIGURATIONS)
    refused = dry_run_all(kube, declared_stack.objects)
    assert refused == {}, "\n".join(f"{k}: {v}" for k, v in refused.items())
    # Nothing for real, not even what it may dry-run.
    probe = next(o for o in declared_stack.objects if o["kind"] == "ConfigMap")
    with pytest.raises(ApiError) as refused:
        kube.apply({**probe, "metadata": {**probe["metadata"], "labels": {"changed-by": "pr"}}},
                   MANAGER)
    assert "may only dry-run" in refused.value.message


@pytest.mark.parametrize("name", list(STACKS))
def test_the_identity_reads_what_the_preview_reads(cluster, name):
    if not served_on(cluster, name):
        pytest.skip(f"{name} declares what Kubernetes {cluster.kubernetes} does not serve")
    declared_stack = stack(name)
    token = cluster.service_account_token(NAMESPACE, NAME)
    identity(cluster, declared_stack.access)
    settings = declared_stack.settings.model_copy(update={"cluster": ClusterSettings(
        context="test", kubeconfig=str(cluster.kubeconfig("preview", token=token)))})
    reads = preview_reads(settings)
    assert reads, "the preview reads nothing"
    with ClusterReader(settings.cluster) as reader:
        # The preview's own checks, as they read: nothing is left unchecked for want of a right.
        assert survey(settings, reader).not_checked == []
        if settings.teams.enabled and not settings.teams.kueue.installs_chart:
            found = read_kueue(reader, KueueReads(settings),
                               settings.teams.kueue.existing.service_account)
            assert found.unread == []
        if settings.monitoring.stack == "existing":
            existing_stack.survey(reader, harness.inputs_of(settings).monitoring)
        if settings.teams.enabled:
            for read in CRD_READS.values():
                reader.get(read.path())
        for read in reads:
            reader.get(read.path(read.name or "any")) if read.rbac_verb == "get" \
                else reader.items(read.path())


@pytest.mark.parametrize("name", list(STACKS))
def test_the_identity_reads_no_secret_the_stack_does_not_declare(cluster, name):
    if not served_on(cluster, name):
        pytest.skip(f"{name} declares what Kubernetes {cluster.kubernetes} does not serve")
    admin, declared_stack = cluster.admin, stack(name)
    kube = identity(cluster, declared_stack.access)
    settings = declared_stack.settings
    declared_secrets = {(o["metadata"]["namespace"], o["metadata"]["name"])
                        for o in declared_stack.objects if o["kind"] == "Secret"}
    # Helm keeps its release records in the releases' namespaces, which a preview reads.
    releases = {settings.gpu_operator.namespace,
                *([settings.monitoring.namespace] if settings.monitoring.stack == "install"
                  else []),
                *([settings.teams.kueue.namespace] if settings.teams.enabled
                  and settings.teams.kueue.installs_chart else [])}
    for namespace in {"default", settings.monitoring.namespace, settings.admission.namespace,
                      settings.teams.kueue.namespace, *settings.teams.team_namespaces}:
        admin.apply({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": namespace}}, TEST_MANAGER)
        admin.apply({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "someone-elses", "namespace": namespace},
                     "stringData": {"key": "value"}}, TEST_MANAGER)
        if namespace in releases:
            continue
        with pytest.raises(ApiError) as refused:
            kube.get("v1", "Secret", "someone-elses", namespace)
        assert refused.value.status == 403, namespace
    for obj in declared_stack.objects:
        if obj["kind"] == "Secret":
            admin.apply(obj, TEST_MANAGER)
    for namespace, secret in declared_secrets:
        kube.get("v1", "Secret", secret, namespace)


def test_each_kind_is_the_resource_the_api_server_serves(cluster):
    kinds = {(o["apiVersion"], o["kind"]) for name in STACKS if served_on(cluster, name)
             for o in stack(name).objects}
    for api_version, kind in kinds:
        assert cluster.admin.resource_name(api_version, kind) == resource_of(kind)
