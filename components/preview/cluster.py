"""The stack's cluster as a preview finds it: reachable, and at which Kubernetes version, so that
the binpack scheduler's image (`kubernetesVersion`) keeps within Kubernetes' version skew policy
when a managed control plane has upgraded itself.

The version is read as kubectl finds the cluster (the context in the kubeconfig files), from
`/version`, which API servers serve to anonymous clients; no credentials are needed or sent.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import requests
import yaml

from ..base.validation import CONFIG_NAMESPACE
from ..platform.settings import ClusterSettings, StackSettings

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
TIMEOUT_SECONDS = 10
# Items a list request asks for at once.
PAGE_SIZE = 500


class ClusterUnreachable(Exception):
    """The stack's cluster cannot be found or reached; the message says where it was looked for."""


def kubeconfig_paths(cluster: ClusterSettings) -> list[Path]:
    """The kubeconfig files kubectl would read: `cluster.kubeconfig`, else $KUBECONFIG's list,
    else ~/.kube/config."""
    if cluster.kubeconfig:
        return [Path(cluster.kubeconfig).expanduser()]
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def _where(cluster: ClusterSettings) -> str:
    files = ", ".join(str(p) for p in kubeconfig_paths(cluster))
    return f"cluster.context {cluster.context!r} (kubeconfig {files})"


def endpoint(cluster: ClusterSettings) -> tuple[str, dict, str | None]:
    """The context's API server URL, the request options to reach it (its CA, proxy) and the
    temporary file this made for a CA given inline, if any (the caller removes it)."""
    contexts = _kubeconfig_entries(cluster, "contexts", "context")
    clusters = _kubeconfig_entries(cluster, "clusters", "cluster")
    if cluster.context not in contexts:
        raise ClusterUnreachable(f"{_where(cluster)}: no such context; defined: "
                                 f"{', '.join(sorted(contexts)) or '(none)'}")
    context, _ = contexts[cluster.context]
    if context.get("cluster") not in clusters:
        raise ClusterUnreachable(f"{_where(cluster)}: the context names cluster "
                                 f"{context.get('cluster')!r}, which no kubeconfig defines")
    entry, path = clusters[context["cluster"]]
    options: dict = {"verify": not entry.get("insecure-skip-tls-verify", False)}
    made: list[str] = []
    ca = _file_of(entry, "certificate-authority", path, made)
    if ca:
        options["verify"] = ca
    if entry.get("proxy-url"):
        options["proxies"] = {"https": entry["proxy-url"], "http": entry["proxy-url"]}
    return entry["server"].rstrip("/"), options, (made[0] if made else None)


def user_credentials(cluster: ClusterSettings) -> tuple[dict, list[str]]:
    """The request options that authenticate as the context's user, as kubectl would (a client
    certificate, a token, or what an exec credential plugin such as gke-gcloud-auth-plugin or
    `aws eks get-token` returns), and the temporary files this made (the caller removes them)."""
    contexts = _kubeconfig_entries(cluster, "contexts", "context")
    users = _kubeconfig_entries(cluster, "users", "user")
    name = contexts.get(cluster.context, ({}, None))[0].get("user")
    if name not in users:
        raise ClusterUnreachable(f"{_where(cluster)}: the context's user {name!r} is defined in "
                                 f"no kubeconfig")
    user, path = users[name]
    if user.get("exec"):
        user = {**user, **_exec_credential(user["exec"])}
    options: dict = {}
    made: list[str] = []
    certificate = _file_of(user, "client-certificate", path, made)
    key = _file_of(user, "client-key", path, made)
    if certificate and key:
        options["cert"] = (certificate, key)
    token = user.get("token") or (Path(user["tokenFile"]).read_text().strip()
                                  if user.get("tokenFile") else None)
    if token:
        options["headers"] = {"Authorization": f"Bearer {token}"}
    return options, made


def _kubeconfig_entries(cluster: ClusterSettings, section: str,
                        field: str) -> dict[str, tuple[dict, Path]]:
    """Each named entry of a kubeconfig `section` (contexts, clusters, users) with the file that
    defines it; the first file that defines a name wins, as kubectl merges them."""
    entries: dict[str, tuple[dict, Path]] = {}
    for path in kubeconfig_paths(cluster):
        if path.is_file():
            config = yaml.safe_load(path.read_text()) or {}
            for entry in config.get(section) or []:
                entries.setdefault(entry["name"], (entry.get(field) or {}, path))
    return entries


def _file_of(entry: dict, key: str, defined_in: Path, made: list[str]) -> str | None:
    """The file a kubeconfig field names (relative to the kubeconfig that holds it) or, given
    inline as `<key>-data`, a temporary file of its content, added to `made`."""
    if entry.get(f"{key}-data"):
        with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as written:
            written.write(base64.b64decode(entry[f"{key}-data"]))
        made.append(written.name)
        return written.name
    if entry.get(key):
        return str(defined_in.parent / Path(entry[key]).expanduser())
    return None


def _exec_credential(plugin: dict) -> dict:
    """The credential an exec plugin prints (client.authentication.k8s.io ExecCredential), as
    kubeconfig user fields."""
    env = {**os.environ, **{e["name"]: e["value"] for e in plugin.get("env") or []}}
    result = subprocess.run([plugin["command"], *(plugin.get("args") or [])], env=env,
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise ClusterUnreachable(f"the credential plugin {plugin['command']} failed: "
                                 f"{result.stderr.strip()[-500:]}")
    status = json.loads(result.stdout).get("status") or {}
    found = {"token": status.get("token")}
    for field, key in (("clientCertificateData", "client-certificate-data"),
                       ("clientKeyData", "client-key-data")):
        if status.get(field):
            found[key] = base64.b64encode(status[field].encode()).decode()
    return {k: v for k, v in found.items() if v}


class NotAllowed(Exception):
    """The preview's identity may not read what was asked (HTTP 401 or 403)."""


class ClusterReader:
    """Requests to the stack's cluster as the context's user, as `pulumi preview` runs: GETs of
    the API server's paths, each answering the object, or None where the API or the object is
    not served. Use it in a `with` block: it removes the files it made for inline
    credentials."""

    def __init__(self, cluster: ClusterSettings, timeout: float = TIMEOUT_SECONDS):
        self.cluster, self.timeout = cluster, timeout
        self.server, self.options, made = endpoint(cluster)
        self.made = [made] if made else []
        try:
            credentials, more = user_credentials(cluster)
        except ClusterUnreachable:
            self.close()
            raise
        self.made += more
        self.session = requests.Session()
        # Given with each request (`options`): a session's own `verify` gives way to
        # REQUESTS_CA_BUNDLE.
        self.session.cert = credentials.get("cert")
        self.session.headers.update(credentials.get("headers", {}))

    def __enter__(self) -> ClusterReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for path in self.made:
            if os.path.exists(path):
                os.unlink(path)
        self.made = []

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The API server's answer, whatever its status."""
        try:
            return self.session.request(method, f"{self.server}{path}", timeout=self.timeout,
                                        **self.options, **kwargs)
        except requests.RequestException as error:
            raise ClusterUnreachable(f"{_where(self.cluster)}: cannot reach the API server "
                                     f"{self.server}: {error}") from None

    def get(self, path: str, **params: str) -> dict | None:
        reply = self.request("GET", path, params=params or None)
        if reply.status_code in (401, 403):
            raise NotAllowed(f"GET {path}: HTTP {reply.status_code} for the context's user")
        if reply.status_code == 404:
            return None
        if not reply.ok:
            raise ClusterUnreachable(f"{_where(self.cluster)}: GET {path} answered HTTP "
                                     f"{reply.status_code}")
        return reply.json()

    def pages(self, path: str, **params: str) -> Iterator[dict]:
        """Every item of a list, read a page at a time; none where the API is not served."""
        token = ""
        while True:
            page = self.get(path, limit=str(PAGE_SIZE), **params,
                            **({"continue": token} if token else {}))
            if page is None:
                return
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def items(self, path: str, **params: str) -> list[dict]:
        return list(self.pages(path, **params))


def api_warnings(response: requests.Response) -> list[str]:
    """The warnings an API server's response carries (RFC 7234 `299 - "text"` headers, which
    requests joins with ", "), as their text."""
    raw = response.headers.get("Warning")
    headers = [] if not raw else re.split(r', (?=299 )', raw)
    texts = [header.split(" - ", 1)[-1].strip() for header in headers]
    return [text[1:-1].replace('\\"', '"').replace("\\\\", "\\") if text.startswith('"')
            else text for text in texts]


def server_version(cluster: ClusterSettings) -> str | None:
    """The API server's gitVersion (e.g. v1.36.4-gke.1200), or None when it refuses anonymous
    clients the version (it is reachable, but its version unknown)."""
    server, options, made = endpoint(cluster)
    try:
        reply = requests.get(f"{server}/version", timeout=TIMEOUT_SECONDS, **options)
    except requests.RequestException as error:
        raise ClusterUnreachable(f"{_where(cluster)}: cannot reach the API server {server}: "
                                 f"{error}") from None
    finally:
        if made:
            os.unlink(made)
    if reply.status_code in (401, 403):
        return None
    if not reply.ok:
        raise ClusterUnreachable(f"{_where(cluster)}: {server}/version answered HTTP "
                                 f"{reply.status_code}")
    return reply.json().get("gitVersion")


def skew_warnings(kubernetes_version: str, server: str) -> list[str]:
    """What a platform engineer should know when the cluster's version and `kubernetesVersion`
    differ: kube-scheduler may be up to one minor older than the API server, never newer."""
    match = _GIT_VERSION.match(server)
    if not match:
        return [f"the cluster reports version {server!r}, which is not MAJOR.MINOR.PATCH: "
                f"version skew not checked"]
    cluster = tuple(int(n) for n in match.groups())
    setting = tuple(int(n) for n in kubernetes_version.split("."))
    image = f"kube-scheduler v{kubernetes_version}"
    upgrade = (f"set gpu-platform:kubernetesVersion to {'.'.join(map(str, cluster))} and run "
               f"pulumi up")
    if setting[:2] > cluster[:2]:
        return [f"kubernetesVersion {kubernetes_version} is newer than the cluster ({server}): "
                f"{image} must not be newer than the API server (Kubernetes version skew "
                f"policy); {upgrade}"]
    if cluster[0] != setting[0] or cluster[1] - setting[1] > 1:
        return [f"the cluster runs {server}, more than one minor version ahead of "
                f"kubernetesVersion {kubernetes_version}: {image} is outside the supported "
                f"version skew; {upgrade}"]
    if cluster[1] > setting[1]:
        return [f"the cluster runs {server}, one minor version ahead of kubernetesVersion "
                f"{kubernetes_version}: {image} is supported there, but {upgrade} before the "
                f"next control-plane upgrade"]
    if cluster != setting:
        return [f"the cluster runs {server}; kubernetesVersion is {kubernetes_version}: the "
                f"binpack scheduler runs that patch release ({upgrade} to match)"]
    return []


def preview_warnings(settings: StackSettings) -> list[str]:
    """The version skew warnings for the stack's cluster. An unreachable or unknown cluster
    raises ClusterUnreachable, naming the context, the kubeconfig and the cause."""
    version = server_version(settings.cluster)
    if version is None:
        return [f"{_where(settings.cluster)}: the API server does not tell anonymous clients its "
                f"version, so version skew against kubernetesVersion "
                f"{settings.kubernetes_version} was not checked"]
    return skew_warnings(settings.kubernetes_version, version)


def check_cluster(settings: StackSettings) -> None:
    """In a preview (and the preview step of `pulumi up`): the stack's cluster must be reachable,
    and a version skew between it and kubernetesVersion is reported as a warning."""
    try:
        warnings = preview_warnings(settings)
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    for warning in warnings:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: {warning}")


class ClusterError(Exception):
    """The stack's cluster is not there: raised before anything is declared."""

    def __init__(self, problem: str):
        super().__init__(f"the stack's cluster cannot be reached (nothing was deployed):\n"
                         f"  - {problem}")
