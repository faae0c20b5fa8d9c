"""The control plane and the OPA pods behind the declared webhooks that the package's modules
share: set up once, as `pulumi up` orders the objects, and stopped after the last module."""

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from components import opa_admission
from tests.integration.admission.opa import (
    USER_NAMESPACE,
    Admission,
    gpu_pod_admitted_on,
    kubelet_state,
)
from tests.kit import tools
from tests.kit.cluster.controlplane import ControlPlane, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, WEBHOOK_KINDS, apply_declared, find
from tests.kit.cluster.fake_kubelet import workloads_running
from tests.kit.cluster.kube_components import (
    Scheduler,
    scheduler_with_strategy,
    start_binpack_scheduler,
)
from tests.kit.cluster.kubelet import ProcessKubelet
from tests.kit.cluster.nodes_and_pods import create_gpu_node, create_node, ensure_namespace
from tests.kit.harness import admission_of

# Webhooks are called at their Services' ready endpoints, as on a cluster: a ClusterIP would need
# a proxy to route it.
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


@pytest.fixture(scope="package")
def control_plane():
    """A fresh control plane for the package, its API server started with APISERVER_ARGS."""
    cp = ControlPlane(apiserver_args=APISERVER_ARGS).start()
    yield cp
    cp.stop()


@pytest.fixture(scope="package")
def admission(control_plane, declared, example_settings) -> Iterator[Admission]:
    cp, settings = control_plane, example_settings
    webhooks = [o for o in declared.objects if o["kind"] in WEBHOOK_KINDS]
    probe = find(declared.objects, "ConfigMap", opa_admission.REACHABILITY_PROBE)
    # As `pulumi up` orders them: everything OPA needs, then (once OPA is ready) the webhooks,
    # then the reachability probe.
    apply_declared(cp.admin, [o for o in declared.objects
                              if o["kind"] not in WEBHOOK_KINDS and o is not probe])
    with ExitStack() as stack:
        kubelet = ProcessKubelet(cp, {settings.admission.opa.repository: tools.opa()})
        stack.callback(kubelet.stop)
        stack.enter_context(workloads_running(cp, leave_out=kubelet.runs))
        # Schedulers: the default one for OPA's pods and pods without GPUs, the binpack one
        # for GPU pods.
        Scheduler(cp, "default-scheduler", scheduler_with_strategy("default-scheduler"),
                  kubeconfig=cp.kubeconfig("default-scheduler"))
        start_binpack_scheduler(cp, settings.scheduler, declared.objects)
        # OPA's pods land on the node without GPUs, with the pods of the tests that need none.
        create_node(cp.admin, "cpu-node-1")
        result = Admission(cp, kubelet, settings,
                           webhooks[0]["webhooks"][0]["clientConfig"]["caBundle"],
                           admission_of(settings))
        wait_until(lambda: result.available(settings.admission.replicas),
                   f"{settings.admission.replicas} OPA pods available behind the Service",
                   timeout=90, explain=lambda: kubelet_state(result))
        for webhook in webhooks:
            cp.admin.apply(webhook, TEST_MANAGER)
        ensure_namespace(cp.admin, USER_NAMESPACE)
        # The API server picks a new webhook up within moments: wait until it refuses (dry run).
        wait_until(lambda: not gpu_pod_admitted_on(cp.admin, settings, scheduler=None),
                   "the webhook to take effect", timeout=15)
        cp.admin.apply(probe, TEST_MANAGER)
        create_gpu_node(cp.admin, settings, "gpu-node-1", gpus=8)
        yield result
