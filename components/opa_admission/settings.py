"""The `admission` section of the stack settings."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..base.facts import NVIDIA_RESOURCES, claims_webhook, mutating_webhook, workloads_webhook
from ..base.model import ImageSettings, Model
from ..base.validation import (
    Invalid,
    NamespaceNames,
    OwnNamespace,
    is_dns_subdomain,
    is_qualified_name,
)
from .facts import NVIDIA_DEVICE_CLASS_SUFFIX


class CertificateSettings(Model):
    """The lifetimes of the admission webhook's CA and serving certificate."""

    ca_validity_hours: int = Field(default=87600, ge=24,
                                   description="Lifetime of the webhook CA, hours (10 years).")
    server_validity_hours: int = Field(default=8760, ge=24,
                                       description="Lifetime of OPA's serving certificate, "
                                                   "hours (1 year).")
    early_renewal_hours: int = Field(default=720, ge=1,
                                     description="`pulumi up` replaces a certificate this many "
                                                 "hours before it expires (30 days).")

    @model_validator(mode="after")
    def renewal_inside_validity(self) -> CertificateSettings:
        shortest = min(self.ca_validity_hours, self.server_validity_hours)
        if self.early_renewal_hours >= shortest:
            raise Invalid("early renewal must start before the certificate expires",
                          f"fewer hours than the shortest validity ({shortest})",
                          at=("earlyRenewalHours",), value=self.early_renewal_hours,
                          has_value=True)
        return self


class AdmissionSettings(Model):
    """OPA behind the admission webhooks: which pods are GPU pods, and what is refused."""

    namespace: OwnNamespace = Field(default="gpu-admission", description="Namespace of OPA.")
    webhook_name: str = Field(default="gpu-scheduler-policy.gpu-platform.io",
                              description="Name of the webhook (a DNS subdomain).")
    replicas: int = Field(default=2, ge=2, le=10,
                          description="OPA pods (2..10), kept available by a "
                                      "PodDisruptionBudget.")
    opa: ImageSettings = Field(
        default_factory=lambda: ImageSettings(repository="openpolicyagent/opa",
                                              tag="1.22.2-static"),
        description="OPA image (pinned).")
    mode: Literal["enforce", "mutate", "audit"] = Field(
        default="enforce",
        description="`enforce`: refuse pods that break a rule. `mutate`: set the scheduler and "
                    "the GPU tolerations on GPU pods that lack them, refuse what cannot be "
                    "fixed. `audit`: admit, with a warning to the user and a label the "
                    "dashboard counts. See docs/concepts/admission.md#modes.")
    gpu_resource_names: list[str] = Field(
        default_factory=lambda: [NVIDIA_RESOURCES],
        min_length=1,
        description="Resources that make a pod a GPU pod when it asks for more than zero of "
                    "one; a trailing * matches a prefix. The default covers everything "
                    "NVIDIA's device plugins advertise: `nvidia.com/gpu`, `nvidia.com/gpu.shared` "
                    "(time-slicing or MPS with renaming), `nvidia.com/mig-<profile>` (and "
                    "`.shared`), vGPU types and passthrough devices, and the NICs of NVIDIA's "
                    "Network Operator: a pod that asks only for such a NIC is placed as a GPU "
                    "pod is (the binpack scheduler, the GPU toleration), since the hardware it "
                    "needs is on the GPU nodes. List only GPU resources to treat such pods as "
                    "pods without GPUs.")
    nvidia_runtime_classes: list[str] = Field(
        default_factory=lambda: ["nvidia", "nvidia-cdi", "nvidia-legacy"],
        description="RuntimeClasses of the NVIDIA container runtime (the GPU Operator creates "
                    "these); a pod that names one must request a GPU.")
    exempt_namespaces: NamespaceNames = Field(
        default_factory=list,
        description="Namespaces whose pods are never checked: for node agents that need device "
                    "paths on every node (privileged, host paths under /dev, /proc or /sys, "
                    "hostPID), and for pods trusted with GPUs. kube-system and the platform's "
                    "admission, GPU Operator and monitoring namespaces always are. Whoever may "
                    "create pods in one is trusted with every GPU of the cluster.")
    device_classes: list[str] = Field(
        default_factory=list,
        description="Other vendors' DeviceClasses (Dynamic Resource Allocation) whose "
                    "devices pods may have outside the GPU rules: classes the platform team "
                    "has checked select no NVIDIA device (a claim's own selectors only narrow "
                    "its class's devices). Claims on them, and containers that request them "
                    "by their class's resource name (`deviceclass.resource.kubernetes.io/"
                    "<class>`), are admitted; a claim on any other class but NVIDIA's is "
                    "refused. NVIDIA's classes cannot be listed: on the DRA path "
                    "(`gpuOperator.gpuPath: dra`) their claims are GPU claims already.")
    device_taint_writers: list[str] = Field(
        default_factory=list,
        description="Users (as the API server names them, e.g. `alice@example.com` or "
                    "`system:serviceaccount:ops:drainer`) who may write DeviceTaintRules that "
                    "take NVIDIA's devices out of service (`NoSchedule`, `NoExecute`): such a "
                    "rule keeps every claim off the GPUs it selects, or evicts the pods that "
                    "use them. Nobody else may.")
    failure_policy: Literal["Fail", "Ignore"] = Field(
        default="Fail",
        description="What the API server does with a pod the policy must see when OPA cannot "
                    "answer (`Ignore` in audit mode, where `Fail` is refused: audit must never "
                    "block a pod).")
    timeout_seconds: int = Field(default=5, ge=1, le=30,
                                 description="Webhook call timeout, seconds (1..30).")
    webhook_port: int = Field(
        default=10250, ge=1024, le=65535,
        description="Port OPA serves the webhook on, in its pod (the API server connects to it "
                    "there). 10250 passes the control-plane firewalls of private GKE clusters "
                    "and of EKS security groups that allow only 443 and 10250 to nodes; OPA "
                    "runs unprivileged, so not below 1024.")
    max_gpu_pod_priority: int = Field(
        default=0, ge=-1_000_000_000, le=2_000_001_000,
        description="Highest priority a pod that may run on a GPU node (a GPU pod, or one "
                    "that tolerates the GPU taint or is bound to a GPU node by name) may have "
                    "through the `priorityClassName` it names: above 0 it would preempt other "
                    "users' GPU pods that never opted in to preemption. Pods that name no "
                    "class are not checked (a cluster's globalDefault class applies to them). "
                    "Raise it where the cluster "
                    "ranks GPU workloads by priority on purpose; it may not be below "
                    "`scheduler.preemptibleClass.value`.")
    decision_logs: bool = Field(default=False,
                                description="Log every admission decision to OPA's stdout.")
    certificate: CertificateSettings = Field(default_factory=CertificateSettings,
                                             description="Webhook TLS.")


    @model_validator(mode="before")
    @classmethod
    def audit_defaults_to_ignore(cls, data: Any) -> Any:
        # Audit admits every pod; an OPA outage must not refuse one either.
        if isinstance(data, dict) and data.get("mode") == "audit" and not (
                {"failurePolicy", "failure_policy"} & data.keys()):
            return {**data, "failurePolicy": "Ignore"}
        return data

    @model_validator(mode="after")
    def mode_fits_failure_policy(self) -> AdmissionSettings:
        if self.mode == "audit" and self.failure_policy == "Fail":
            raise Invalid("audit mode admits every pod, but with Fail an OPA outage would refuse "
                          "GPU pods", "Ignore (the default in audit mode), or mode enforce or "
                          "mutate", at=("failurePolicy",), value="Fail", has_value=True)
        return self

    @property
    def mutating_webhook_name(self) -> str:
        return mutating_webhook(self.webhook_name)

    @property
    def claims_webhook_name(self) -> str:
        return claims_webhook(self.webhook_name)

    @property
    def workloads_webhook_name(self) -> str:
        return workloads_webhook(self.webhook_name)

    @property
    def templates_webhook_name(self) -> str:
        return f"templates.{self.webhook_name}"

    @property
    def reachability_webhook_name(self) -> str:
        return f"reachable.{self.webhook_name}"

    @field_validator("nvidia_runtime_classes")
    @classmethod
    def runtime_classes_are_names(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if not is_dns_subdomain(name):
                raise Invalid("not a RuntimeClass name", "DNS-1123 subdomains such as nvidia",
                              at=(index,), value=name, has_value=True)
        return names

    @field_validator("webhook_name")
    @classmethod
    def webhook_name_is_qualified(cls, value: str) -> str:
        # The API server requires a fully qualified name: at least three DNS labels.
        if not is_dns_subdomain(value) or value.count(".") < 2:
            raise Invalid("not a webhook name",
                          "a DNS subdomain of at least three labels, e.g. a.b.io")
        return value

    @field_validator("gpu_resource_names")
    @classmethod
    def resource_patterns(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            # A prefix is valid when some name could complete it.
            example = name[:-1] + "x" if name.endswith("*") else name
            if "*" in example or "/" not in example or not is_qualified_name(example):
                raise Invalid("not an extended resource name or prefix",
                              "a name such as nvidia.com/gpu, or a prefix ending in * such as "
                              "nvidia.com/* or nvidia.com/mig-*", at=(index,), value=name,
                              has_value=True)
        return names

    @field_validator("device_classes")
    @classmethod
    def device_classes_are_not_nvidias(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if not is_dns_subdomain(name):
                raise Invalid("not a DeviceClass name", "DNS-1123 subdomains such as "
                              "nic.example.com", at=(index,), value=name, has_value=True)
            if name.endswith(NVIDIA_DEVICE_CLASS_SUFFIX):
                raise Invalid("an NVIDIA device class hands out GPUs outside the binpack "
                              "scheduler", "classes that select no NVIDIA device",
                              at=(index,), value=name, has_value=True)
        return names
