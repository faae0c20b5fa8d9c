"""A local Kubernetes control plane: real etcd and kube-apiserver on loopback, ephemeral ports,
a temporary directory, client certificates for an admin user, service-account signing keys and
RBAC authorization. No kubelet and no controller-manager: objects are stored and admitted as on
a cluster, and pods are bound by whichever kube-scheduler the caller starts, but nothing runs
(kube_components.py has a kube-controller-manager, and fake_kubelet.py a fake kubelet, for the
tests that need them).

Everything it starts is stopped, and its directory removed, by `stop()` (also at interpreter
exit, should a caller forget).
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from components.preview.cluster import api_warnings
from tests.kit import tools

ADMIN_USER = "gpu-platform-test-admin"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], Any], what: str, timeout: float = 30.0,
               interval: float = 0.1, explain: Callable[[], str] = lambda: "") -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            result = check()
        except (requests.ConnectionError, ConnectionError) as error:   # not listening yet
            result, last_error = None, f"last error: {error}\n"
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}\n"
                               f"{last_error}{explain()}")
        time.sleep(interval)


# --- certificates ---------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyPair:
    cert_pem: str
    key_pem: str


class CertificateAuthority:
    """A throwaway CA that issues serving and client certificates (ECDSA P-256)."""

    def __init__(self, name: str):
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (x509.CertificateBuilder()
                      .subject_name(self._name).issuer_name(self._name)
                      .public_key(self._key.public_key())
                      .serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=1))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                      .add_extension(x509.KeyUsage(
                          digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False), True)
                      .sign(self._key, hashes.SHA256()))

    @property
    def cert_pem(self) -> str:
        return self._cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, common_name: str, *, organizations: tuple[str, ...] = (),
              dns_names: tuple[str, ...] = (), ip_addresses: tuple[str, ...] = (),
              server: bool = False) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name(subject)).issuer_name(self._name)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.SERVER_AUTH if server
                        else ExtendedKeyUsageOID.CLIENT_AUTH]), False))
        names = [x509.DNSName(n) for n in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM).decode(),
                       key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode())


# --- processes ------------------------------------------------------------------------------

class Process:
    """A tool started in its own process group, its output in a log file."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict | None = None):
        self.name, self.args, self.log = name, args, log
        with open(log, "ab") as out:
            self._popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True,
                                           env={**os.environ, **(env or {})})

    @property
    def pid(self) -> int:
        return self._popen.pid

    def running(self) -> bool:
        return self._popen.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self._popen.poll()

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- last lines of {self.name}'s log ({self.log}) ---\n" + "\n".join(text)

    def stop(self) -> None:
        if not self.running():
            return
        os.killpg(self._popen.pid, signal.SIGTERM)
        try:
            self._popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait()


# --- the API client -------------------------------------------------------------------------

class Controller:
    """A controller the suite runs beside the control plane: `start()` installs what it needs
    (its CRDs, its objects) and runs it, and stops it again when either fails."""

    def start(self) -> Self:
        try:
            self._install()
            self._run()
        except BaseException:
            self.stop()
            raise
        return self

    def _install(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class ApiError(Exception):
    def __init__(self, status: int, body: Any, what: str):
        self.status, self.body = status, body
        self.message = body.get("message", str(body)) if isinstance(body, dict) else str(body)
        super().__init__(f"{what}: HTTP {status}: {self.message}")


class Kube:
    """A small Kubernetes REST client: discovery-based paths, server-side apply, CRUD."""

    def __init__(self, server: str, ca_file: Path, *, cert: tuple[Path, Path] | None = None,
                 token: str | None = None):
        self.server = server
        self.session = requests.Session()
        self.session.trust_env = False    # REQUESTS_CA_BUNDLE would replace `verify`
        self.session.verify = str(ca_file)
        if cert:
            self.session.cert = (str(cert[0]), str(cert[1]))
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self._resources: dict[str, dict[str, dict]] = {}
        # The warnings (HTTP Warning headers) the API server returned with the last response.
        self.warnings: list[str] = []

    def request(self, method: str, path: str, *, body: Any = None,
                content_type: str = "application/json", params: dict | None = None,
                what: str = "") -> Any:
        data = None
        if body is not None:
            data = yaml.safe_dump(body) if "yaml" in content_type else json.dumps(body)
        response = self.session.request(method, self.server + path, data=data, params=params,
                                        headers={"Content-Type": content_type}, timeout=60)
        self.warnings = api_warnings(response)
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        if response.status_code >= 400:
            raise ApiError(response.status_code, payload, what or f"{method} {path}")
        return payload

    def _resource(self, api_version: str, kind: str) -> dict:
        if api_version not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self.request("GET", base, what=f"discovery of {api_version}")
            self._resources[api_version] = {r["kind"]: r for r in listing["resources"]
                                            if "/" not in r["name"]}
        if kind not in self._resources[api_version]:
            raise LookupError(f"the API server serves no kind {kind} in {api_version}")
        return self._resources[api_version][kind]

    def resource_name(self, api_version: str, kind: str) -> str:
        """The resource (plural) the API server serves the kind as."""
        return self._resource(api_version, kind)["name"]

    def serves(self, api_version: str, kind: str) -> bool:
        try:
            self._resource(api_version, kind)
            return True
        except (LookupError, ApiError):
            return False

    def install_crds(self, crds: list[dict], manager: str) -> None:
        """Apply the CustomResourceDefinitions and wait until the API server serves them."""
        for crd in crds:
            self.apply(crd, manager, force=True)
        for crd in crds:
            name = crd["metadata"]["name"]
            wait_until(lambda name=name: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                  name).get("status", {}).get("conditions") or []),
                f"CRD {name} to be established")

    def path(self, api_version: str, kind: str, namespace: str | None = None,
             name: str | None = None, subresource: str = "") -> str:
        resource = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if resource["namespaced"]:
            if not namespace:
                raise ValueError(f"{kind} is namespaced; no namespace given")
            base += f"/namespaces/{namespace}"
        path = f"{base}/{resource['name']}"
        if name:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return path

    def _path_of(self, obj: dict, subresource: str = "") -> str:
        meta = obj["metadata"]
        return self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"],
                         subresource)

    def apply(self, obj: dict, manager: str, *, force: bool = False,
              subresource: str = "", dry_run: bool = False) -> dict:
        """Server-side apply, as `kubectl apply --server-side` and the Pulumi provider do
        (with `dry_run`, as `pulumi preview` does: through admission, nothing stored)."""
        params = {"fieldManager": manager}
        if force:
            params["force"] = "true"
        if dry_run:
            params["dryRun"] = "All"
        return self.request("PATCH", self._path_of(obj, subresource), body=obj,
                            content_type="application/apply-patch+yaml", params=params,
                            what=f"apply {obj['kind']} {obj['metadata']['name']}")

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        """Create; with `dry_run`, through validation and admission only (nothing stored)."""
        meta = obj["metadata"]
        return self.request("POST", self.path(obj["apiVersion"], obj["kind"],
                                              meta.get("namespace")), body=obj,
                            params={"dryRun": "All"} if dry_run else None,
                            what=f"create {obj['kind']} {meta['name']}")

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict:
        return self.request("GET", self.path(api_version, kind, namespace, name),
                            what=f"get {kind} {name}")

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             **params: str) -> list[dict]:
        return self.request("GET", self.path(api_version, kind, namespace),
                            params=params or None, what=f"list {kind}")["items"]

    def list_everywhere(self, api_version: str, kind: str) -> list[dict]:
        """Every namespace's objects of the kind, as `kubectl get -A` lists them."""
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        return self.request("GET", f"{base}/{self.resource_name(api_version, kind)}",
                            what=f"list {kind} in every namespace")["items"]

    def merge_patch(self, api_version: str, kind: str, name: str, body: dict,
                    namespace: str | None = None, subresource: str = "",
                    what: str = "") -> dict:
        """A JSON merge patch: the fields in `body` replace the object's (None removes one)."""
        return self.request("PATCH", self.path(api_version, kind, namespace, name, subresource),
                            body=body, content_type="application/merge-patch+json",
                            what=what or f"patch {kind} {name}")

    def patch_status(self, obj: dict, status: dict) -> dict:
        return self.request("PATCH", self._path_of(obj, "status"), body={"status": status},
                            content_type="application/merge-patch+json",
                            what=f"patch status of {obj['kind']} {obj['metadata']['name']}")

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None, *, propagation: str | None = None) -> None:
        """Delete at once: with no kubelet to confirm, a graceful pod deletion never ends.
        `propagation` (Background, Foreground, Orphan): what becomes of the objects it owns
        (left to the kind's default when None; a Job's is Orphan)."""
        params = {"gracePeriodSeconds": "0"}
        if propagation:
            params["propagationPolicy"] = propagation
        try:
            self.request("DELETE", self.path(api_version, kind, namespace, name),
                         params=params, what=f"delete {kind} {name}")
        except ApiError as error:
            if error.status != 404:
                raise


# --- the control plane ----------------------------------------------------------------------

class ControlPlane:
    def __init__(self, apiserver_args: tuple[str, ...] = (),
                 kubernetes: str | None = None) -> None:
        """`apiserver_args`: more kube-apiserver flags, for a cluster configured differently;
        `kubernetes`: the release the control plane runs (the example stack's by default, or
        tools.DRA_KUBERNETES_VERSION)."""
        self.apiserver_args = apiserver_args
        self.kubernetes = kubernetes
        self.dir = Path(tempfile.mkdtemp(prefix="gpu-platform-cp-"))
        self.processes: list[Process] = []
        self.ca = CertificateAuthority("gpu-platform test cluster CA")
        self.ca_file = self.write("pki/ca.crt", self.ca.cert_pem)
        self.port = 0
        atexit.register(self.stop)

    def binary(self, component: str) -> Path:
        """kube-apiserver, kube-scheduler or kube-controller-manager of this control plane's
        Kubernetes release."""
        if self.kubernetes is None:
            return {"kube-apiserver": tools.kube_apiserver,
                    "kube-scheduler": tools.kube_scheduler,
                    "kube-controller-manager": tools.kube_controller_manager}[component]()
        assert self.kubernetes == tools.DRA_KUBERNETES_VERSION, self.kubernetes
        return tools.dra_control_plane()[component]

    # files and processes

    def write(self, relative: str, text: str) -> Path:
        path = self.dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def start_process(self, name: str, args: list[str], env: dict | None = None) -> Process:
        log = self.dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        process = Process(name, args, log, env)
        self.processes.append(process)
        return process

    # lifecycle

    def start(self) -> ControlPlane:
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.etcd = self.start_process("etcd", [
            str(tools.etcd()),
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true",    # a throwaway store: durability only costs time
            "--log-level=warn",
        ])
        wait_until(lambda: self._alive(self.etcd) and requests.get(
            f"{self.etcd_url}/health", timeout=2).ok, "etcd to become healthy",
            explain=self.etcd.tail)

    def _start_apiserver(self) -> None:
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        serving = self.ca.issue("kube-apiserver", server=True,
                                dns_names=("localhost", "kubernetes", "kubernetes.default"),
                                ip_addresses=("127.0.0.1", "10.0.0.1"))
        admin = self.ca.issue(ADMIN_USER, organizations=("system:masters",))
        self.admin_cert = (self.write("pki/admin.crt", admin.cert_pem),
                           self.write("pki/admin.key", admin.key_pem))
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self.apiserver = self.start_process("kube-apiserver", [
            str(self.binary("kube-apiserver")),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={self.write('pki/apiserver.crt', serving.cert_pem)}",
            f"--tls-private-key-file={self.write('pki/apiserver.key', serving.key_pem)}",
            f"--client-ca-file={self.ca_file}",
            f"--service-account-key-file={self.write('pki/sa.pub', _public_pem(sa_key))}",
            f"--service-account-signing-key-file={self.write('pki/sa.key', _private_pem(sa_key))}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # No controller-manager creates the `default` ServiceAccounts this plugin requires.
            "--disable-admission-plugins=ServiceAccount",
            # From 1.37 the API server refuses to publish a loopback address as the `kubernetes`
            # Service's endpoint; nothing here reaches the API server through that Service.
            *(["--endpoint-reconciler-type=none"] if self.kubernetes else []),
            *self.apiserver_args,
        ])
        self.admin = Kube(self.server, self.ca_file, cert=self.admin_cert)
        wait_until(lambda: self._alive(self.apiserver) and self._ready(),
                   "kube-apiserver to become ready", timeout=60, explain=self.apiserver.tail)

    def _alive(self, process: Process) -> bool:
        if not process.running():
            raise RuntimeError(f"{process.name} exited early\n{process.tail()}")
        return True

    def _ready(self) -> bool:
        try:
            self.admin.request("GET", "/readyz")
            # RBAC's bootstrap roles (system:kube-scheduler, ...) exist once readyz passes.
            return True
        except ApiError:
            return False

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    # credentials

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for the ServiceAccount, as a pod of it would be given (TokenRequest); valid
        for a day, so that a playground's binpack scheduler outlives an afternoon."""
        review = self.admin.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": 86400}},
            what=f"token for ServiceAccount {namespace}/{name}")
        return review["status"]["token"]

    def kubeconfig(self, name: str, *, token: str | None = None,
                   cert: tuple[Path, Path] | None = None) -> Path:
        """A kubeconfig file for the admin user, a bearer token or a client certificate."""
        certificate, key = cert or self.admin_cert
        user = {"token": token} if token else {
            "client-certificate": str(certificate), "client-key": str(key)}
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": name}}],
        }
        return self.write(f"kubeconfig/{name}.yaml", yaml.safe_dump(config))

    def superuser_cert(self, user: str) -> tuple[Path, Path]:
        """A client certificate of `user`, a member of system:masters: a component that keeps
        its own name (admission sees it) and needs no RBAC set up for it."""
        issued = self.ca.issue(user, organizations=("system:masters",))
        return (self.write(f"pki/{user}.crt", issued.cert_pem),
                self.write(f"pki/{user}.key", issued.key_pem))

    def client(self, token: str) -> Kube:
        return Kube(self.server, self.ca_file, token=token)

    def impersonating(self, user: str) -> Kube:
        """The admin acting as `user`, as `kubectl --as` does: admission sees that user."""
        kube = Kube(self.server, self.ca_file, cert=self.admin_cert)
        kube.session.headers["Impersonate-User"] = user
        return kube


def _private_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _public_pem(key) -> str:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()
