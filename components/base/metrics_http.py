"""Prometheus' text format served over HTTP from a thread of its own, standard library only: a
platform run's counters (it ships in the run's ConfigMap, see kube_api.py), and the suite's
exporter stand-ins."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable

CONTENT_TYPE = "text/plain; version=0.0.4"


def serve(answer: Callable[[str], tuple[int, str]], host: str = "",
          port: int = 0) -> http.server.ThreadingHTTPServer:
    """Answers each GET with `answer(path)`: its status and body. Port 0: any free one (the
    server's `server_address` says which)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):   # noqa: N802 (the name http.server calls)
            status, text = answer(self.path)
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):   # noqa: A002 (the name the base class uses)
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
