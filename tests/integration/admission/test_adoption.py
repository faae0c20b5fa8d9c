"""Adopting the platform on a cluster that already runs GPU work: the path
docs/operators/adopting.md gives, walked with workloads that break the rules."""

import io
import json
from contextlib import redirect_stdout

from admission.opa import (
    USER_NAMESPACE,
    Admission,
    admitted,
    bare_gpu_pod,
    refusal,
    roll_out,
    switch_mode,
)
from controlplane import wait_until
from nodes_and_pods import ensure_namespace, job, pod, pod_template
from scripts import admission_report


def adoption_report(admission: Admission) -> tuple[int, list[dict]]:
    """scripts/admission_report.py, as docs/operators/adopting.md runs it, against this cluster
    (exit status, and what it found)."""
    kubeconfig = admission.cp.kubeconfig("platform-engineer")
    out = io.StringIO()
    with redirect_stdout(out):
        status = admission_report.main(["--context", "test", "--kubeconfig", str(kubeconfig),
                                        "--output", "json"])
    return status, json.loads(out.getvalue())


# The namespaces of the adoption walk's workloads (other tests of the package leave theirs).
ADOPTION = ("legacy", "agents")


def of_the_walk(found: list[dict]) -> list[dict]:
    return [w for w in found if w["namespace"] in ADOPTION]


def named(found: list[dict], namespace: str, kind: str, name: str) -> dict:
    return next(w for w in found if (w["namespace"], w["kind"], w["name"])
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
        status, found = adoption_report(admission)
        found = of_the_walk(found)
        print("\nthe report on install:", json.dumps(found, indent=1))
        assert status == 1
        assert sorted((w["namespace"], w["kind"]) for w in found) == [
            ("agents", "DaemonSet"), ("legacy", "Pod"), ("legacy", "ReplicaSet")]
        assert "spec.schedulerName" in " ".join(
            next(w for w in found if w["kind"] == "ReplicaSet")["refused"])
        assert "is privileged" in " ".join(named(found, "agents", "DaemonSet",
                                                 "gpu-exporter")["refused"])
        assert "skips the scheduler" in " ".join(named(found, "legacy", "Pod",
                                                       "pinned")["refused"])
        # A new workload against the rules, admitted in audit mode: labelled, and reported.
        kube.create(bare_gpu_pod("new-violation"))
        status, found = adoption_report(admission)
        assert named(found, USER_NAMESPACE, "Pod", "new-violation")["labelled"] == [
            "new-violation"]

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

        def clean() -> bool:
            status, found = adoption_report(admission)
            return not of_the_walk(found) and not any(
                w["name"] == "new-violation" for w in found)
        wait_until(clean, "the report to find nothing of the walk's", timeout=60,
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
