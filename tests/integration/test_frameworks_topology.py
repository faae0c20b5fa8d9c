"""The frameworks' jobs of test_frameworks.py on a stack whose teams have a topology (the `eks`
preset): every pod set that asks for no GPU (a Ray head and submitter, an MPI launcher, a
TrainJob's initializers) is admitted with the job and runs off the GPU nodes, and the GPU pod sets
that require one network node land in one."""

from tests.integration.test_frameworks import (  # noqa: F401  (the tests and their fixture, run on this STACK)
    platform,
    stack,
    test_a_launcher_and_its_gpu_workers_are_admitted_together,
    test_a_rayjob_beyond_the_quota_waits_whole_and_no_one_but_kueue_starts_it,
    test_a_rayjob_is_admitted_whole_and_its_cluster_runs_where_the_policy_says,
    test_a_rayjob_whose_gpu_workers_require_one_network_node_runs_whole,
    test_a_trainjob_with_initializers_is_admitted_whole_and_runs_through_its_jobset,
)

STACK = stack({"preset": "eks"})
# Webhooks are called at their Services' ready endpoints (conftest.control_plane).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
