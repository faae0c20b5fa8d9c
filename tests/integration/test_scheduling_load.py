"""The binpack scheduler as declared, under load and failure: a burst of pending GPU pods is
bound at the rate its client settings promise, and when its leader crashes a standby replica
binds again within the lease. Both run with the declared KubeSchedulerConfiguration and the
ServiceAccount's token, so the declared RBAC, leader election included, is what they work
with."""

import pytest
import yaml

from components import binpack_scheduler
from components.base.validation import go_duration_seconds
from tests.kit.cluster.declared_objects import WEBHOOK_KINDS, apply_declared, find
from tests.kit.cluster.load import bind_burst, failover

# Its figures need the machine to itself: `bash tests/run integration` runs it alone.
pytestmark = pytest.mark.serial

# What the shipped client rate (scheduler.clientConnection) promises for a burst of pending
# 1-GPU pods, with room for a slower machine: docs/benchmarks/scheduling.md has the measured
# rate of each setting.
PROMISED_PODS_PER_SECOND = 100
# client-go spaces a standby's tries retryPeriod to (1 + 1.2) x retryPeriod apart
# (leaderelection.JitterFactor) and times the lease from when the standby saw the last renewal:
# the standby sees that renewal up to one try after the crash and takes over up to one try after
# the lease ran out, so leaseDuration + 2 x 2.2 x retryPeriod bounds the takeover.
CLIENT_GO_JITTER_FACTOR = 1.2
# Over that bound: the time from the takeover to the new leader's bind call.
FAILOVER_MARGIN_SECONDS = 2.0


def declared_scheduler(cp, declared, settings):
    sched = settings.scheduler
    apply_declared(cp.admin, [o for o in declared.objects if o["kind"] not in WEBHOOK_KINDS])
    config_map = find(declared.objects, "ConfigMap", f"{sched.name}-config")
    config = yaml.safe_load(config_map["data"][binpack_scheduler.CONFIG_FILE])
    token = cp.service_account_token(sched.namespace, sched.name)
    return config, cp.kubeconfig(sched.name, token=token)


def test_a_burst_of_pending_gpu_pods_is_bound_at_the_promised_rate(control_plane, declared,
                                                                    example_settings):
    config, kubeconfig = declared_scheduler(control_plane, declared, example_settings)
    burst = bind_burst(control_plane, example_settings, config, kubeconfig, nodes=64, pods=500)
    print(f"\n{burst.pods} pending 1-GPU pods on {burst.nodes} nodes, qps {burst.qps} / burst "
          f"{burst.burst}: bound in {burst.seconds:.1f} s, {burst.pods_per_second:.0f} pods/s, "
          f"{burst.requests_per_second:.0f} requests/s to the API server")
    assert burst.pods_per_second >= PROMISED_PODS_PER_SECOND


def test_a_crashed_leader_is_replaced_within_the_lease(control_plane, declared,
                                                       example_settings):
    config, kubeconfig = declared_scheduler(control_plane, declared, example_settings)
    election = example_settings.scheduler.leader_election
    bound = failover(control_plane, example_settings, config, kubeconfig, crashes=2)
    print(f"\nleader killed twice (lease {election.lease_duration}, retry "
          f"{election.retry_period}): a new pod bound after "
          f"{', '.join(f'{s:.1f}' for s in bound.seconds)} s")
    slowest_try = go_duration_seconds(election.retry_period) * (1 + CLIENT_GO_JITTER_FACTOR)
    limit = (go_duration_seconds(election.lease_duration) + 2 * slowest_try
             + FAILOVER_MARGIN_SECONDS)
    assert max(bound.seconds) <= limit
