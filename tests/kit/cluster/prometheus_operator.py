"""A kube-prometheus-stack that a cluster already runs, on the local control plane: the
Prometheus Operator's CRDs from its module (the chart installs the same files), the real
operator (tools.prometheus_operator, the version the pinned chart runs) and what the chart
creates with its default values for a release named `kube-prometheus-stack`: its `Prometheus`
and node-exporter's DaemonSet.

The operator needs only the API server for what the tests read: it turns the Prometheus object
and the ServiceMonitors, PodMonitors and PrometheusRules its selectors pick into the
configuration Secret `prometheus-<name>` and the rule-file ConfigMaps
`prometheus-<name>-rulefiles-<n>` (and a StatefulSet, whose pods nothing runs here). It runs
with a client certificate of its ServiceAccount's name in system:masters, so that no RBAC has to
be set up (the chart's ClusterRole is what a cluster needs)."""

from __future__ import annotations

import base64
import gzip

import requests
import yaml

from components.monitoring.values import CHART_IMAGES
from tests.kit import tools
from tests.kit.cluster.controlplane import (
    ApiError,
    Controller,
    ControlPlane,
    Kube,
    free_port,
    wait_until,
)
from tests.kit.cluster.declared_objects import TEST_MANAGER

API_VERSION = "monitoring.coreos.com/v1"
# The names a release `kube-prometheus-stack` of the chart gives, in its namespace.
RELEASE = "kube-prometheus-stack"
NAMESPACE = "monitoring"
PROMETHEUS = f"{RELEASE}-prometheus"
OPERATOR_SERVICE_ACCOUNT = f"{RELEASE}-operator"
NODE_EXPORTER = f"{RELEASE}-prometheus-node-exporter"
NODE_EXPORTER_PORT = 9100
# What the chart's default selectors match (`*SelectorNilUsesHelmValues: true`).
RELEASE_LABELS = {"release": RELEASE}


def chart_image(repository: str) -> str:
    """The image of the pinned chart for `repository`, as registry/repository:tag."""
    registry, tag = next((r, t) for r, name, t in CHART_IMAGES if name == repository)
    return f"{registry}/{repository}:{tag}"


class _YamlStrings(yaml.SafeLoader):
    """PyYAML's safe loader, but a plain `=` is a string, as YAML 1.2 reads it (the CRDs list
    it among the relabelling actions; PyYAML takes it for YAML 1.1's `value` type, which it
    cannot construct)."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def crds() -> list[dict]:
    """The operator's CRDs as its module ships them (example/prometheus-operator-crd: the
    files the chart's crds subchart is made of)."""
    crd_dir = tools.prometheus_operator_source() / "example" / "prometheus-operator-crd"
    return [yaml.load(path.read_text(), Loader=_YamlStrings)
            for path in sorted(crd_dir.glob("*.yaml"))]


def chart_prometheus() -> dict:
    """The Prometheus object the chart makes with its default values: each selector matches
    the release's label, every namespace selector is empty (all namespaces)."""
    image = chart_image("prometheus/prometheus")
    selectors = {}
    for kind in ("serviceMonitor", "podMonitor", "rule", "probe", "scrapeConfig"):
        selectors[f"{kind}Selector"] = {"matchLabels": dict(RELEASE_LABELS)}
        selectors[f"{kind}NamespaceSelector"] = {}
    return {
        "apiVersion": API_VERSION, "kind": "Prometheus",
        "metadata": {"name": PROMETHEUS, "namespace": NAMESPACE,
                     "labels": {"app": PROMETHEUS, "release": RELEASE}},
        "spec": {
            "image": image,
            "version": image.rsplit(":", 1)[1].removesuffix("-distroless"),
            "serviceAccountName": PROMETHEUS,
            "replicas": 1, "shards": 1,
            "scrapeInterval": "30s", "evaluationInterval": "30s",
            "retention": "10d",
            "portName": "http-web",
            "externalUrl": f"http://{PROMETHEUS}.{NAMESPACE}:9090",
            "arbitraryFSAccessThroughSMs": {"deny": False},
            "alerting": {"alertmanagers": [{
                "namespace": NAMESPACE, "name": f"{RELEASE}-alertmanager", "port": "http-web",
                "pathPrefix": "/", "apiVersion": "v2"}]},
            **selectors,
        },
    }


def chart_node_exporter() -> dict:
    """node-exporter's DaemonSet as the chart's subchart makes it: on every node's network, its
    metrics on host port 9100."""
    labels = {"app.kubernetes.io/name": "prometheus-node-exporter",
              "app.kubernetes.io/instance": RELEASE}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": NODE_EXPORTER, "namespace": NAMESPACE,
                     "labels": {**labels, "release": RELEASE}},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, "jobLabel": "node-exporter"}},
                "spec": {
                    "hostNetwork": True, "hostPID": True,
                    "serviceAccountName": NODE_EXPORTER,
                    "containers": [{
                        "name": "node-exporter",
                        "image": chart_image("prometheus/node-exporter"),
                        "args": ["--path.procfs=/host/proc", "--path.sysfs=/host/sys",
                                 "--path.rootfs=/host/root",
                                 f"--web.listen-address=[$(HOST_IP)]:{NODE_EXPORTER_PORT}"],
                        "env": [{"name": "HOST_IP", "value": "0.0.0.0"}],
                        "ports": [{"name": "http-metrics", "containerPort": NODE_EXPORTER_PORT,
                                   "hostPort": NODE_EXPORTER_PORT, "protocol": "TCP"}],
                    }],
                    "tolerations": [{"effect": "NoSchedule", "operator": "Exists"}],
                },
            },
        },
    }


class PrometheusOperator(Controller):
    """The real operator, watching every namespace as the chart runs it. `start()` installs
    the CRDs first (the operator checks at start which kinds are served) and returns once it
    answers /healthz; `stop()` ends it."""

    def __init__(self, cp: ControlPlane):
        self.cp, self.kube = cp, cp.admin
        self.port = 0
        self.process = None

    def _install(self) -> None:
        kube = self.kube
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                   TEST_MANAGER)
        kube.install_crds(crds(), TEST_MANAGER)

    def _run(self) -> None:
        user = f"system:serviceaccount:{NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
        kubeconfig = self.cp.kubeconfig(OPERATOR_SERVICE_ACCOUNT,
                                        cert=self.cp.superuser_cert(user))
        self.port = free_port()
        # The operator reads its kubeconfig from $KUBECONFIG (it has no flag for one).
        self.process = self.cp.start_process("prometheus-operator", [
            str(tools.prometheus_operator()), f"--web.listen-address=127.0.0.1:{self.port}"],
            env={"KUBECONFIG": str(kubeconfig)})
        wait_until(self._healthy, "the Prometheus Operator to serve /healthz", timeout=60,
                   interval=0.2, explain=self.process.tail)

    def _healthy(self) -> bool:
        assert self.process is not None
        if not self.process.running():
            raise RuntimeError(f"the Prometheus Operator exited\n{self.process.tail(60)}")
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2).ok
        except requests.ConnectionError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def log(self) -> str:
        return self.process.tail(80) if self.process else ""


# --- what the operator generated -------------------------------------------------------------

def generated_configuration(kube: Kube, prometheus: str = PROMETHEUS) -> dict:
    """The Prometheus configuration the operator generated, decoded from its Secret
    (`prometheus.yaml.gz`, gzipped), or {} before the first one."""
    try:
        secret = kube.get("v1", "Secret", f"prometheus-{prometheus}", NAMESPACE)
    except ApiError as error:
        if error.status == 404:
            return {}
        raise
    packed = (secret.get("data") or {}).get("prometheus.yaml.gz")
    if not packed:
        return {}
    return yaml.safe_load(gzip.decompress(base64.b64decode(packed))) or {}


def scrape_jobs(configuration: dict) -> dict[str, dict]:
    """The configuration's scrape jobs, by job name."""
    return {job["job_name"]: job for job in configuration.get("scrape_configs") or []}


def rule_files(kube: Kube, prometheus: str = PROMETHEUS) -> dict[str, dict]:
    """The rule files the operator wrote for `prometheus`, parsed, by ConfigMap and key
    (`<configmap>/<namespace>-<rule>-<uid>.yaml`)."""
    prefix = f"prometheus-{prometheus}-rulefiles-"
    return {f"{cm['metadata']['name']}/{key}": yaml.safe_load(text)
            for cm in kube.list("v1", "ConfigMap", NAMESPACE)
            if cm["metadata"]["name"].startswith(prefix)
            for key, text in (cm.get("data") or {}).items()}
