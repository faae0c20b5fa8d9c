"""What the Monitoring component takes: its section, and the components it watches."""

from __future__ import annotations

import shlex
from typing import Annotated, Any, Literal

from pydantic import Field

from ..base.model import (
    GpuNodeFacts,
    GpuPath,
    KubernetesVersion,
    Model,
    PulledImages,
    PulumiInput,
    gpu_nodes_field,
    kubernetes_version_field,
    section,
)
from .settings import MonitoringSettings


class KubectlContext(Model):
    """The cluster, as the kubectl commands the component outputs name it."""

    context: str = Field(description="The kubeconfig context (`cluster.context`), so that a "
                                      "command never reaches whichever context is current.")
    kubeconfig: str | None = Field(
        default=None,
        description="The kubeconfig file (`cluster.kubeconfig`); unset: the one kubectl "
                    "finds (`$KUBECONFIG`, else `~/.kube/config`).")

    def kubectl(self, *args: str) -> str:
        """A kubectl command line, quoted for a shell, that reaches this cluster."""
        where = ["--context", self.context]
        if self.kubeconfig:
            where += ["--kubeconfig", self.kubeconfig]
        return shlex.join(["kubectl", *where, *args])


class MonitoredScheduler(Model):
    """The binpack scheduler, as Monitoring scrapes it and alerts on it."""

    name: str = Field(description="Its name (the BinpackScheduler component's "
                                  "`schedulerName` output).")
    namespace: str = Field(description="Its namespace (the BinpackScheduler component's "
                                       "`namespace` output).")


class MonitoredAdmission(Model):
    """The admission webhooks and OPA, as Monitoring scrapes them and alerts on them."""

    namespace: str = Field(description="OPA's namespace (the OpaAdmission component's "
                                       "`namespace` output).")
    webhook_name: str = Field(description="The webhook's name (the OpaAdmission component's "
                                          "`webhookName` output).")
    failure_policy: Literal["Fail", "Ignore"] = Field(
        description="What the API server does when OPA cannot answer: with `Fail` an outage "
                    "refuses pods, so its alert is critical.")
    certificate_renewal_hours: int = Field(
        description="How many hours before its expiry `pulumi up` renews the webhook's "
                    "serving certificate (`admission.certificate.earlyRenewalHours`).")
    certificate_not_after: Annotated[Any, PulumiInput(str)] = Field(
        default=None,
        description="When the webhook's serving certificate expires, RFC 3339 (the OpaAdmission "
                    "component's `certificateNotAfter` output): alerts warn before it does.")


class MonitoredCompaction(Model):
    """Compaction's CronJob, whose runs Monitoring alerts on."""

    name: str = Field(description="The CronJob's name (`compaction.name`).")
    namespace: str = Field(description="Its namespace (the GpuCompaction component's "
                                       "`namespace` output).")


class MonitoredReclaim(Model):
    """Idle reclaim's CronJob, whose runs Monitoring alerts on."""

    name: str = Field(description="The CronJob's name (`reclaim.name`).")
    namespace: str = Field(description="Its namespace (the GpuReclaim component's `namespace` "
                                       "output).")


class MonitoredTeams(Model):
    """Kueue and the teams' queues, as Monitoring scrapes them and alerts on them."""

    namespace: str = Field(description="Kueue's namespace (the Teams component's `namespace` "
                                       "output).")
    release_name: str = Field(description="Kueue's Helm release (`teams.kueue.releaseName`).")
    namespaces: dict[str, str] = Field(
        default_factory=dict,
        description="Each team namespace, with its team (the Teams component's "
                    "`teamNamespaces` output): GPU use is summed per team from it. Empty: "
                    "use is shown per pod and namespace only.")
    topology_levels: list[str] = Field(
        default_factory=list,
        description="The network levels above the node, each a node label (from "
                    "`teams.topology`): the dashboard shows free GPUs per domain of each.")


class MonitoringInputs(PulledImages):
    """kube-prometheus-stack, the GPU dashboard, rules and alerts, with the components they
    watch."""

    monitoring: MonitoringSettings = section(MonitoringSettings)
    kubernetes_version: KubernetesVersion = kubernetes_version_field()
    cluster: KubectlContext = Field(
        description="The cluster the commands it outputs (`grafanaPortForward`) reach.")
    gpu_operator_namespace: str = Field(
        description="The GPU Operator's namespace, where the DCGM exporter Service is (the "
                    "GpuOperator component's `namespace` output).")
    gpu_path: GpuPath = Field(
        default="devicePlugin",
        description="How pods reach GPUs (the GpuOperator component's `gpuPath` output): which "
                    "DCGM exporter to scrape, and where the GPUs' capacity is read from.")
    gpu_nodes: GpuNodeFacts = gpu_nodes_field()
    scheduler: MonitoredScheduler = Field(description="The binpack scheduler.")
    admission: MonitoredAdmission = Field(description="The admission webhooks and OPA.")
    compaction: MonitoredCompaction | None = Field(
        default=None, description="Compaction's CronJob, when compaction is on.")
    teams: MonitoredTeams | None = Field(default=None, description="Kueue, when teams are on.")
    reclaim: MonitoredReclaim | None = Field(
        default=None, description="Idle reclaim's CronJob, when reclaim is on.")
    secret_values: bool = Field(
        default=False,
        description="Store the release's values as a secret: set it when "
                    "`monitoring.extraValues` holds a credential.")
