"""The platform with teams on, running on the local control plane as a stack declares it: the
real Kueue with the generated Configuration, every declared object applied (Kueue's own through
its webhooks), OPA's pods (kubelet.py) behind the declared webhooks, the cluster's and the
binpack scheduler, a real kube-controller-manager and a fake kubelet. Shared by the teams suite
(the device plugin path) and the DRA suite."""

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from components import opa_admission, teams
from components.base import facts
from components.platform.settings import StackSettings
from tests.kit import harness, tools
from tests.kit.cluster.controlplane import ApiError, ControlPlane, Kube, wait_until
from tests.kit.cluster.declared_objects import (
    TEST_MANAGER,
    WEBHOOK_KINDS,
    TestCertificates,
    apply_declared,
    declared,
    find,
)
from tests.kit.cluster.fake_kubelet import workloads_running
from tests.kit.cluster.kube_components import (
    Scheduler,
    scheduler_with_strategy,
    start_binpack_scheduler,
)
from tests.kit.cluster.kubelet import ProcessKubelet
from tests.kit.cluster.kueue import Kueue
from tests.kit.cluster.nodes_and_pods import create_node


@dataclass
class RunningPlatform:
    cp: ControlPlane
    settings: StackSettings
    kueue: Kueue | None         # None: teams off
    declared: list[dict]

    @property
    def kube(self) -> Kube:
        return self.cp.admin


def run_platform(stack: ExitStack, cp: ControlPlane, settings_file: dict[str, Any], *,
                 before_pods: Callable[[StackSettings], None] = lambda settings: None,
                 controllers: tuple[str, ...] = (),
                 existing_kueue: Kueue | None = None) -> RunningPlatform:
    """Starts the platform of `settings_file` (stack settings without the `gpu-platform:`
    prefix), stopped when `stack` closes; returns once the webhooks are applied.
    `before_pods` runs after the declared objects are applied and before any pod starts;
    `controllers` are started beside the ones workload pods need; `existing_kueue`, a Kueue
    already running (`teams.kueue.mode: existing`), is used instead of starting one with the
    generated Configuration; with teams off, no Kueue runs."""
    kube = cp.admin
    config = harness.stack_file_config(settings_file)
    settings = harness.settings_of(config)
    inputs = harness.inputs_of(settings)
    objects = declared(harness.run_program(config), TestCertificates(inputs.admission)).objects
    # Kueue first: its CRDs, and its webhooks, which decide the queues' objects.
    running = existing_kueue
    if running is None and settings.teams.enabled:
        running = Kueue(cp, teams.kueue_configuration(inputs.teams)).start()
        stack.callback(running.stop)
    # The webhooks last, once OPA serves; so is the reachability probe, which they decide.
    probe = find(objects, "ConfigMap", opa_admission.REACHABILITY_PROBE)
    apply_declared(kube, [o for o in objects if o["kind"] not in WEBHOOK_KINDS and o is not probe])
    before_pods(settings)
    kubelet = ProcessKubelet(cp, {settings.admission.opa.repository: tools.opa()})
    stack.callback(kubelet.stop)
    stack.enter_context(workloads_running(cp, leave_out=kubelet.runs, controllers=controllers))
    Scheduler(cp, "default-scheduler", scheduler_with_strategy("default-scheduler"),
              kubeconfig=cp.kubeconfig("default-scheduler"))
    start_binpack_scheduler(cp, settings.scheduler, objects)
    create_node(kube, "cpu-node-1")
    service = opa_admission.generation_name(inputs.admission, facts.OPA_SERVICE)
    wait_until(lambda: len(ready_endpoints(kube, settings.admission.namespace, service)) ==
               settings.admission.replicas, "OPA's pods ready behind its Service", timeout=90)
    for webhook in (o for o in objects if o["kind"] in WEBHOOK_KINDS):
        kube.apply(webhook, TEST_MANAGER)
    return RunningPlatform(cp, settings, running, objects)


def ready_endpoints(kube: Kube, namespace: str, service: str) -> list[str]:
    """The addresses of `service`'s ready endpoints, sorted."""
    slices = kube.list("discovery.k8s.io/v1", "EndpointSlice", namespace,
                       labelSelector=f"kubernetes.io/service-name={service}")
    return sorted(address for endpoint_slice in slices
                  for endpoint in endpoint_slice.get("endpoints") or []
                  if endpoint.get("conditions", {}).get("ready")
                  for address in endpoint["addresses"])


def refusal(kube: Kube, obj: dict) -> str:
    """The API server's refusal of `obj` (a dry run), or "" when it would be created."""
    try:
        kube.create(obj, dry_run=True)
        return ""
    except ApiError as error:
        return error.message


def update_refusal(kube: Kube, kind: tuple[str, str], name: str, namespace: str,
                   patch: dict) -> str:
    """The API server's refusal of a merge patch (by this suite's admin, a user like any
    other), or "" when it is applied."""
    try:
        kube.merge_patch(*kind, name, patch, namespace, what=f"patch {kind[1]} {name}")
        return ""
    except ApiError as error:
        return error.message
