"""Fixtures of the integration suite: a fresh local control plane per test module, and the
example stack's declared objects with real certificates."""


import pytest

from tests.kit.cluster import declared_objects
from tests.kit.cluster.controlplane import ControlPlane
from tests.kit.cluster.kube_components import (
    DEFAULT_SCHEDULER,
    Scheduler,
    scheduler_with_strategy,
    start_binpack_scheduler,
)
from tests.kit.harness import admission_of


@pytest.fixture(scope="module")
def control_plane(request):
    """A fresh control plane for the module, its API server started with the module's
    APISERVER_ARGS, if it has any (a module whose webhooks are called at their Services'
    ready endpoints, as on a cluster, sets --enable-aggregator-routing: a ClusterIP would need
    a proxy to route it), and of its KUBERNETES release, if it names one."""
    cp = ControlPlane(apiserver_args=getattr(request.module, "APISERVER_ARGS", ()),
                      kubernetes=getattr(request.module, "KUBERNETES", None)).start()
    yield cp
    cp.stop()


@pytest.fixture(scope="module")
def control_plane_with_schedulers(control_plane, declared, example_settings):
    """This module's control plane with the binpack scheduler as the program deploys it and a
    kube-scheduler with the default profile next to it. Everything declared is applied but the
    webhook, which would (rightly) refuse the default scheduler's GPU pods; admission is proven
    in admission/."""
    cp = control_plane
    declared_objects.apply_declared(cp.admin, [o for o in declared.objects
                                               if o["kind"] != "ValidatingWebhookConfiguration"])
    start_binpack_scheduler(cp, example_settings.scheduler, declared.objects)
    Scheduler(cp, DEFAULT_SCHEDULER, scheduler_with_strategy(DEFAULT_SCHEDULER),
              kubeconfig=cp.kubeconfig(DEFAULT_SCHEDULER))
    return cp


@pytest.fixture(scope="session")
def certificates(example_settings) -> declared_objects.TestCertificates:
    return declared_objects.TestCertificates(admission_of(example_settings))


@pytest.fixture(scope="session")
def declared(example_run, certificates) -> declared_objects.Declared:
    return declared_objects.declared(example_run, certificates)
