"""What the Monitoring component takes: its section, what its dashboard shows of the other
components, and their mixins."""

from __future__ import annotations

import shlex

from pydantic import Field

from ..base.mixin import Mixin
from ..base.model import (
    GpuNodeFacts,
    GpuPath,
    KubernetesVersion,
    Model,
    PulledImages,
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
    """The binpack scheduler, as the dashboard shows it."""

    name: str = Field(description="Its name (the BinpackScheduler component's "
                                  "`schedulerName` output): its series' job.")


class MonitoredAdmission(Model):
    """The admission webhooks, as the dashboard counts their refusals."""

    webhook_name: str = Field(description="The webhook's name (the OpaAdmission component's "
                                          "`webhookName` output).")


class MonitoredTeams(Model):
    """The teams, as the GPU use rules sum per team and the dashboard shows their queues."""

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
    admission: MonitoredAdmission = Field(description="The admission webhooks.")
    teams: MonitoredTeams | None = Field(default=None, description="The teams, when on.")
    mixins: list[Mixin] = Field(
        default_factory=list,
        description="Each component's alerts and scrapes (its mixin, from its package), "
                    "which Monitoring collects into the platform's rules and monitors.")
    secret_values: bool = Field(
        default=False,
        description="Store the release's values as a secret: set it when "
                    "`monitoring.extraValues` holds a credential.")
