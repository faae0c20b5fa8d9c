"""The whole GPU platform: its components, declared from the stack's settings in the order of
the design's dependencies."""


import pulumi
import pulumi_kubernetes as k8s

from ..base.component import Component, Declared
from ..base.validation import Subject
from ..binpack_scheduler.component import BinpackScheduler
from ..gpu_compaction.component import GpuCompaction
from ..gpu_nodes.component import GpuNodes
from ..gpu_operator.component import GpuOperator
from ..gpu_reclaim.component import GpuReclaim
from ..gpu_remediation.component import GpuRemediation
from ..gpu_reservation.component import GpuReservation
from ..monitoring.component import Monitoring
from ..opa_admission.component import OpaAdmission
from ..teams.component import Teams
from .inputs import GpuPlatformInputs
from .wiring import (
    check_platform,
    component_inputs,
    required_charts,
    required_images,
    with_mixins,
)
from .zz_generated_args import GpuPlatformArgs

# The platform's name in a program that declares one.
PLATFORM_NAME = "gpu-platform"


class GpuPlatform(Component[GpuPlatformInputs]):
    """The whole GPU platform on one cluster: GPU nodes, GPU Operator, binpack scheduler,
    admission, monitoring and (when on) compaction, teams and idle GPU reclaim, wired by the
    dependencies of the design, through a Kubernetes provider of the stack's cluster."""

    cluster_context: str
    "The kubeconfig context of the cluster the platform is on."
    scheduler_name: str
    "The schedulerName GPU pods name (BinpackScheduler's `schedulerName`)."
    preemptible_class: str | None
    "BinpackScheduler's `preemptibleClass`."
    webhook_name: str
    "OpaAdmission's `webhookName`."
    ca_certificate: pulumi.Output[str]
    "OpaAdmission's `caCertificate`: the webhook CA's certificate, PEM."
    grafana_url: str
    "Monitoring's `grafanaUrl`."
    grafana_port_forward: str
    "Monitoring's `grafanaPortForward`: the command that opens Grafana on localhost:3000."
    grafana_admin_password: pulumi.Output[str] | None
    "Monitoring's `grafanaAdminPassword` (a secret; none with an existing monitoring stack)."
    gpu_nodes: list[str]
    "GpuNodes' `nodeNames`: the GPU nodes the program taints (none with node pools)."
    compaction_schedule: str | None
    "GpuCompaction's `schedule`, when compaction is on."
    images: list[str]
    "Every image the platform runs, as the nodes pull them: what a mirror must hold."
    charts: list[str]
    "The Helm charts it installs, and where from."

    def __init__(self, name: str, args: GpuPlatformArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _check(self, inputs: GpuPlatformInputs, subject: Subject) -> None:
        check_platform(inputs, subject)

    def _declare(self, name: str, inputs: GpuPlatformInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        settings = inputs
        components = component_inputs(settings, settings.secret_sections)
        # Two platforms in one program (one per cluster) name their resources apart; the one of
        # the default name keeps the names every existing stack has.
        prefix = "" if name == PLATFORM_NAME else f"{name}-"
        self._register(name, opts, child_prefix=prefix)
        # Every Kubernetes object and release goes to the stack's cluster through this provider
        # (the example stack disables the default one, so nothing reaches the cluster that
        # happens to be current). Server-side apply: a preview is the API server's dry run.
        cluster = settings.cluster
        self.provider = k8s.Provider(
            self.child_name("cluster"), context=cluster.context, kubeconfig=cluster.kubeconfig,
            enable_server_side_apply=True, opts=pulumi.ResourceOptions(parent=self))

        def child(*after: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, providers={"kubernetes": self.provider},
                                          depends_on=list(after))

        # Taint the nodes before the operator's DaemonSets and the first GPU pods arrive.
        self.nodes = GpuNodes.from_inputs(self.child_name("gpu-nodes"), components.gpu_nodes,
                                          child())
        self.operator = GpuOperator.from_inputs(self.child_name("gpu-operator"),
                                                components.gpu_operator, child(self.nodes))
        self.scheduler = BinpackScheduler.from_inputs(self.child_name("binpack-scheduler"),
                                                      components.scheduler, child())
        # Kueue's webhooks answer before the policy sends GPU pods in team namespaces to them.
        self.teams = (Teams.from_inputs(self.child_name("teams"), components.teams, child())
                      if settings.teams.enabled else None)
        # Never force GPU pods onto a scheduler that is not running.
        self.admission = OpaAdmission.from_inputs(
            self.child_name("opa-admission"), components.admission,
            child(self.scheduler, *([self.teams] if self.teams else [])))
        # The DCGM exporter Service the ServiceMonitor selects is created by the operator.
        # Each component's alerts and scrapes, from the components declared so far (the
        # webhook certificate's expiry is known once admission has made it).
        monitored = with_mixins(components, {"opa_admission": self.admission}).monitoring
        self.monitoring = Monitoring.from_inputs(self.child_name("monitoring"), monitored,
                                                 child(self.operator))
        # Evictions only once the scheduler that places the evicted pods again is there.
        self.compaction = (GpuCompaction.from_inputs(self.child_name("gpu-compaction"),
                                                     components.compaction, child(self.scheduler))
                           if settings.compaction.enabled else None)
        # Reclaim reads the usage rules Monitoring declares, and has Roles in the teams'
        # namespaces, which Teams creates.
        self.reclaim = (GpuReclaim.from_inputs(
            self.child_name("gpu-reclaim"), components.reclaim,
            child(self.monitoring, *([self.teams] if self.teams else [])))
            if settings.reclaim.enabled else None)
        # Reservations serve the binpack scheduler's pods; its taint is one admission leaves
        # to it.
        self.reservation = (GpuReservation.from_inputs(
            self.child_name("gpu-reservation"), components.reservation,
            child(self.scheduler, self.admission))
            if settings.reservation.enabled else None)
        # Remediation reads the faults Monitoring's Prometheus scrapes; its taint is one
        # admission leaves to it, and its drain puts teams' workloads back in their queues.
        self.remediation = (GpuRemediation.from_inputs(
            self.child_name("gpu-remediation"), components.remediation,
            child(self.monitoring, self.admission, *([self.teams] if self.teams else [])))
            if settings.remediation.enabled else None)

        self.cluster_context = cluster.context
        self.scheduler_name = self.scheduler.scheduler_name
        self.preemptible_class = self.scheduler.preemptible_class
        self.webhook_name = self.admission.webhook_name
        self.ca_certificate = self.admission.ca_certificate
        self.grafana_url = self.monitoring.grafana_url
        self.grafana_port_forward = self.monitoring.grafana_port_forward
        self.grafana_admin_password = self.monitoring.grafana_admin_password
        self.gpu_nodes = self.nodes.node_names
        self.compaction_schedule = self.compaction.schedule if self.compaction else None
        self.images = required_images(components)
        self.charts = required_charts(components)
        self.outputs = {
            "clusterContext": self.cluster_context,
            "schedulerName": self.scheduler_name,
            "preemptibleClass": self.preemptible_class,
            "webhookName": self.webhook_name,
            "caCertificate": self.ca_certificate,
            "grafanaUrl": self.grafana_url,
            "grafanaPortForward": self.grafana_port_forward,
            "grafanaAdminPassword": self.grafana_admin_password,
            "gpuNodes": self.gpu_nodes,
            "compactionSchedule": self.compaction_schedule,
            # What a mirror must hold before an air-gapped install.
            "images": self.images,
            "charts": self.charts,
        }
        self.register_outputs(self.outputs)

    @property
    def declarations(self) -> list[Declared]:
        """Every object and release its components declare."""
        return [declared for component in (self.nodes, self.operator, self.scheduler,
                                           self.teams, self.admission, self.monitoring,
                                           self.compaction, self.reclaim,
                                           self.reservation, self.remediation) if component
                for declared in component.declared]
