"""OPA admission: OPA behind a validating webhook (and, in the mutate and audit modes, a
mutating one) that keeps every GPU, and every place on a GPU node, behind the binpack scheduler.
The rules are in `policy/admission/`, a folder per rule group (docs/concepts/admission.md).

OPA serves the webhook over TLS (a CA and a serving certificate made by pulumi-tls). It loads
everything it decides with as files from ConfigMap volumes when it starts: the admission policy
and its parameters (one ConfigMap, so a pod never mixes versions) and its own API rules. Nothing
writes to a running OPA: a container that restarts, for whatever reason, comes back with the
policy, and a changed policy reaches the webhook as a rolling update of the pods. OPA's own API
is locked by `policy/opa/authz.rego`: callers reach only the admission decisions, health and
metrics.
"""

import pulumi
import pulumi_tls as tls

from ..base import manifests
from ..base.component import Component, declare
from ..base.facts import ADMISSION_COMPONENT, OPA_SERVICE
from .compute_domains import compute_domain_policy
from .inputs import OpaAdmissionInputs
from .policy import loaded_files
from .server import (
    deployment,
    generations_quota,
    policy_config_maps,
    service,
    service_account,
    service_dns_names,
    tls_secret,
)
from .webhooks import (
    mutating_webhook_configuration,
    reachability_fingerprint,
    reachability_probe,
    webhook_configuration,
)
from .zz_generated_args import OpaAdmissionArgs


class OpaAdmission(Component[OpaAdmissionInputs]):
    """OPA behind the admission webhooks: its TLS, policy, Deployment and Service, then the
    webhook configurations, registered once OPA is ready (and after whatever the component
    depends on, such as the binpack scheduler), and last a probe that proves the API server
    reaches OPA through them."""

    namespace: str
    "OPA's namespace."
    webhook_name: str
    "The name of the webhook on pods."
    certificate_not_after: pulumi.Output[str]
    "When the webhook's serving certificate expires, RFC 3339."
    ca_certificate: pulumi.Output[str]
    "The webhook CA's certificate, PEM."

    def __init__(self, name: str, args: OpaAdmissionArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _declare(self, name: str, inputs: OpaAdmissionInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        adm = inputs.admission
        certs = adm.certificate
        child = pulumi.ResourceOptions(parent=self)

        namespace = declare(manifests.namespace(adm.namespace, "restricted", ADMISSION_COMPONENT),
                            self)
        ca_key = tls.PrivateKey(self.child_name("ca"), algorithm="ECDSA",
                                ecdsa_curve="P256", opts=child)
        self.ca = tls.SelfSignedCert(
            self.child_name("ca"), private_key_pem=ca_key.private_key_pem,
            is_ca_certificate=True,
            subject=tls.SelfSignedCertSubjectArgs(common_name="gpu-platform admission CA",
                                                  organization="gpu-platform"),
            validity_period_hours=certs.ca_validity_hours,
            early_renewal_hours=certs.early_renewal_hours,
            allowed_uses=["cert_signing", "crl_signing", "digital_signature"], opts=child)
        server_key = tls.PrivateKey(self.child_name("server"), algorithm="ECDSA",
                                    ecdsa_curve="P256", opts=child)
        self.server_request = tls.CertRequest(
            self.child_name("server"), private_key_pem=server_key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=service_dns_names(inputs)[-1]),
            dns_names=service_dns_names(inputs), opts=child)
        server_cert = tls.LocallySignedCert(
            self.child_name("server"), cert_request_pem=self.server_request.cert_request_pem,
            ca_private_key_pem=ca_key.private_key_pem, ca_cert_pem=self.ca.cert_pem,
            validity_period_hours=certs.server_validity_hours,
            early_renewal_hours=certs.early_renewal_hours,
            allowed_uses=["server_auth", "digital_signature", "key_encipherment"], opts=child)

        after_namespace = [namespace]
        account = declare(service_account(inputs), self, after_namespace)
        # A generation's objects keep their logical names (`<namespace>/<base name>`): a new
        # generation replaces them, created first, the webhooks switched to its Service, and
        # the old ones deleted last, once nothing calls them.
        ns = adm.namespace
        config_maps = {base: declare(config_map, self, after_namespace,
                                     name=f"{ns}/{base}")
                       for base, config_map in zip(loaded_files(inputs),
                                                   policy_config_maps(inputs), strict=True)}
        certificate = declare(tls_secret(
            inputs, tls_cert=server_cert.cert_pem, tls_key=server_key.private_key_pem,
            ca_cert=self.ca.cert_pem), self, after_namespace)
        svc = declare(service(inputs), self, after_namespace, name=f"{ns}/{OPA_SERVICE}")
        quota = declare(manifests.critical_pods_quota(adm.namespace, ADMISSION_COMPONENT,
                                                      generations_quota(adm.replicas)),
                        self, after_namespace)
        opa = declare(deployment(inputs), self,
                      [*after_namespace, quota, account, *config_maps.values(),
                       certificate], name=f"{ns}/{OPA_SERVICE}")
        pdb = declare(manifests.pod_disruption_budget(OPA_SERVICE, adm.namespace,
                                                      ADMISSION_COMPONENT), self, after_namespace)
        ca_bundle = self.ca.cert_pem.apply(manifests.base64_text)
        ready = [opa, svc, pdb, *config_maps.values(), certificate]
        self.webhook = declare(webhook_configuration(inputs, ca_bundle), self, ready)
        webhooks = [self.webhook]
        if mutating := mutating_webhook_configuration(inputs, ca_bundle):
            webhooks.append(declare(mutating, self, ready))
        # The API server decides these itself (they read the claim templates), whether OPA
        # answers or not: the policy before the binding that puts it in force.
        if compute_domains := compute_domain_policy(inputs):
            policy, binding = compute_domains
            declare(binding, self, [declare(policy, self)])
        # Last: `pulumi up` fails here, naming the cause, if the API server cannot reach OPA.
        self.reachability_probe = declare(reachability_probe(inputs, ca_bundle.apply(
            lambda ca: reachability_fingerprint(inputs, ca))), self, webhooks)

        self.namespace = adm.namespace
        self.webhook_name = adm.webhook_name
        self.certificate_not_after = server_cert.validity_end_time
        self.ca_certificate = self.ca.cert_pem
        self.register_outputs({"namespace": self.namespace, "webhookName": self.webhook_name,
                               "certificateNotAfter": self.certificate_not_after,
                               "caCertificate": self.ca_certificate})
