"""Fixtures of the integration suite: a fresh local control plane per test module, and the
example stack's declared objects with real certificates."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster  # noqa: E402
from controlplane import ControlPlane  # noqa: E402
from harness import admission_of  # noqa: E402


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
    in test_admission.py."""
    cp = control_plane
    cluster.apply_declared(cp.admin, [o for o in declared.objects
                                      if o["kind"] != "ValidatingWebhookConfiguration"])
    cluster.start_binpack_scheduler(cp, example_settings.scheduler, declared.objects)
    cluster.Scheduler(cp, cluster.DEFAULT_SCHEDULER,
                      cluster.scheduler_with_strategy(cluster.DEFAULT_SCHEDULER),
                      kubeconfig=cp.kubeconfig(cluster.DEFAULT_SCHEDULER))
    return cp


@pytest.fixture(scope="session")
def certificates(example_settings) -> cluster.TestCertificates:
    return cluster.TestCertificates(admission_of(example_settings))


@pytest.fixture(scope="session")
def declared(example_run, certificates) -> cluster.Declared:
    return cluster.declared(example_run, certificates)
