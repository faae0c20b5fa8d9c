"""scripts/admission_report.py against a scripted API server: what it reports and its exit
status for each answer a dry run can get, and that it reads the pods a page at a time. The
integration suite runs it against a real API server and OPA (admission/test_adoption.py)."""

import io
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from components.base.facts import AUDIT_LABEL
from components.opa_admission.webhooks import PROBE_LABEL
from components.preview import cluster as stack_cluster
from scripts import admission_report

OPA_NAMESPACE = "gpu-admission"
PLATFORM_WEBHOOK = "gpu-scheduler-policy.gpu-platform.io"
REFUSAL = ('pod "team-a/train-x": container "main" requests nvidia.com/gpu but '
           'spec.schedulerName is "default-scheduler"')


def webhook(name: str, namespace: str, **more) -> dict:
    return {"name": name, "clientConfig": {"service": {"name": "opa", "namespace": namespace}},
            **more}


# The platform's validating webhooks as the cluster registered them, beside another vendor's.
WEBHOOKS = [
    {"webhooks": [webhook(PLATFORM_WEBHOOK, OPA_NAMESPACE),
                  webhook(f"reachable.{PLATFORM_WEBHOOK}", OPA_NAMESPACE,
                          objectSelector={"matchLabels": dict([PROBE_LABEL])})]},
    {"webhooks": [webhook("policy.vendor.example.com", "vendor")]},
]

# (HTTP status, message, warnings) of a dry run.
Answer = tuple[int, str, list[str]]
ADMITTED: Answer = (201, "", [])


class ApiServer(ThreadingHTTPServer):
    """Lists `pods` a page at a time, serves `webhooks`, answers the probe with `probe` and
    each pod's dry run with `decide(pod, impersonated user)`; records the list requests."""

    def __init__(self, pods: list[dict], decide: Callable[[dict, str | None], Answer],
                 probe: Answer = (200, "", []), webhooks: list[dict] = WEBHOOKS):
        super().__init__(("127.0.0.1", 0), Handler)
        self.pods, self.decide, self.probe, self.webhooks = pods, decide, probe, webhooks
        self.lists: list[dict[str, list[str]]] = []
        self.dry_runs = 0


class Handler(BaseHTTPRequestHandler):
    @property
    def api(self) -> ApiServer:
        assert isinstance(self.server, ApiServer)
        return self.server

    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        pass

    def reply(self, answer: Answer, body: dict | None = None) -> None:
        status, message, warnings = answer
        payload = json.dumps(body if status < 400 else {"kind": "Status", "message": message})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for warning in warnings:
            self.send_header("Warning", f'299 - "{warning}"')
        self.end_headers()
        self.wfile.write(payload.encode())

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path.endswith("/validatingwebhookconfigurations"):
            return self.reply((200, "", []), {"items": self.api.webhooks})
        if url.path.endswith("/mutatingwebhookconfigurations"):
            return self.reply((200, "", []), {"items": []})
        assert url.path == "/api/v1/pods", url.path
        query = parse_qs(url.query)
        self.api.lists.append(query)
        start, size = int(query.get("continue", ["0"])[0]), int(query["limit"][0])
        rest = start + size < len(self.api.pods)
        self.reply((200, "", []), {"items": self.api.pods[start:start + size],
                                   "metadata": {"continue": str(start + size) if rest else ""}})

    def body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_PATCH(self) -> None:
        probe = self.body()
        assert probe["metadata"]["namespace"] == OPA_NAMESPACE
        self.reply(self.api.probe, probe)

    def do_POST(self) -> None:
        self.api.dry_runs += 1
        pod = self.body()
        self.reply(self.api.decide(pod, self.headers.get("Impersonate-User")), pod)


def gpu_pod(name: str, namespace: str = "team-a", owner: tuple[str, str] | None = None,
            labelled: bool = False, phase: str = "Running") -> dict:
    meta: dict = {"name": name, "namespace": namespace, "labels": {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if labelled:
        meta["labels"][AUDIT_LABEL] = "violation"
    return {"metadata": meta, "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": phase}}


@pytest.fixture
def serve(tmp_path) -> Iterator[Callable[..., ApiServer]]:
    """Starts an ApiServer made of the given arguments, and writes a kubeconfig for it."""
    servers: list[ApiServer] = []

    def start(*args, **kwargs) -> ApiServer:
        server = ApiServer(*args, **kwargs)
        servers.append(server)
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump({
            "clusters": [{"name": "c", "cluster": {
                "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}]}))
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run_report(tmp_path) -> tuple[int, dict, str]:
    """The report, as a script runs it, against the last server `serve` started: (exit
    status, its JSON output, its stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = admission_report.main(["--context", "test", "--kubeconfig",
                                        str(tmp_path / "kubeconfig"), "--output", "json"])
    return status, json.loads(out.getvalue() or "{}"), err.getvalue()


def names(section: list[dict]) -> list[str]:
    return [f"{w['namespace']}/{w['kind']}/{w['name']}" for w in section]


def refused_by_the_platform(pod: dict, user: str | None) -> Answer:
    return 403, f'admission webhook "{PLATFORM_WEBHOOK}" denied the request: {REFUSAL}', []


def test_every_pod_is_read_a_page_at_a_time(serve, tmp_path, monkeypatch):
    monkeypatch.setattr(stack_cluster, "PAGE_SIZE", 2)
    server = serve([gpu_pod(f"train-{i}") for i in range(5)], refused_by_the_platform)
    status, found, _ = run_report(tmp_path)
    assert status == 1
    assert names(found["refused"]) == [f"team-a/Pod/train-{i}" for i in range(5)]
    lists = server.lists
    assert [q["limit"] for q in lists] == [["2"]] * 3
    assert [q.get("continue") for q in lists] == [None, ["2"], ["4"]]


@pytest.mark.parametrize(("answer", "status", "cause"), [
    (ADMITTED, 0, None),
    (refused_by_the_platform({}, None), 1, None),
    ((201, "", [f"gpu-platform audit: {REFUSAL}"]), 1, None),
    ((403, 'users "system:serviceaccount:kube-system:replicaset-controller" is forbidden: User '
           '"engineer" cannot impersonate resource "users" in API group "" at the cluster '
           'scope', []), 3, "impersonation refused"),
    ((403, 'admission webhook "policy.vendor.example.com" denied the request: no', []), 3,
     "refused by the webhook policy.vendor.example.com"),
    ((500, f'Internal error occurred: failed calling webhook "{PLATFORM_WEBHOOK}": dial tcp: '
           f'connection refused', []), 3, f"no answer from the webhook {PLATFORM_WEBHOOK}"),
    ((403, 'pods "train-" is forbidden: exceeded quota: gpus, requested: '
           'requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: '
           'requests.nvidia.com/gpu=8', []), 3, "refused by a quota"),
], ids=["admitted", "refused", "audit warning", "impersonation refused", "another webhook",
        "platform webhook unreachable", "quota"])
def test_a_dry_run_counts_as_admitted_only_when_it_was_admitted(serve, tmp_path, answer,
                                                                 status, cause):
    """Refused by the platform (or warned about in audit mode): would be refused. Failed for
    any other reason: not checked, with the cause, and the report is incomplete."""
    pods = [gpu_pod("trainer-1", owner=("ReplicaSet", "trainer")), gpu_pod("web")]
    serve(pods, lambda pod, user: answer if user else ADMITTED)
    exit_status, found, stderr = run_report(tmp_path)
    assert exit_status == status
    assert found["workloads"] == 2
    reported = found["refused"] or found["not_checked"]
    assert names(reported) == ([] if status == 0 else ["team-a/ReplicaSet/trainer"])
    if status == 1:
        assert found["refused"][0]["refused"] == [REFUSAL]
    if cause:
        assert found["not_checked"][0]["not_checked"] == cause
        assert "1 of 2 workloads could not be checked" in stderr and cause in stderr


def test_the_report_stops_when_opa_does_not_answer_the_probe(serve, tmp_path):
    """In audit mode the pod webhooks fail open: with OPA down every dry run would come back
    admitted, so the report asks nothing and says why."""
    message = (f'Internal error occurred: failed calling webhook "reachable.{PLATFORM_WEBHOOK}": '
               f'no endpoints available for service "opa"')
    server = serve([gpu_pod("web")], lambda pod, user: ADMITTED, probe=(500, message, []))
    status, found, stderr = run_report(tmp_path)
    assert (status, found) == (2, {})
    assert "OPA does not answer" in stderr and 'no endpoints available for service "opa"' in stderr
    assert server.dry_runs == 0


def test_without_the_platforms_reachability_webhook_the_report_asks_nothing(serve, tmp_path):
    serve([gpu_pod("web")], lambda pod, user: ADMITTED, webhooks=WEBHOOKS[1:])
    status, found, stderr = run_report(tmp_path)
    assert (status, found) == (2, {})
    assert "no reachability webhook is registered" in stderr


def test_pods_labelled_earlier_whose_workload_is_admitted_now_are_reported_apart(serve,
                                                                                 tmp_path):
    """Labelled in audit mode, then fixed or exempted: not a violation any more. A labelled pod
    whose workload would still be refused is one, finished or not."""
    pods = [gpu_pod("agent-1", "agents", ("DaemonSet", "exporter"), labelled=True),
            gpu_pod("agent-2", "agents", ("DaemonSet", "exporter")),
            gpu_pod("done-1", "legacy", ("Job", "done"), labelled=True, phase="Succeeded")]

    serve(pods, lambda pod, user: ADMITTED if pod["metadata"]["namespace"] == "agents"
          else refused_by_the_platform(pod, user))      # agents: exempt since
    status, found, stderr = run_report(tmp_path)
    assert status == 1
    assert names(found["labelled_earlier_admitted_now"]) == ["agents/DaemonSet/exporter"]
    assert found["labelled_earlier_admitted_now"][0]["labelled"] == ["agent-1"]
    assert names(found["refused"]) == ["legacy/Job/done"]
    assert found["refused"][0]["labelled"] == ["done-1"]
    assert "1 with pods labelled earlier, admitted now" in stderr
