"""What the platform hands each component: its section of the settings, and the facts it needs
from the others, each from the one setting that holds it; and what the whole platform runs
(images, charts).

The settings were validated once, when the stack file was read (or GpuPlatform's args when a
program declared it): each component's inputs are put together from them without validating
any value again."""

from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from pydantic import BaseModel

from ..base import gpu_faults
from ..base.descriptor import Deployable, Descriptor
from ..base.facts import GPU_RESOURCE, kueue_integrations, service_account_user
from ..base.model import GpuNodeFacts, PassingTaint
from ..base.validation import SettingsError, Subject, describe_invalid
from ..binpack_scheduler.inputs import BinpackSchedulerInputs
from ..gpu_compaction.inputs import GpuCompactionInputs
from ..gpu_nodes.inputs import GpuNodesInputs
from ..gpu_operator import dra
from ..gpu_operator import values as gpu_operator_values
from ..gpu_operator.inputs import GpuOperatorInputs
from ..gpu_reclaim.inputs import GpuReclaimInputs
from ..gpu_remediation.inputs import GpuRemediationInputs
from ..gpu_reservation import manifests as reservation_manifests
from ..gpu_reservation.inputs import GpuReservationInputs
from ..monitoring import usage
from ..monitoring import values as monitoring_values
from ..monitoring.inputs import (
    KubectlContext,
    MonitoredAdmission,
    MonitoredScheduler,
    MonitoredTeams,
    MonitoringInputs,
)
from ..opa_admission.inputs import (
    AdmittedTeams,
    DraWriters,
    OpaAdmissionInputs,
    PlatformDeviceClass,
)
from ..opa_admission.settings import AdmissionSettings
from ..registry import DESCRIPTORS
from ..teams import kueue
from ..teams.inputs import TeamsInputs
from .kubeconfig import kubeconfig_problem
from .settings import StackSettings


@dataclass(frozen=True)
class ComponentInputs:
    """Each component's inputs, as the platform declares it (compaction's, teams' and
    reclaim's and reservation's also when they are off, for what they would run)."""

    gpu_nodes: GpuNodesInputs
    gpu_operator: GpuOperatorInputs
    scheduler: BinpackSchedulerInputs
    admission: OpaAdmissionInputs
    monitoring: MonitoringInputs
    compaction: GpuCompactionInputs
    teams: TeamsInputs
    reclaim: GpuReclaimInputs
    reservation: GpuReservationInputs
    remediation: GpuRemediationInputs


Valid = TypeVar("Valid", bound=BaseModel)


def valid(model: type[Valid], **fields: Any) -> Valid:
    """`model` of values that are valid already: its defaults filled in, nothing validated."""
    return model.model_construct(**fields)


def component_inputs(settings: StackSettings, secret_sections: Collection[str] = ()
                     ) -> ComponentInputs:
    """Each component's inputs from the stack's settings. (The mixins Monitoring collects are
    made again once the components that know more when declared are: `with_mixins`.)"""
    nodes, op = settings.gpu_nodes, settings.gpu_operator
    sched, adm = settings.scheduler, settings.admission
    compaction, teams = settings.compaction, settings.teams
    mirror = {"image_registry_mirror": settings.image_registry_mirror}
    gpu_nodes = valid(GpuNodeFacts, taints=nodes.taints,
                      names=list(nodes.names) if nodes.tainted_by == "program" else None,
                      passing_taints=passing_taints(settings))
    monitoring = valid(
        MonitoringInputs, monitoring=settings.monitoring,
        kubernetes_version=settings.kubernetes_version,
        cluster=valid(KubectlContext, context=settings.cluster.context,
                      kubeconfig=settings.cluster.kubeconfig),
        gpu_operator_namespace=op.namespace, gpu_path=op.gpu_path, gpu_nodes=gpu_nodes,
        scheduler=valid(MonitoredScheduler, name=sched.name),
        admission=valid(MonitoredAdmission, webhook_name=adm.webhook_name),
        teams=(valid(MonitoredTeams, namespaces=teams.team_namespaces,
                     topology_levels=teams.topology.node_levels[:-1])
               if teams.enabled else None),
        secret_values="monitoring" in secret_sections, **mirror)
    inputs = ComponentInputs(
        gpu_nodes=valid(GpuNodesInputs, gpu_nodes=nodes),
        gpu_operator=valid(GpuOperatorInputs, gpu_operator=op, gpu_nodes=gpu_nodes,
                           secret_values="gpuOperator" in secret_sections, **mirror),
        scheduler=valid(BinpackSchedulerInputs, scheduler=sched,
                        kubernetes_version=settings.kubernetes_version,
                        mig_resources=op.mig.resources, **mirror),
        admission=valid(
            OpaAdmissionInputs, admission=with_remediation_writing_device_taints(settings),
            scheduler_name=sched.name,
            preemptible_class=(sched.preemptible_class.name
                               if sched.preemptible_class.enabled else None),
            gpu_nodes=gpu_nodes,
            teams=(valid(AdmittedTeams, namespaces=teams.team_namespaces,
                         gpu_pods_outside_teams=teams.gpu_pods_outside_teams,
                         kueue_user=teams.kueue.controller_user,
                         workload_controllers=list(teams.workload_controllers),
                         frameworks=list(teams.frameworks),
                         topology_levels=teams.topology.node_levels[:-1])
                   if teams.enabled else None),
            gpu_path=op.gpu_path,
            platform_device_classes=[valid(PlatformDeviceClass, **shape)
                                     for shape in dra.device_class_shapes()
                                     if op.gpu_path == "dra"],
            dra_writers=valid(DraWriters, **dra.dra_writers(op)),
            scheduler_user=service_account_user(sched.namespace, sched.name),
            trusted_namespaces=[op.namespace, settings.monitoring.namespace], **mirror),
        monitoring=monitoring,
        compaction=valid(GpuCompactionInputs, compaction=compaction, scheduler_name=sched.name,
                         scoring_strategy=sched.scoring_strategy,
                         mig_resources=op.mig.resources, **mirror),
        teams=valid(TeamsInputs, teams=teams, gpu_nodes=gpu_nodes,
                    device_classes=dra.served_resources(op), **mirror),
        reclaim=reclaim_inputs(settings, monitoring),
        reservation=valid(GpuReservationInputs, reservation=settings.reservation,
                          scheduler_name=sched.name,
                          dra_driver=dra.NVIDIA_DRA_DRIVER if op.gpu_path == "dra" else None,
                          gpu_device_classes=(dra.served_resources(op)[GPU_RESOURCE]
                                              if op.gpu_path == "dra" else []), **mirror),
        remediation=remediation_inputs(settings, monitoring),
    )
    return with_mixins(inputs)


def remediation_taints(settings: StackSettings) -> bool:
    """Whether remediation takes GPUs out of service itself (rather than report, or leave it
    to NVSentinel)."""
    remediation = settings.remediation
    return remediation.mode in ("quarantine", "drain") and remediation.detector == "platform"


def with_remediation_writing_device_taints(settings: StackSettings) -> AdmissionSettings:
    """The admission settings, with remediation's identity among the users who may take
    NVIDIA's devices out of service where it does so on the DRA path (its DeviceTaintRules)."""
    adm, remediation = settings.admission, settings.remediation
    if not (remediation_taints(settings) and settings.gpu_operator.gpu_path == "dra"):
        return adm
    user = service_account_user(remediation.namespace, remediation.name)
    return adm.model_copy(update={"device_taint_writers": [*adm.device_taint_writers, user]})


def passing_taints(settings: StackSettings) -> list[PassingTaint]:
    """The taints the platform puts on a GPU node for a while: a reservation's, and a fault's
    where remediation takes nodes out of service."""
    taints = []
    if settings.reservation.enabled:
        reservation = settings.reservation
        taints.append(PassingTaint(
            key=reservation_manifests.TAINT_KEY, meaning=reservation_manifests.TAINT_MEANING,
            given_by=service_account_user(reservation.namespace, reservation.name)))
    if remediation_taints(settings):
        taints.append(PassingTaint(key=gpu_faults.QUARANTINE_TAINT,
                                   meaning=gpu_faults.QUARANTINE_MEANING))
    return taints


def remediation_inputs(settings: StackSettings, monitoring: MonitoringInputs
                       ) -> GpuRemediationInputs:
    """Remediation's inputs: the Prometheus it reads (its own setting, else the installed
    stack's), the fatal XIDs the alerts use, the GPU taint and, for the drain, the GPU path and
    the teams' workloads."""
    remediation, teams, op = settings.remediation, settings.teams, settings.gpu_operator
    return valid(GpuRemediationInputs, remediation=remediation,
                 prometheus_url=(remediation.prometheus_url
                                 or monitoring_values.prometheus_url(monitoring) or ""),
                 fatal_xid_codes=settings.monitoring.alerts.fatal_xid_codes,
                 gpu_taint_key=settings.gpu_nodes.taints[0].key,
                 dra_driver=dra.NVIDIA_DRA_DRIVER if op.gpu_path == "dra" else None,
                 team_namespaces=sorted(teams.team_namespaces) if teams.enabled else [],
                 workload_owners=workload_owners(settings),
                 image_registry_mirror=settings.image_registry_mirror)


def with_mixins(inputs: ComponentInputs, declared: Mapping[str, Any] | None = None
                ) -> ComponentInputs:
    """`inputs` with Monitoring's inputs holding each package's mixin, in the order of the
    registry: from its component where it is `declared` already, by package (what it knows
    once its resources exist, as the webhook certificate's expiry)."""
    alerts = inputs.monitoring.monitoring.alerts
    declared = declared or {}
    mixins = [descriptor.mixin(given, alerts, declared.get(descriptor.package))
              for descriptor, given in _each(inputs) if descriptor.mixin]
    return replace(inputs, monitoring=inputs.monitoring.model_copy(update={"mixins": mixins}))


def workload_owners(settings: StackSettings) -> dict[str, str]:
    """The kinds Kueue admits in team namespaces (`group/Kind`) with their API resources: what a
    run follows up from a pod to the Workload it puts back in its queue."""
    teams = settings.teams
    if not teams.enabled:
        return {}
    return {f"{i.group}/{i.kind}": i.resource for i in kueue_integrations(teams.frameworks)
            if i.kind != "Pod"}


def reclaim_inputs(settings: StackSettings, monitoring: MonitoringInputs) -> GpuReclaimInputs:
    """Reclaim's inputs: the Prometheus it reads (its own setting, else the installed stack's),
    the usage rules' idle query with its window and threshold, the teams' namespaces and what
    it never touches."""
    reclaim, teams = settings.reclaim, settings.teams
    url = reclaim.prometheus_url or monitoring_values.prometheus_url(monitoring) or ""
    threshold = settings.monitoring.usage.active_threshold
    return valid(GpuReclaimInputs, reclaim=reclaim, prometheus_url=url,
                 idle_query=usage.idle_pods(reclaim.idle_for, threshold), idle_below=threshold,
                 team_namespaces=teams.team_namespaces if teams.enabled else {},
                 workload_owners=workload_owners(settings),
                 exempt_namespaces=sorted(settings.reclaim_exempt_namespaces),
                 image_registry_mirror=settings.image_registry_mirror)


def check_chart_values(inputs: ComponentInputs, subject: Subject) -> None:
    """The extra chart values merge over the generated ones (raises SettingsError naming each
    that may not)."""
    gpu_operator_values.check_chart_values(inputs.gpu_operator, subject)
    monitoring_values.check_chart_values(inputs.monitoring, subject)
    if inputs.teams.teams.enabled:
        kueue.check_chart_values(inputs.teams, subject)


def check_platform(settings: StackSettings, subject: Subject) -> None:
    """What the settings must satisfy beyond their model, checked once with them: the
    kubeconfig holds the stack's context, and the extra chart values merge over the generated
    ones (SettingsError naming `subject`'s settings)."""
    if problem := kubeconfig_problem(settings.cluster):
        raise SettingsError([describe_invalid(subject.root, ("cluster",), problem)], subject)
    check_chart_values(component_inputs(settings), subject)


def _each(inputs: ComponentInputs) -> list[tuple[Descriptor, Any]]:
    """Each registered package, with its component's inputs."""
    given = [getattr(inputs, field.name) for field in fields(inputs)]
    return [(descriptor, component_inputs) for descriptor in DESCRIPTORS
            for component_inputs in given if descriptor.accepts(component_inputs)]


def deployable_images(inputs: ComponentInputs) -> list[Deployable]:
    """Every image the program and the charts can run, whichever settings bring it, as the
    nodes pull them (from the mirror, when set), from each package's descriptor. An image
    several operands run is listed once for each of them."""
    return [image for descriptor, given in _each(inputs) for image in descriptor.images(given)]


def deployable_charts(inputs: ComponentInputs) -> list[Deployable]:
    """Every Helm chart the program can install, whichever settings bring it, and where from,
    from each package's descriptor."""
    return [chart for descriptor, given in _each(inputs) for chart in descriptor.charts(given)]


def required_images(inputs: ComponentInputs) -> list[str]:
    """The images the stack's settings run: what its mirror must hold."""
    return sorted({image.reference for image in deployable_images(inputs) if image.deployed})


def required_charts(inputs: ComponentInputs) -> list[str]:
    """The charts the stack's settings install, and where from."""
    return [chart.reference for chart in deployable_charts(inputs) if chart.deployed]
