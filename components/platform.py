"""The whole GPU platform: five components wired by the dependencies of the design."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime import config as runtime_config

from . import charts, cluster_version, gpu_operator, monitoring
from .binpack_scheduler import BinpackScheduler
from .gpu_compaction import GpuCompaction
from .gpu_nodes import GpuNodes
from .gpu_operator import GpuOperator
from .monitoring import Monitoring
from .opa_admission import OpaAdmission
from .settings import CONFIG_NAMESPACE, StackSettings, load_settings, retired_settings
from .validation import SettingsError

# The config keys whose settings may hold secrets (free-form chart values, the Grafana password),
# with the inputs that then carry them: those Helm releases' values, marked secret as a whole.
SECRET_CAPABLE = ("gpuOperator", "monitoring")

# The platform's name in a program that declares one.
PLATFORM_NAME = "gpu-platform"


def stack_config() -> dict[str, Any]:
    """The stack's `gpu-platform:` config, keys without the prefix.

    Every key is read, not only known ones, so that a misspelt setting is reported rather than
    silently ignored. The engine hands config over either in the PULUMI_CONFIG environment or
    through the runtime's config map; both are read.
    """
    prefix = f"{CONFIG_NAMESPACE}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    return {key[len(prefix):]: runtime_config.get_config(key)
            for key in sorted(keys) if key.startswith(prefix)}


def stack_secret_keys() -> set[str]:
    """The `gpu-platform:` config keys stored as secrets (prefix removed): a key holds a secret
    when any value under it was set with `pulumi config set --secret --path`."""
    prefix = f"{CONFIG_NAMESPACE}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    secret = {key for key in keys if runtime_config.is_config_secret(key)}
    secret |= set(runtime_config.get_config_secret_keys_env())
    return {key[len(prefix):] for key in secret if key.startswith(prefix)}


def check_secret_keys(secret_keys: Collection[str]) -> None:
    """A secret in a section whose values reach ConfigMaps, node patches or webhook
    configurations would leave the program in plain text: refused, naming the key."""
    problems = [
        f"{CONFIG_NAMESPACE}:{key}: stored as a secret, but none of its settings takes one, so "
        f"its values would reach the cluster and the state in plain text; allowed: plain values "
        f"here, and secrets only under "
        f"{' and '.join(CONFIG_NAMESPACE + ':' + k for k in SECRET_CAPABLE)}"
        for key in sorted(secret_keys) if key not in SECRET_CAPABLE]
    if problems:
        raise SettingsError(problems)


def chart_values_input(values: dict, secret: bool) -> Any:
    """A release's values as its input: secret as a whole when its section holds a secret (Helm
    values are one input; there is no marking part of it)."""
    return pulumi.Output.secret(values) if secret else values


class GpuPlatform(pulumi.ComponentResource):
    def __init__(self, name: str, settings: StackSettings,
                 secret_keys: Collection[str] = (),
                 opts: pulumi.ResourceOptions | None = None):
        # Chart values are merged (and refused extra values raised) before anything is
        # registered, so a bad stack leaves the run with nothing declared.
        check_secret_keys(secret_keys)
        operator_values = chart_values_input(gpu_operator.chart_values(settings),
                                             "gpuOperator" in secret_keys)
        monitoring_values = chart_values_input(monitoring.chart_values(settings),
                                               "monitoring" in secret_keys)
        super().__init__("gpu-platform:index:GpuPlatform", name, None, opts)
        # Two platforms in one program (one per cluster) name their resources apart; the one of
        # the default name keeps the names every existing stack has.
        prefix = "" if name == PLATFORM_NAME else f"{name}-"
        # Every Kubernetes object and release goes to the stack's cluster through this provider
        # (the example stack disables the default one, so nothing reaches the cluster that
        # happens to be current). Server-side apply: a preview is the API server's dry run.
        cluster = settings.cluster
        self.provider = k8s.Provider(
            f"{prefix}cluster", context=cluster.context, kubeconfig=cluster.kubeconfig,
            enable_server_side_apply=True, opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, providers={"kubernetes": self.provider})

        # Taint the nodes before the operator's DaemonSets and the first GPU pods arrive.
        self.gpu_nodes = GpuNodes(f"{prefix}gpu-nodes", settings, prefix=prefix, opts=child)
        self.gpu_operator = GpuOperator(f"{prefix}gpu-operator", settings, operator_values,
                                        after=[self.gpu_nodes], prefix=prefix, opts=child)
        self.scheduler = BinpackScheduler(f"{prefix}binpack-scheduler", settings, prefix=prefix,
                                          opts=child)
        # Never force GPU pods onto a scheduler that is not running.
        self.admission = OpaAdmission(f"{prefix}opa-admission", settings,
                                      after=[self.scheduler], prefix=prefix, opts=child)
        # The DCGM exporter Service the ServiceMonitor selects is created by the operator.
        self.monitoring = Monitoring(f"{prefix}monitoring", settings, monitoring_values,
                                     after=[self.gpu_operator],
                                     certificate_not_after=self.admission.certificate_not_after,
                                     prefix=prefix, opts=child)
        # Evictions only once the scheduler that places the evicted pods again is there.
        self.compaction = (GpuCompaction(f"{prefix}gpu-compaction", settings,
                                         after=[self.scheduler], prefix=prefix, opts=child)
                           if settings.compaction.enabled else None)

        self.outputs = {
            "clusterContext": cluster.context,
            "schedulerName": self.scheduler.scheduler_name,
            "preemptibleClass": self.scheduler.preemptible_class,
            "webhookName": self.admission.webhook_name,
            "caCertificate": self.admission.ca_certificate,
            "grafanaUrl": self.monitoring.grafana_url,
            "grafanaPortForward": self.monitoring.grafana_port_forward,
            "grafanaAdminPassword": self.monitoring.grafana_admin_password,
            "gpuNodes": self.gpu_nodes.node_names,
            "compactionSchedule": self.compaction.schedule if self.compaction else None,
            # What a mirror must hold before an air-gapped install.
            "images": required_images(settings),
            "charts": required_charts(settings),
        }
        self.register_outputs(self.outputs)


def required_images(settings: StackSettings) -> list[str]:
    """The images the program and the two charts run, as the nodes will pull them (from the
    mirror, when set)."""
    compaction = settings.compaction
    compaction_images = [settings.image(compaction.image)] if compaction.enabled else []
    if compaction.enabled and compaction.plan_threshold:
        compaction_images.append(settings.image(compaction.plan_image))
    return sorted({settings.scheduler_image, settings.image(settings.admission.opa),
                   *compaction_images,
                   *(image.ref(settings) for image in gpu_operator.chart_images(settings)),
                   *monitoring.chart_images(settings)})


def required_charts(settings: StackSettings) -> list[str]:
    op, mon = settings.gpu_operator, settings.monitoring
    return [charts.chart_reference(gpu_operator.CHART, op.chart_version, op.repository,
                                   op.chart_path),
            charts.chart_reference(monitoring.CHART, mon.chart_version, mon.repository,
                                   mon.chart_path)]


def check_cluster(settings: StackSettings) -> None:
    """In a preview (and the preview step of `pulumi up`): the stack's cluster must be reachable,
    and a version skew between it and kubernetesVersion is reported as a warning."""
    try:
        warnings = cluster_version.preview_warnings(settings)
    except cluster_version.ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    for warning in warnings:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: {warning}")


class ClusterError(Exception):
    """The stack's cluster is not there: raised before anything is declared."""

    def __init__(self, problem: str):
        super().__init__(f"the stack's cluster cannot be reached (nothing was deployed):\n"
                         f"  - {problem}")


def deploy(config: Mapping[str, Any], secret_keys: Collection[str] = ()) -> GpuPlatform:
    """Validate the settings, check the cluster (in previews), then declare the platform and
    export its outputs."""
    # A secret where values reach the cluster in plain text is named before anything else.
    check_secret_keys(secret_keys)
    settings = load_settings(config)
    for warning in retired_settings(config):
        pulumi.log.warn(warning)
    if pulumi.runtime.is_dry_run():
        check_cluster(settings)
    platform = GpuPlatform(PLATFORM_NAME, settings, secret_keys)
    for key, value in platform.outputs.items():
        pulumi.export(key, value)
    return platform
