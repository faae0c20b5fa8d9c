"""Kueue's controller-manager run against a ControlPlane as the chart runs it on a cluster: its
CRDs and webhook configurations from its own module (with what its chart changes in them), its
Configuration file, and its webhooks reached by the API server through their Service.

How the webhooks are served: the process listens on an address of its own on the loopback
interface (the pod address it would have, added as kubelet.py's PodNetwork adds them), at the
port the Service's targetPort names (9443); the Service has no selector, and an EndpointSlice
made here points at that address, so the API server (with --enable-aggregator-routing) calls the
webhooks there, as it would call the pod's. Kueue's own certificate management does the rest, as
in the chart: it issues a serving certificate for the Service's name into the Secret and writes
its CA into the webhook configurations and the CRDs' conversion webhooks. What a kubelet would
do is done here: the Secret, once filled, is written into the certificate directory in the
kubelet's volume layout, where Kueue waits for it.

It runs the Configuration the platform generates. Kueue runs with a client certificate of its
ServiceAccount's name in system:masters, so that no RBAC has to be set up (the chart's
ClusterRole is what a cluster needs). Its visibility server
is off: it writes its serving certificate to the fixed path /visibility and is reached through
an APIService, neither of which the smoke tests need."""

from __future__ import annotations

import base64
import copy
import warnings
from collections.abc import Iterable
from pathlib import Path

import requests
import urllib3
import yaml

from tests.kit import tools
from tests.kit.cluster.controlplane import ApiError, Controller, ControlPlane, free_port, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.kubelet import PodNetwork, write_volume

API_VERSION = "kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
# The names a release called `kueue` of the chart gives (the chart's fullname is the release's).
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
WEBHOOK_CONFIGURATIONS = {"MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
                          "ValidatingWebhookConfiguration":
                              "kueue-validating-webhook-configuration"}
SERVICE_ACCOUNT = "kueue-controller-manager"
WEBHOOK_PORT = 9443                 # the Service's targetPort in the module's manifests

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_LABEL = "kueue.x-k8s.io/managed"        # on the pods Kueue's pod integration manages
ADMISSION_GATE = "kueue.x-k8s.io/admission"     # the scheduling gate it holds them with

# The chart fails pod, Deployment and StatefulSet admission only while that integration is on;
# its other webhooks always fail closed.
FAIL_ONLY_WHEN_ENABLED = {"/mutate--v1-pod": "pod", "/validate--v1-pod": "pod",
                          "/mutate-apps-v1-deployment": "deployment",
                          "/validate-apps-v1-deployment": "deployment",
                          "/mutate-apps-v1-statefulset": "statefulset",
                          "/validate-apps-v1-statefulset": "statefulset"}


def is_active(obj: dict) -> bool:
    """Whether a queue (ClusterQueue, LocalQueue) says it is Active."""
    return any(c["type"] == "Active" and c["status"] == "True"
               for c in obj.get("status", {}).get("conditions", []))


def source() -> Path:
    return tools.kueue_source()


def crds() -> list[dict]:
    """Kueue's CRDs as its chart installs them: the generated bases, with a conversion webhook
    at the webhook Service for the kinds the module's kustomization patches. Without those,
    Kueue never starts: its certificate rotation fails to write its CA into them and waits
    for that before anything else."""
    crd_dir = source() / "config" / "components" / "crd"
    kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
    conversions = {}
    for patch in kustomization.get("patches") or []:
        patched = yaml.safe_load((crd_dir / patch["path"]).read_text())
        conversion = patched["spec"]["conversion"]
        conversion["webhook"]["clientConfig"]["service"] |= {"name": WEBHOOK_SERVICE,
                                                              "namespace": NAMESPACE}
        conversions[patched["metadata"]["name"]] = conversion
    found = []
    for path in sorted((crd_dir / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["metadata"]["name"] in conversions:
            crd["spec"]["conversion"] = conversions[crd["metadata"]["name"]]
        found.append(crd)
    return found


def webhook_configurations(namespace_selector: dict, frameworks: Iterable[str]) -> list[dict]:
    """The module's webhook manifests as the chart renders them for a release named `kueue`:
    names and Service prefixed, the webhooks of workloads (all but Kueue's own kinds) limited
    to the namespaces Kueue manages, and pod, Deployment and StatefulSet failing closed only
    for an integration that is on. The caBundle is left to Kueue."""
    manifests = source() / "config" / "components" / "webhook" / "manifests.yaml"
    enabled = set(frameworks)
    configurations = []
    for configuration in yaml.safe_load_all(manifests.read_text()):
        configuration["metadata"]["name"] = WEBHOOK_CONFIGURATIONS[configuration["kind"]]
        for webhook in configuration["webhooks"]:
            service = webhook["clientConfig"]["service"]
            service |= {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE}
            if configuration["kind"] == "MutatingWebhookConfiguration":
                webhook["reinvocationPolicy"] = "Never"
            if webhook["rules"][0]["apiGroups"][0] != "kueue.x-k8s.io":
                webhook["namespaceSelector"] = copy.deepcopy(namespace_selector)
            framework = FAIL_ONLY_WHEN_ENABLED.get(service["path"])
            if framework:
                webhook["failurePolicy"] = "Fail" if framework in enabled else "Ignore"
        configurations.append(configuration)
    return configurations


class Kueue(Controller):
    """Kueue v0.19.2 running `configuration`, the Configuration the platform generates
    (teams.kueue_configuration), with only what a pod's place in a cluster decides changed:
    the addresses it listens on, where its certificates are, and its namespace. `start()`
    returns once its webhooks answer; `stop()` ends the process, removes the webhook
    configurations (as an uninstall does, so that nothing is refused for want of Kueue
    afterwards) and releases the address."""

    def __init__(self, cp: ControlPlane, configuration: dict):
        self.cp, self.kube = cp, cp.admin
        self.platform_configuration = configuration
        self.namespace_selector = configuration["managedJobsNamespaceSelector"]
        self.frameworks = tuple(configuration["integrations"]["frameworks"])
        self.network = PodNetwork()
        self.address = ""
        self.metrics_port = self.health_port = 0
        self.dir = cp.dir / "kueue"
        self.cert_dir = self.dir / "webhook-certs"
        self.process = None
        self._metrics_token = ""

    # configuration

    def configuration(self) -> dict:
        """The platform's Configuration, with the listening addresses moved to this process's
        own and the pod's namespace made explicit."""
        config = copy.deepcopy(self.platform_configuration)
        config["namespace"] = NAMESPACE
        config["health"]["healthProbeBindAddress"] = f"{self.address}:{self.health_port}"
        config["metrics"]["bindAddress"] = f"{self.address}:{self.metrics_port}"
        config["webhook"] |= {"host": self.address, "certDir": str(self.cert_dir)}
        # The Lease is in the pod's namespace, which in a pod it reads from the mounted
        # ServiceAccount.
        config["leaderElection"]["resourceNamespace"] = NAMESPACE
        config["internalCertManagement"] = {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                            "webhookSecretName": WEBHOOK_SECRET}
        # The visibility server writes its certificate to the fixed path /visibility.
        config["featureGates"] = {**config.get("featureGates", {}), "VisibilityOnDemand": False}
        return config

    # lifecycle

    def _install(self) -> None:
        kube = self.kube
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                   TEST_MANAGER)
        kube.install_crds(crds(), TEST_MANAGER)
        # The chart's empty Secret, which Kueue fills with its CA and serving certificate.
        kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE}}, TEST_MANAGER)
        self.address = self.network.allocate()
        self.metrics_port, self.health_port = free_port(), free_port()
        kube.apply({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE},
                    "spec": {"ports": [{"port": 443, "protocol": "TCP",
                                        "targetPort": WEBHOOK_PORT}]}}, TEST_MANAGER)
        # The pod's endpoint, as the EndpointSlice controller would list it once the pod is
        # ready. The port is named as the Service's (""): the API server skips unnamed ones.
        kube.apply({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "labels": {
                        "kubernetes.io/service-name": WEBHOOK_SERVICE,
                        "endpointslice.kubernetes.io/managed-by": TEST_MANAGER}},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [self.address], "conditions": {"ready": True}}],
                    "ports": [{"name": "", "port": WEBHOOK_PORT, "protocol": "TCP"}]},
                   TEST_MANAGER)
        for configuration in webhook_configurations(self.namespace_selector, self.frameworks):
            kube.apply(configuration, TEST_MANAGER, force=True)

    def _run(self) -> None:
        config = self.cp.write("kueue/controller_manager_config.yaml",
                               yaml.safe_dump(self.configuration()))
        kubeconfig = self.cp.kubeconfig(SERVICE_ACCOUNT, cert=self.cp.superuser_cert(
            f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"))
        self.process = self.cp.start_process("kueue", [
            str(tools.kueue()), f"--config={config}", f"--kubeconfig={kubeconfig}"])
        wait_until(self._ready, "Kueue to be ready and its webhooks to answer", timeout=90,
                   interval=0.2, explain=self.process.tail)

    def _ready(self) -> bool:
        assert self.process is not None
        if not self.process.running():
            raise RuntimeError(f"Kueue exited\n{self.process.tail(60)}")
        if not self.cert_dir.exists():
            self._mount_certificates()
            return False
        try:
            if not requests.get(f"http://{self.address}:{self.health_port}/readyz",
                                timeout=2).ok:
                return False
        except requests.ConnectionError:
            return False
        return self._webhooks_answer()

    def _mount_certificates(self) -> None:
        """What the kubelet does for the pod's Secret volume: its files, once Kueue has filled
        it, in the certificate directory."""
        data = self.kube.get("v1", "Secret", WEBHOOK_SECRET, NAMESPACE).get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            write_volume(self.cert_dir, {name: base64.b64decode(value)
                                         for name, value in data.items()})

    def _webhooks_answer(self) -> bool:
        """Whether the API server reaches the webhooks with the CA Kueue wrote: a ResourceFlavor
        created in a dry run goes through both of Kueue's webhooks for it."""
        try:
            self.kube.create({"apiVersion": API_VERSION, "kind": "ResourceFlavor",
                              "metadata": {"name": "webhook-probe"}}, dry_run=True)
            return True
        except ApiError as error:
            if "failed calling webhook" in error.message:
                return False
            raise

    def kill(self) -> None:
        """Kueue gone, as when its pods are: its webhook configurations stay registered."""
        if self.process is not None:
            self.process.stop()

    def stop(self) -> None:
        self.kill()
        for kind, name in WEBHOOK_CONFIGURATIONS.items():
            try:
                self.kube.delete("admissionregistration.k8s.io/v1", kind, name)
            except (ApiError, requests.ConnectionError):
                pass        # the control plane is already gone
        self.network.release_all()

    # what the tests read

    def metrics(self) -> str:
        """Kueue's metrics, as Prometheus scrapes them: over HTTPS, with the bearer token of a
        ServiceAccount allowed to `get` the non-resource URL /metrics (Kueue asks the API server
        with a TokenReview and a SubjectAccessReview)."""
        if not self._metrics_token:
            self._metrics_token = self._metrics_reader_token()
        assert self.process is not None
        with warnings.catch_warnings():
            # Its serving certificate is one it signed itself (Prometheus skips verifying it).
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            response = requests.get(f"https://{self.address}:{self.metrics_port}/metrics",
                                    headers={"Authorization": f"Bearer {self._metrics_token}"},
                                    verify=False, timeout=10)
        response.raise_for_status()
        return response.text

    def _metrics_reader_token(self) -> str:
        kube, name = self.kube, "kueue-metrics-scraper"
        kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": NAMESPACE}}, TEST_MANAGER)
        kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": name},
                    "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
                   TEST_MANAGER)
        kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": name},
                    "subjects": [{"kind": "ServiceAccount", "name": name,
                                  "namespace": NAMESPACE}]}, TEST_MANAGER)
        return self.cp.service_account_token(NAMESPACE, name)

