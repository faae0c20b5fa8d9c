"""Regression guard for the binpack benchmark: a small trace of batch Jobs and scaling inference
Deployments behind Services, replayed with queueing against the real kube-scheduler and
kube-controller-manager. The project's profile starts more GPU-time on arrival, keeps 8-GPU jobs
waiting less and delivers more GPU-time than the default profile, and with the smaller jobs
preemptible the 8-GPU jobs of its batch part wait less still. (The fragmentation example is
in test_scheduling.py, owned workloads in test_workloads.py; the full benchmark is
`bash tests/run benchmark`.) Split over three teams, with the real Kueue admitting the trace
against the queues the platform declares, it runs about as much GPU-time as without teams, and a
team asking within its quota is admitted at once, by reclaim where need be."""


import pytest

from benchmark import binpack, real_cluster, replay_setup, report, teams, workload

NODES = workload.CLUSTERS["homogeneous"](4)
TRACE = workload.generate("synthetic", seed=1, jobs=64, total_gpus=32, load=0.9)
# The same draw with batch jobs only. Inference replicas are not preemptible, and on four nodes
# whether one shares a node with the jobs an 8-GPU job could preempt turns on the scheduler's
# tie-breaks: with them, 8-GPU jobs waited 7.5 or 13.5 simulated hours in all by replay,
# without preemption 10.9 to 13.5, so a comparison there passed or failed by chance.
BATCH_TRACE = workload.generate("synthetic", seed=1, jobs=64, total_gpus=32, load=0.9,
                                inference_share=0)


@pytest.fixture(scope="module")
def shipped(example_settings) -> binpack.Outcome:
    """The trace replayed with the shipped profile, every pod naming no priority class."""
    config = replay_setup.profiles(example_settings)[example_settings.scheduler.name]
    return real_cluster.replay("shipped", config, TRACE, NODES, example_settings)


def test_the_shipped_profile_beats_the_default_profile_on_a_small_queued_trace(
        example_settings, shipped):
    configs = replay_setup.profiles(example_settings)
    default = real_cluster.replay("default", configs[replay_setup.DEFAULT_PROFILE], TRACE,
                                  NODES, example_settings)
    owned = [r for r in shipped.records if r.service is not None]
    assert owned, "no inference replica was created by its Deployment"
    print(f"\nstarted on arrival: shipped {shipped.started_on_arrival():.1%}, default "
          f"{default.started_on_arrival():.1%}; 8-GPU wait p95 (simulated hours): shipped "
          f"{shipped.wait(8, 0.95):.2f}, default {default.wait(8, 0.95):.2f}; GPU-hours "
          f"delivered: shipped {shipped.delivered_gpu_hours():.0f}, default "
          f"{default.delivered_gpu_hours():.0f}")
    assert shipped.started_on_arrival() > default.started_on_arrival()
    assert shipped.wait(8, 0.95) < default.wait(8, 0.95)
    assert shipped.delivered_gpu_hours() > default.delivered_gpu_hours()


def test_preemptible_jobs_make_room_for_whole_node_jobs_on_the_small_trace(example_settings):
    """The batch jobs of the small trace, replayed twice: with the jobs below a whole node in
    the preemptible class, 8-GPU jobs wait less in all than without it, and every pod that
    preemption ended was one of those jobs'. (In all: with a handful of 8-GPU jobs, a p95 is
    one job's wait.)"""
    config = replay_setup.profiles(example_settings)[example_settings.scheduler.name]
    shipped = real_cluster.replay("shipped", config, BATCH_TRACE, NODES, example_settings)
    preemptible = replay_setup.preemptible_jobs(BATCH_TRACE, 1.0, whole_node_gpus=8)
    preempting = real_cluster.replay("shipped, preemption", config, BATCH_TRACE, NODES,
                                     example_settings, preemptible=preemptible)
    resumed = [r for r in preempting.records if r.resumed_at is not None]
    print(f"\n8-GPU jobs' waits in all (simulated hours): {sum(shipped.waits(8)):.1f} without "
          f"preemption, {sum(preempting.waits(8)):.1f} with it; {preempting.evictions} "
          f"preemptions")
    assert preempting.evictions > 0 and resumed
    assert all(r.job is not None and r.job.id in preemptible and r.job.task.gpus < 8
               for r in resumed)
    assert sum(preempting.waits(8)) < sum(shipped.waits(8))


def test_with_teams_no_gpu_time_is_given_up_and_a_team_within_its_quota_is_admitted_at_once(
        example_settings):
    """The small trace's load split over the three teams in bursts, replayed without teams and
    with the real Kueue in the loop: with teams, at least 95% of the GPU-time runs (101.1% to
    103.6% in three runs), every team's work asked for within its quota is admitted within a
    simulated minute at p95, and Kueue reclaimed borrowed GPUs for it at least once."""
    trace = teams.generate("synthetic", 1, 64, 32, 0.9, 0.25)
    config = replay_setup.profiles(example_settings)[example_settings.scheduler.name]
    without = real_cluster.replay("without teams", config, trace.trace, NODES, example_settings)
    outcome, backend = teams.replay(config, trace, NODES)
    row = teams.figures(trace, outcome, backend, without, binpack.reference(trace.trace, NODES),
                        whole_node_gpus=8)
    print(f"\nGPU-time with teams / without: {row['delivered_vs_without_teams']:.1%}; "
          f"by team: {row['teams']}")
    assert row["delivered_vs_without_teams"] >= 0.95
    for team, figures in row["teams"].items():
        assert figures["asked_within"] > 0, f"{team} never asked within its quota"
        assert figures["wait_within_p95"] <= 1.0, team
    assert sum(report.preempted(f, report.RECLAIM) for f in row["teams"].values()) > 0
