"""Adopting the platform on a cluster that already runs GPU work: the path
docs/operators/adopting.md gives, walked with workloads that break the rules."""

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from scripts import admission_report
from tests.integration.admission.opa import (
    USER_NAMESPACE,
    Admission,
    admitted,
    bare_gpu_pod,
    refusal,
    roll_out,
    switch_mode,
)
from tests.kit.cluster.controlplane import wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.nodes_and_pods import ensure_namespace, job, pod, pod_template

REPORT_SECTIONS = ("refused", "not_checked", "labelled_earlier_admitted_now")


def adoption_report(admission: Admission, kubeconfig: Path | None = None
                    ) -> tuple[int, dict, str]:
    """scripts/admission_report.py, as docs/operators/adopting.md runs it, against this cluster,
    as the platform engineer or the user of `kubeconfig` (exit status, what it found, and its
    summary line)."""
    kubeconfig = kubeconfig or admission.cp.kubeconfig("platform-engineer")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = admission_report.main(["--context", "test", "--kubeconfig", str(kubeconfig),
                                        "--output", "json"])
    print("\nthe report:", err.getvalue().strip())
    return status, json.loads(out.getvalue() or "{}"), err.getvalue()


# The namespaces of the adoption walk's workloads (other tests of the package leave theirs).
ADOPTION = ("legacy", "agents")


def of_the_walk(found: dict) -> dict[str, list[dict]]:
    return {section: [w for w in found[section] if w["namespace"] in ADOPTION]
            for section in REPORT_SECTIONS}


def named(workloads: list[dict], namespace: str, kind: str, name: str) -> dict:
    return next(w for w in workloads if (w["namespace"], w["kind"], w["name"])
                == (namespace, kind, name))


def test_adopting_on_a_cluster_that_runs_gpu_work_audit_report_fix_enforce_roll_back(
        admission, example_settings):
    """The path docs/operators/adopting.md gives, walked with workloads that break the rules
    and ran before the platform: install in audit mode, read the report, fix one and exempt
    another, see the report clean, switch to enforce, and roll back to audit."""
    cp, settings = admission.cp, example_settings
    kube = cp.admin
    webhooks = [("ValidatingWebhookConfiguration", "gpu-platform-admission"),
                ("MutatingWebhookConfiguration", "gpu-platform-admission")]
    for kind, name in webhooks:         # a cluster before the platform
        kube.delete("admissionregistration.k8s.io/v1", kind, name)
    wait_until(lambda: admitted(kube, bare_gpu_pod("before-the-platform")),
               "the webhooks to be gone", timeout=15)
    for namespace in ADOPTION:
        ensure_namespace(kube, namespace)
    toleration = settings.gpu_nodes.taint.toleration()
    trainer = pod_template({"app": "trainer"}, gpus=1)          # on the default scheduler
    trainer["spec"]["tolerations"] = [toleration]
    kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "trainer", "namespace": "legacy"},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}},
                          # The fixed pod replaces the old one at once, room on a GPU node or not.
                          "strategy": {"type": "Recreate"}, "template": trainer}})
    exporter = pod_template({"app": "exporter"})
    exporter["spec"]["tolerations"] = [{"operator": "Exists"}]
    exporter["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    kube.create({"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": "gpu-exporter", "namespace": "agents"},
                 "spec": {"selector": {"matchLabels": {"app": "exporter"}},
                          "template": exporter}})
    kube.create(pod("pinned", "legacy", gpus=1, settings=settings,
                    scheduler=settings.scheduler.name, node_name="gpu-node-1"))
    compliant = pod_template({"app": "compliant"}, gpus=1, settings=settings,
                             scheduler=settings.scheduler.name)
    kube.create(job("compliant", "legacy", compliant))
    wait_until(lambda: len(kube.list("v1", "Pod", "legacy")) >= 3
               and kube.list("v1", "Pod", "agents"), "the workloads' pods", timeout=30)

    # 1. Install in audit mode.
    audit = switch_mode(admission, settings, "audit")
    try:
        # 2. The report: what enforce would refuse, and why.
        status, found, _ = adoption_report(admission)
        walk = of_the_walk(found)
        print("\nthe report on install:", json.dumps(walk, indent=1))
        assert status == 1, found["not_checked"]
        refused = walk["refused"]
        assert sorted((w["namespace"], w["kind"]) for w in refused) == [
            ("agents", "DaemonSet"), ("legacy", "Pod"), ("legacy", "ReplicaSet")]
        assert "spec.schedulerName" in " ".join(
            next(w for w in refused if w["kind"] == "ReplicaSet")["refused"])
        assert "is privileged" in " ".join(named(refused, "agents", "DaemonSet",
                                                 "gpu-exporter")["refused"])
        assert "skips the scheduler" in " ".join(named(refused, "legacy", "Pod",
                                                       "pinned")["refused"])
        # New pods against the rules, admitted in audit mode: labelled, and reported. One is a
        # node agent's, whose DaemonSet replaces it.
        kube.create(bare_gpu_pod("new-violation"))
        agent = kube.list("v1", "Pod", "agents")[0]["metadata"]["name"]
        kube.delete("v1", "Pod", agent, "agents")

        def labelled_agent() -> list[str]:
            return [p["metadata"]["name"] for p in kube.list(
                "v1", "Pod", "agents", labelSelector=f"{admission_report.AUDIT_LABEL}=violation")]
        wait_until(labelled_agent, "the node agent's new pod, labelled", timeout=30)
        status, found, _ = adoption_report(admission)
        assert named(found["refused"], USER_NAMESPACE, "Pod", "new-violation")["labelled"] == [
            "new-violation"]
        assert named(found["refused"], "agents", "DaemonSet", "gpu-exporter")["labelled"] == \
            labelled_agent()

        # 3. Fix: the Deployment names the binpack scheduler; the pinned pod and the new one
        # are replaced by rule-abiding ones. Exempt: the node agent's namespace.
        kube.merge_patch("apps/v1", "Deployment", "trainer", {"spec": {"template": {"spec": {
            "schedulerName": settings.scheduler.name}}}}, "legacy", what="fix the Deployment")
        for namespace, name in (("legacy", "pinned"), (USER_NAMESPACE, "new-violation")):
            kube.delete("v1", "Pod", name, namespace)
        exempt = audit.admission.model_copy(update={
            "exempt_namespaces": [*audit.admission.exempt_namespaces, "agents"]})
        audit = roll_out(admission, audit.model_copy(update={"admission": exempt}),
                         "the node agents' namespace exempt")

        # The pod labelled before the exemption is no violation now: reported apart.
        def clean() -> bool:
            _, found, _ = adoption_report(admission)
            walk = of_the_walk(found)
            return (not walk["refused"] and not walk["not_checked"]
                    and [(w["name"], w["labelled"]) for w in walk[
                        "labelled_earlier_admitted_now"]] == [("gpu-exporter", labelled_agent())]
                    and not any(w["name"] == "new-violation" for section in REPORT_SECTIONS
                                for w in found[section]))
        wait_until(clean, "the report to find nothing of the walk's but the agent labelled "
                   "before its exemption", timeout=60,
                   explain=lambda: json.dumps(adoption_report(admission)[1]))

        # 4. Enforce: what breaks the rules is refused from now on.
        enforced = switch_mode(admission, audit, "enforce")
        assert "spec.schedulerName" in refusal(kube, bare_gpu_pod("after-enforce"))
        # 5. Roll back to audit: admitted again, with the warning.
        switch_mode(admission, enforced, "audit")
        assert admitted(kube, bare_gpu_pod("after-roll-back")) and kube.warnings
    finally:
        switch_mode(admission, settings, "enforce")
        kube.delete("apps/v1", "DaemonSet", "gpu-exporter", "agents", propagation="Background")
        kube.delete("apps/v1", "Deployment", "trainer", "legacy", propagation="Background")
        kube.delete("batch/v1", "Job", "compliant", "legacy", propagation="Background")


def test_the_report_counts_workloads_it_may_not_check_as_not_checked_not_admitted(
        admission, example_settings):
    """A report's user who may not impersonate the controllers: their workloads' dry runs are
    refused before any webhook is asked. They are reported as not checked, with why, and the
    exit status says the report is incomplete."""
    cp, adm = admission.cp, example_settings.admission
    user = "engineer-without-impersonation"
    issued = cp.ca.issue(user)
    kubeconfig = cp.kubeconfig(user, cert=(cp.write(f"pki/{user}.crt", issued.cert_pem),
                                           cp.write(f"pki/{user}.key", issued.key_pem)))
    # Every right the report needs but impersonation.
    cp.admin.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": user}, "rules": [
                        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "create"]},
                        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]},
                        {"apiGroups": ["admissionregistration.k8s.io"],
                         "resources": ["validatingwebhookconfigurations",
                                       "mutatingwebhookconfigurations"], "verbs": ["list"]}]},
                   TEST_MANAGER)
    cp.admin.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": user},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": user},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                  "name": user}]}, TEST_MANAGER)
    # OPA's own pods: a ReplicaSet's, created as the ReplicaSet controller.
    opa = f"{adm.namespace}/ReplicaSet/"
    status, found, summary = adoption_report(admission, kubeconfig)
    assert status == 3
    unchecked = [w for w in found["not_checked"] if f"{w['namespace']}/{w['kind']}/{w['name']}"
                 .startswith(opa)]
    assert unchecked and unchecked[0]["not_checked"] == "impersonation refused"
    assert "cannot impersonate" in unchecked[0]["error"]
    assert "the report is incomplete" in summary and "impersonation refused" in summary
    status, found, _ = adoption_report(admission)       # the platform engineer may
    assert not any(f"{w['namespace']}/{w['kind']}/{w['name']}".startswith(opa)
                   for w in found["not_checked"])


def test_with_opa_down_in_audit_mode_the_report_stops_instead_of_admitting_everything(
        admission, example_settings):
    """Audit mode's webhooks fail open: with no OPA pod, every dry run is admitted unasked. The
    report sees through the reachability probe that OPA does not answer, and stops."""
    kube = admission.cp.admin
    audit = switch_mode(admission, example_settings, "audit")
    adm = audit.admission
    try:
        kube.merge_patch("apps/v1", "Deployment", admission.generation_name(),
                         {"spec": {"replicas": 0}}, adm.namespace, "scale",
                         what="scale OPA to zero")
        wait_until(lambda: not admission.opa_pods() and not admission.ready_endpoints()
                   and not admission.kubelet.terminating_in(adm.namespace),
                   "every OPA pod gone", timeout=60)
        assert admitted(kube, bare_gpu_pod("while-opa-down")) and not kube.warnings
        status, found, summary = adoption_report(admission)
        assert (status, found) == (2, {})
        assert "OPA does not answer through the reachability webhook" in summary
        assert adm.reachability_webhook_name in summary
    finally:
        kube.merge_patch("apps/v1", "Deployment", admission.generation_name(),
                         {"spec": {"replicas": adm.replicas}}, adm.namespace, "scale",
                         what="scale OPA back")
        wait_until(lambda: admission.serving(adm.replicas), "OPA back", timeout=30)
        switch_mode(admission, audit, "enforce")
