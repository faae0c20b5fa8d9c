"""The Kubernetes API as a platform run's pod reaches it, and the times it reads and writes.

Standard library only: it runs in a stock Python image, shipped in a ConfigMap at this same
import path beside the run's script (manifests.python_modules)."""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from argparse import ArgumentParser, Namespace
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

IN_CLUSTER = "/var/run/secrets/kubernetes.io/serviceaccount"
# An event's note is at most 1 kB.
NOTE_BYTES = 1024


class Api:
    """Calls to the API server with a bearer token; answers as (status, JSON body)."""

    def __init__(self, server: str, token: str, context: ssl.SSLContext):
        self.server, self.token, self.context = server, token, context

    def call(self, method: str, path: str, body: dict | None = None,
             content_type: str = "application/json") -> tuple[int, dict]:
        request = urllib.request.Request(
            self.server + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                     "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            try:
                return error.code, json.loads(text)
            except ValueError:
                return error.code, {"message": text}

    def ok(self, method: str, path: str, body: dict | None = None,
           content_type: str = "application/json") -> dict:
        status, answer = self.call(method, path, body, content_type)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {answer.get('message', answer)}")
        return answer

    # Items per page of a list: a large fleet's pods never arrive, or are parsed, at once.
    PAGE = 500

    def items(self, path: str, fields: dict | None = None) -> list[dict]:
        """Every item `path` lists, page by page; with `fields` (see `project`), only those
        fields of each, so that what a run keeps grows with the fleet by what it reads."""
        found: list[dict] = []
        page_path = f"{path}{'&' if '?' in path else '?'}limit={self.PAGE}"
        token = ""
        while True:
            page = self.ok("GET", page_path + (f"&continue={urllib.parse.quote(token)}"
                                               if token else ""))
            found += [project(item, fields) if fields else item for item in page["items"]]
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return found


def project(value: Any, fields: dict) -> Any:
    """The parts of `value` that `fields` names: each key maps to True (kept whole) or to the
    fields to keep of its value (of each item, for a list)."""
    if isinstance(value, list):
        return [project(item, fields) for item in value]
    if not isinstance(value, dict):
        return value
    return {key: value[key] if wanted is True else project(value[key], wanted)
            for key, wanted in fields.items() if key in value}


def add_connection_arguments(parser: ArgumentParser) -> None:
    """The API server and credentials, the pod's own unless given."""
    parser.add_argument("--server", default="https://{}:{}".format(
        os.environ.get("KUBERNETES_SERVICE_HOST", ""),
        os.environ.get("KUBERNETES_SERVICE_PORT", "")))
    parser.add_argument("--token-file", default=f"{IN_CLUSTER}/token")
    parser.add_argument("--ca-file", default=f"{IN_CLUSTER}/ca.crt")


def connect(args: Namespace) -> Api:
    with open(args.token_file) as f:
        token = f.read().strip()
    return Api(args.server, token, ssl.create_default_context(cafile=args.ca_file))


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 time (as the API server and the runs write them), in seconds; None if it is
    not one."""
    try:
        return datetime.fromisoformat((text or "").replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def format_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(controller: str, regarding: dict, namespace: str, reason: str, kind: str,
          action: str, note: str, now: float) -> dict:
    """An events.k8s.io/v1 Event of `controller` about `regarding` (an object reference)."""
    micro = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            # Named as client-go's recorder names events: the object's name and a timestamp.
            "metadata": {"name": f"{regarding['name'][:200]}.{time.time_ns():x}",
                         "namespace": namespace},
            "eventTime": micro, "type": kind, "reason": reason, "action": action,
            "reportingController": controller,
            "reportingInstance": (os.environ.get("HOSTNAME") or socket.gethostname())[:128],
            "regarding": regarding,
            "note": note.encode()[:NOTE_BYTES].decode(errors="ignore")}


def record(api: Api, event_: dict) -> None:
    """Create an event; one the API server refuses is printed, and the run goes on."""
    namespace = event_["metadata"]["namespace"]
    status, answer = api.call("POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                              event_)
    if status >= 300:
        print(f"event {event_['reason']} not recorded: {status} "
              f"{answer.get('message', answer)}", file=sys.stderr, flush=True)


def patch_node(api: Api, name: str, change: Callable[[list[dict]], list[dict]],
               annotations: dict, labels: dict | None = None) -> None:
    """Change a node's taints (an atomic list: written whole, on the version read, so that a
    taint another writer added meanwhile is not lost), annotations and labels (None:
    removed)."""
    node = api.ok("GET", f"/api/v1/nodes/{name}")
    api.ok("PATCH", f"/api/v1/nodes/{name}", {
        "metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                     "annotations": annotations, **({"labels": labels} if labels else {})},
        "spec": {"taints": change(node["spec"].get("taints") or [])}},
        "application/merge-patch+json")
