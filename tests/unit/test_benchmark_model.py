"""The binpack benchmark's model, without a control plane: the workload generator is seeded and
has the documented shape, the Alibaba mixes are what the public trace says, and the offline
reference really is a bound on packing."""

import argparse
import itertools
import random
import time
from collections import Counter

import pytest

from benchmark import binpack, real_cluster, reclaim, replay_setup, run, teams, workload
from benchmark.workload import BatchJob, NodeShape, Task, Trace
from components import gpu_compaction
from components.gpu_compaction.planner import compaction_plan
from tests.kit.harness import compaction_of, example_settings, scheduler_scoring
from tests.unit.test_compaction_plan import cpu_separated_state


def test_the_same_seed_gives_the_same_trace_and_another_seed_another():
    def trace(seed):
        return workload.generate("synthetic", seed, 200, 64, 0.9)
    assert trace(7) == trace(7)
    assert trace(7) != trace(8)


def test_request_sizes_follow_the_documented_mix():
    trace = workload.generate("synthetic", 1, 20000, 128, 0.9)
    counts = Counter(job.task.gpus for job in trace.jobs)
    for gpus, share in {1: 0.60, 2: 0.15, 4: 0.15, 8: 0.10}.items():
        assert counts[gpus] / len(trace.jobs) == pytest.approx(share, abs=0.015)


needs_trace = pytest.mark.skipif(not (workload.TRACES / "openb_pod_list_default.csv").exists(),
                                 reason=f"the Alibaba trace is not at {workload.TRACES}")


@needs_trace
@pytest.mark.parametrize("mix, counts", [
    # GPU tasks by size, as the trace's own description counts them (1,088 CPU-only tasks left
    # out): default 6,989 / 16 / 15 / 44; multigpu50 6,989 / 222 / 206 / 556.
    ("alibaba", {1: 6989, 2: 16, 4: 15, 8: 44}),
    ("alibaba-multigpu50", {1: 6989, 2: 222, 4: 206, 8: 556}),
])
def test_alibaba_mixes_are_the_trace_tasks(mix, counts):
    file = {"alibaba": "openb_pod_list_default.csv",
            "alibaba-multigpu50": "openb_pod_list_multigpu50.csv"}[mix]
    assert Counter(t.gpus for t in workload.trace_tasks(file)) == counts
    total = sum(counts.values())
    for gpus, share in workload.size_shares(workload.MIXES[mix]).items():
        assert share == pytest.approx(counts[gpus] / total, abs=0.01)


@pytest.mark.parametrize("load", [0.5, 0.9, 1.2])
@pytest.mark.parametrize("mix", ["synthetic", pytest.param("alibaba-multigpu50",
                                                           marks=needs_trace)])
def test_arrivals_and_replicas_offer_the_requested_load(mix, load):
    trace = workload.generate(mix, 3, 20000, 128, load, inference_share=0.25)
    batch = sum(job.gpu_hours for job in trace.jobs) / (128 * trace.horizon)
    assert batch == pytest.approx(0.75 * load, rel=0.1)
    # The mean replica count over time, per service, adds up to the inference share.
    replica_hours = 0.0
    for service in trace.services:
        steps = sorted((s.time, s.replicas) for s in trace.scales if s.service == service.id)
        ends = [t for t, _ in steps[1:]] + [trace.horizon]
        replica_hours += sum((end - t) * n for (t, n), end in zip(steps, ends, strict=True))
    assert replica_hours / (128 * trace.horizon) == pytest.approx(0.25 * load, rel=0.25)


def exhaustive_fit(sizes, capacities) -> bool:
    for assignment in itertools.product(range(len(capacities)), repeat=len(sizes)):
        used = [0] * len(capacities)
        for size, node in zip(sizes, assignment, strict=True):
            used[node] += size
        if all(u <= c for u, c in zip(used, capacities, strict=True)):
            return True
    return False


def test_the_constant_time_packing_check_agrees_with_exhaustive_search():
    rng = random.Random(0)
    for _ in range(400):
        capacities = [rng.choice([4, 8]) for _ in range(rng.randint(1, 3))]
        sizes = [rng.choice([1, 2, 4, 8]) for _ in range(rng.randint(1, 6))]
        packing = binpack.PowerOfTwoPacking(capacities)
        for size in sizes[:-1]:
            packing.add(size)
        assert packing.fits_with(sizes[-1]) == exhaustive_fit(sizes, capacities), \
            (sizes, capacities)
        layout = binpack.best_fit_decreasing(sizes, {f"n{i}": c for i, c in
                                                     enumerate(capacities)})
        assert (layout is not None) == exhaustive_fit(sizes, capacities), (sizes, capacities)


def test_the_fragmentation_example_fits_only_when_packed():
    """Two 4-GPU nodes holding 2+1 GPUs each have two GPUs free, but not on one node."""
    nodes = {"node-1": NodeShape(4, 8000, 8192), "node-2": NodeShape(4, 8000, 8192)}
    spread = binpack.Ledger(nodes)
    for gpus, node in zip([2, 2, 1, 1], ["node-1", "node-2", "node-1", "node-2"], strict=True):
        spread.place(binpack.PodRecord("p", Task(gpus, 1000, 1024), 0.0), node)
    assert not spread.fits_somewhere(Task(2, 1000, 1024))
    assert spread.sample(0.0, []).stranded == 2
    packing = binpack.PowerOfTwoPacking([4, 4])
    for gpus in [2, 2, 1, 1]:
        packing.add(gpus)
    assert packing.fits_with(2)


@needs_trace
def test_tasks_larger_than_any_node_are_left_out_of_the_trace():
    g2 = workload.CLUSTERS["alibaba-g2"](1)["gpu-0000"]
    trace = workload.generate("alibaba-multigpu50", 1, 5000, 64, 0.9, fits=workload.fits_on(g2))
    assert all(job.task.cpu_milli <= g2.cpu_milli and job.task.memory_mib <= g2.memory_mib
               for job in trace.jobs)
    assert any(t.cpu_milli > g2.cpu_milli for t in workload.trace_tasks(
        "openb_pod_list_multigpu50.csv")), "the trace has tasks no G2 node can hold"


def test_cpu_and_memory_decide_a_fit_as_well_as_gpus():
    ledger = binpack.Ledger({"n": NodeShape(8, 16000, 65536)})
    ledger.place(binpack.PodRecord("cpu-heavy", Task(1, 15000, 1024), 0.0), "n")
    assert not ledger.fits_somewhere(Task(1, 2000, 1024)), "7 GPUs free, but 1 core"


class FirstFitWithoutMoves(binpack.Backend):
    """A scheduler that never moves pods: waiting pods start, in order, on the first node
    they fit."""

    def __init__(self, nodes, trace: Trace):
        self.ledger = binpack.Ledger(nodes)
        self.records, self.waiting = [], []
        self.tasks = {s.id: s.task for s in trace.services}

    def submit(self, job: BatchJob, now: float) -> None:
        record = binpack.PodRecord(f"job-{job.id}", job.task, now, job=job)
        self.records.append(record)
        self.waiting.append(record)

    def scale(self, service, replicas, now):
        live = [r for r in self.records if r.service == service and r.ended is None]
        for _ in range(replicas - len(live)):
            record = binpack.PodRecord("svc", self.tasks[service], now, service=service)
            self.records.append(record)
            self.waiting.append(record)
        for record in live[::-1][:max(0, len(live) - replicas)]:
            self.finish(record, now)

    def finish(self, record, now):
        if record.node is not None:
            self.ledger.release(record)
        elif record in self.waiting:
            self.waiting.remove(record)
        record.ended = now

    def settle(self, now):
        started = []
        for record in list(self.waiting):
            free = self.ledger.free
            node = next((n for n in sorted(free) if free[n][0] >= record.task.gpus and
                         free[n][1] >= record.task.cpu_milli and
                         free[n][2] >= record.task.memory_mib), None)
            if node is not None:
                self.ledger.place(record, node)
                self.waiting.remove(record)
                record.started = now
                started.append(record)
        return started

    def sample(self, now):
        return self.ledger.sample(now, self.waiting)


def test_the_reference_delivers_at_least_what_a_scheduler_without_moves_delivers():
    nodes = workload.CLUSTERS["mixed"](6)
    total = sum(s.gpus for s in nodes.values())
    trace = workload.generate("synthetic", 5, 300, total, 1.0)
    greedy = binpack.play("first fit", trace, FirstFitWithoutMoves(nodes, trace), total)
    best = binpack.reference(trace, nodes)
    assert best.delivered_gpu_hours() >= greedy.delivered_gpu_hours()
    best_wait, greedy_wait = best.wait(8, 0.95), greedy.wait(8, 0.95)
    assert best_wait is not None and greedy_wait is not None, "the trace has 8-GPU jobs"
    assert best_wait <= greedy_wait
    assert greedy_wait > 0, "the trace should be loaded enough for 8-GPU jobs to wait"


def test_waiting_jobs_start_when_gpus_free_up_and_run_their_full_time():
    nodes = {"n": NodeShape(8, 64000, 65536)}
    jobs = [BatchJob(0, Task(8, 1000, 1024), 0.0, 2.0), BatchJob(1, Task(4, 1000, 1024), 0.5, 1.0),
            BatchJob(2, Task(8, 1000, 1024), 1.0, 1.0)]
    outcome = binpack.reference(Trace(jobs, [], [], horizon=10.0), nodes)
    started = {}
    for r in outcome.batch:
        assert r.job is not None, f"{r.name} is in the batch without a job"
        started[r.job.id] = r.started
    assert started == {0: 0.0, 1: 2.0, 2: 3.0}, "arrival order, each after the one before"
    assert outcome.delivered_gpu_hours() == pytest.approx(8 * 2 + 4 * 1 + 8 * 1)
    assert outcome.started_on_arrival() == pytest.approx(16 / (16 + 4 + 8))


def test_a_scheduler_histogram_quantile_interpolates_within_the_bucket():
    buckets = [(0.001, 0), (0.002, 50), (0.004, 100), (float("inf"), 100)]
    assert real_cluster.histogram_quantile(buckets, 0.5) == pytest.approx(0.002)
    assert real_cluster.histogram_quantile(buckets, 0.75) == pytest.approx(0.003)
    assert real_cluster.histogram_quantile([], 0.5) is None


def test_the_benchmark_plans_each_run_as_the_cronjob_would(aggressive_compaction_settings,
                                                           tmp_path):
    settings = aggressive_compaction_settings
    # The benchmark replays minPodAge through the opt-in label: its pods are seconds old by the
    # wall clock. Its plan must still see the platform's minPodAge (2h here), or it would never
    # name a CPU threshold, and its descheduler must run with 0s, or it would evict nothing.
    nodes, pods = cpu_separated_state()
    just_started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for item in pods:
        item["status"]["startTime"] = just_started
    policy = gpu_compaction.descheduler_policy(compaction_of(settings))
    compaction = replay_setup.Compaction(0.25, frozenset(), frozenset(), policy,
                                         scheduler_scoring(settings), tmp_path / "policy.json")
    for planned, cpu_threshold in ((True, 15.625), (False, None)):
        run = compaction.run_policy(nodes, pods, planned)
        assert compaction_plan.plugin_args(run, "HighNodeUtilization")["thresholds"].get(
            "cpu") == cpu_threshold
        assert compaction_plan.plugin_args(run, "DefaultEvictor")["minPodAge"] == "0s"
    assert compaction_plan.plugin_args(policy, "DefaultEvictor")["minPodAge"] == "2h"


def test_a_job_evicted_again_and_again_waits_longer_each_time_for_its_replacement():
    """The Job controller's wait before each replacement, which the replay spends in wall-clock
    time: a job evicted seven times has waited 10 s, 20 s, ... and then 10 min."""
    task = Task(1, 1000, 1024)
    jobs = [BatchJob(0, task, 0.0, 10.0), BatchJob(1, task, 0.0, 10.0)]
    first = [binpack.PodRecord(f"job-{j.id}", task, 0.0, job=j) for j in jobs]
    again = [binpack.PodRecord(f"job-0-{i}", task, 1.0, job=jobs[0], resumed_at=0.5)
             for i in range(7)]
    once = binpack.PodRecord("job-1-0", task, 1.0, job=jobs[1], resumed_at=0.0)
    outcome = binpack.Outcome("s", 10.0, 8, [*first, *again, once], [])
    assert outcome.evictions_by_job() == {0: 7, 1: 1}
    assert outcome.job_backoff_hours() * 3600 == pytest.approx(
        (10 + 20 + 40 + 80 + 160 + 320 + 600) + 10)
    assert real_cluster.RealCluster.SETTLE_TIMEOUT > 600, "the replay outwaits the longest wait"


# --- the benchmark with teams ---------------------------------------------------------------

def test_team_quotas_are_their_shares_and_add_up_to_every_gpu():
    for total in (32, 128, 130, 512):
        quotas = teams.nominal_quotas(total)
        assert sum(quotas.values()) == total
        for team, share in teams.SHARES.items():
            assert abs(quotas[team] - share * total) < 1


def test_each_team_asks_for_its_share_of_the_load_in_bursts():
    """Over a long trace each team's GPU-time asked for is close to its share, and a team's
    arrivals come about BUSY / (2 - BUSY) times as often in its busy phases as in its quiet
    ones; the other fields of the jobs are workload.generate's."""
    traced = teams.generate("synthetic", 3, 8000, 128, 0.9, 0.25)
    base = workload.generate("synthetic", 3, 8000, 128, 0.9, 0.25)
    assert sorted((j.id, j.task, j.duration) for j in traced.trace.jobs) == \
        sorted((j.id, j.task, j.duration) for j in base.jobs)
    asked = dict.fromkeys(teams.SHARES, 0.0)
    for job in traced.trace.jobs:
        asked[traced.job_team[job.id]] += job.gpu_hours
    for team, share in teams.SHARES.items():
        assert asked[team] / sum(asked.values()) == pytest.approx(share, abs=0.03)
        arrivals = Counter(traced.busy_at(team, job.arrival) for job in traced.trace.jobs
                           if traced.job_team[job.id] == team)
        phases = Counter(traced.busy[team])
        ratio = (arrivals[True] / phases[True]) / (arrivals[False] / phases[False])
        assert ratio == pytest.approx(teams.BUSY / (2 - teams.BUSY), rel=0.25)
    assert all(0 <= j.arrival <= traced.trace.horizon for j in traced.trace.jobs)


def test_contended_hours_are_those_in_which_every_team_wants_more_than_its_quota():
    from benchmark import teams
    traced = teams.generate("synthetic", 1, 64, 32, 0.9, 0.25)
    over = {t: q + 1 for t, q in traced.quotas.items()}
    under = dict(over, research=0)
    samples = [teams.TeamSample(0.2, {}, over), teams.TeamSample(0.7, {}, over),
               teams.TeamSample(1.5, {}, over), teams.TeamSample(1.9, {}, under)]
    assert teams.contended_hours(traced, samples) == [0]


def test_every_busy_and_quiet_combination_of_the_teams_comes_once_in_each_block_of_phases():
    from benchmark import teams
    names = list(teams.SHARES)
    schedule = teams.phase_schedule(names, 20, random.Random(5))
    blocks = [list(zip(*(schedule[t][start:start + 8] for t in names), strict=True))
              for start in (0, 8)]
    for block in blocks:
        assert sorted(block) == sorted(itertools.product((True, False), repeat=3))


def test_few_uneven_items_are_still_split_by_the_teams_shares():
    """Ten inference services, and jobs whose GPU-hours differ a hundredfold, go to the teams
    in proportion to their shares, each team's part off by less than one job."""
    from benchmark import teams
    services = teams.apportion(range(10), lambda s: 1, teams.SHARES)
    assert Counter(services.values()) == {"research": 5, "vision": 3, "speech": 2}
    sizes = [random.Random(i).choice((0.5, 8, 50)) for i in range(300)]
    given = dict.fromkeys(teams.SHARES, 0.0)
    for i, team in teams.apportion(range(300), lambda i: sizes[i], teams.SHARES).items():
        given[team] += sizes[i]
    for team, share in teams.SHARES.items():      # off by less than one item
        assert abs(given[team] - share * sum(sizes)) <= max(sizes)


# --- idle GPUs (--reclaim) --------------------------------------------------------------------

def test_idle_jobs_are_the_seeds_jobs_held_longer_by_their_idle_hours():
    trace = workload.generate("synthetic", 3, 20000, 128, 0.8)
    idle = reclaim.with_idleness(trace, 3)
    assert idle == reclaim.with_idleness(trace, 3)
    for plain, held in zip(trace.jobs, idle.trace.jobs, strict=True):
        assert (plain.id, plain.task, plain.arrival) == (held.id, held.task, held.arrival)
        gap = idle.idleness.get(plain.id)
        spells = gap.idle_hours(0.0, held.duration) if gap else 0.0
        assert held.duration == pytest.approx(plain.duration + spells)
    kinds = Counter(gap.kind for gap in idle.idleness.values())
    for kind, share in (("hung", reclaim.HUNG_SHARE), ("stalled", reclaim.STALLED_SHARE),
                        ("notebook", reclaim.NOTEBOOK_SHARE)):
        assert kinds[kind] / len(trace.jobs) == pytest.approx(share, abs=0.01)
    teams = Counter(idle.team.values())
    assert set(teams) == set(reclaim.TEAMS)
    assert teams["research"] / len(trace.jobs) == pytest.approx(0.5, abs=0.02)
    answering = [g for g in idle.idleness.values() if g.answers is not None]
    assert {g.kind for g in answering} == {"notebook"}
    assert len(answering) / kinds["notebook"] == pytest.approx(reclaim.KEEP_ALIVE_ODDS, abs=0.05)
    for job in idle.trace.jobs:
        gap = idle.idleness.get(job.id)
        if gap is None:
            continue
        # A hung job and a notebook idle to the end of the pod; a stalled one works after.
        ends_idle = gap.kind != "stalled"
        assert (gap.spells[-1][1] == pytest.approx(job.duration)) is ends_idle
        assert len(gap.spells) == (reclaim.NOTEBOOK_BURSTS if gap.kind == "notebook" else 1)
        assert all(0 < start < end <= job.duration for start, end in gap.spells)


def test_a_notebooks_work_and_idle_hours_follow_its_spells():
    # Bursts 0-1, 3-4 and 6-7; idle 1-3, 4-6, then left open 7-12.
    notebook = reclaim.Idleness("notebook", ((1.0, 3.0), (4.0, 6.0), (7.0, 12.0)), 12.0)
    assert notebook.idle_hours(0.0, 12.0) == 9.0
    assert notebook.idle_hours(2.0, 5.0) == 2.0
    assert notebook.work_after(2.0) == 2.0          # evicted in the first gap: two bursts lost
    assert notebook.work_after(8.0) == 0.0          # left open: nothing lost
    assert notebook.idle_through(1.5, 3.0) and not notebook.idle_through(2.5, 4.5)


def test_the_replays_modes_are_valid_stack_settings_and_one_is_shipped():
    settings = example_settings()
    for mode in reclaim.MODES[1:]:
        stack = reclaim.reclaim_settings(settings, mode).reclaim
        assert stack.namespaces == list(reclaim.TEAMS)
        actions = {team: stack.policy_of(team, None).action for team in reclaim.TEAMS}
        assert actions == {team: "evict" if team in mode.evicting else "report"
                           for team in reclaim.TEAMS}
    defaults = (settings.reclaim.idle_for, settings.reclaim.grace_period)
    assert [m.label for m in reclaim.MODES if reclaim.shipped(settings, m)] == [
        m.label for m in reclaim.MODES
        if m.settings and (m.settings["idleFor"], m.settings["gracePeriod"]) == defaults]
    assert any(reclaim.shipped(settings, m) for m in reclaim.MODES)


def pod_record(job_id: int, started: float, gpus: int = 2) -> binpack.PodRecord:
    job = BatchJob(job_id, Task(gpus, 1000, 1024), 0.0, 10.0)
    return binpack.PodRecord(f"job-{job_id}-pod", job.task, 0.0, job=job, started=started)


def test_a_pod_active_at_any_time_within_the_window_is_never_in_the_idle_set():
    # Job 1 stalls 2h to 5h after its start, job 2 never idles; both started at hour 1.
    records = [pod_record(1, 1.0), pod_record(2, 1.0)]
    gaps = {1: reclaim.Idleness("stalled", ((2.0, 5.0),), 7.0)}

    def idle(now: float) -> set[str]:
        return {name for _, name in reclaim.idle_set(records, gaps, 2.0, now)}

    assert idle(4.9) == set()            # active 1.9h before: within the window
    assert idle(5.0) == {"job-1-pod"}    # idle for exactly the window
    assert idle(6.0) == {"job-1-pod"}
    assert idle(6.01) == set()           # working again
    assert reclaim.idle_set(records, gaps, 2.0, 5.0) == {(binpack.NAMESPACE, "job-1-pod"): 2}
    records[0].ended = 5.5
    assert idle(6.0) == set()            # gone


def test_a_teams_figures_count_what_each_eviction_handed_back_and_cost():
    """research: a notebook evicted in its first gap (its later bursts lost, its later idle
    hours handed back), a stalled job evicted in its stall (all its work lost, no retry), a hung
    job evicted before its owner would have deleted it; vision: a notebook left alone."""
    notebook = reclaim.Idleness("notebook", ((1.0, 3.0), (4.0, 6.0), (7.0, 12.0)), 12.0)
    stalled = reclaim.Idleness("stalled", ((2.0, 5.0),), 7.0)
    hung = reclaim.Idleness("hung", ((1.0, 9.0),), 9.0)
    pods = ((1, notebook, "research", 2.5), (2, stalled, "research", 4.5),
            (3, hung, "research", 6.0), (4, notebook, "vision", 12.0))
    records = []
    for job_id, idleness, team, ended in pods:
        job = BatchJob(job_id, Task(2, 1000, 1024), 0.0, idleness.duration)
        records.append(binpack.PodRecord(f"job-{job_id}-pod", job.task, 0.0, job=job,
                                         started=0.0, ended=ended, namespace=team))
    idle = reclaim.IdleTrace(Trace([], [], [], horizon=20.0),
                             {job_id: idleness for job_id, idleness, _, _ in pods}, {})
    evicted = [reclaim.Reclaimed(record, record.ended, busy=False, warned=True)
               for record in records[:3] if record.ended is not None]
    answered = {("research", "job-1-pod", "t0"), ("vision", "job-4-pod", "t1")}
    outcome = binpack.Outcome("test", 20.0, 16, records, [])
    research = reclaim.team_figures(outcome, idle, evicted, answered, "research")
    assert research["held_gpu_hours"] == 2 * (2.5 + 4.5 + 6.0)
    # Idle while held: 1.5 h of the notebook's first gap, 2.5 h of the stall, 5 h hung.
    assert research["idle_gpu_hours"] == 2 * (1.5 + 2.5 + 5.0)
    # Handed back: the notebook's last 0.5 h of that gap and its 2 h and 5 h spells; the
    # stall's last 0.5 h; the hung job's last 3 h.
    assert research["handed_back_gpu_hours"] == 2 * (7.5 + 0.5 + 3.0)
    assert research["handed_back_share"] == pytest.approx(22 / (22 + 18))
    assert (research["notebooks_cut_short"], research["notebook_work_lost_gpu_hours"]) == (1, 4)
    assert (research["evicted_stalled"], research["stalled_work_lost_gpu_hours"]) == (1, 8)
    assert (research["evicted"], research["evicted_warned"], research["keep_alives_sent"]) == (
        3, 3, 1)
    vision = reclaim.team_figures(outcome, idle, evicted, answered, "vision")
    assert (vision["held_gpu_hours"], vision["idle_gpu_hours"]) == (24.0, 18.0)
    assert (vision["handed_back_gpu_hours"], vision["evicted"]) == (0.0, 0)


def test_the_replay_runs_reclaim_on_the_shipped_schedule():
    assert reclaim.run_every_hours(example_settings().reclaim.schedule) == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="'0 \\* \\* \\* \\*'"):
        reclaim.run_every_hours("0 * * * *")


def test_contended_seeds_are_the_first_whose_reference_cannot_start_the_batch_on_arrival():
    args = argparse.Namespace(contended=3, jobs_per_gpu=2.0, load=0.9, inference_share=0.25)
    nodes = workload.CLUSTERS["homogeneous"](16)
    seeds = run.contended_seeds(args, "synthetic", nodes)

    def started_on_arrival(seed: int) -> float:
        trace = workload.generate("synthetic", seed, 256, 128, 0.9, 0.25,
                                  fits=workload.fits_on(nodes["gpu-0000"]))
        return binpack.reference(trace, nodes).started_on_arrival()
    assert len(seeds) == 3 and seeds[0] >= binpack.CONTENDED_FROM
    for seed in range(binpack.CONTENDED_FROM, seeds[-1] + 1):
        assert (seed in seeds) == (started_on_arrival(seed) < binpack.CONTENDED_BELOW), seed


def test_the_benchmark_explains_its_options(capsys):
    with pytest.raises(SystemExit) as stopped:
        run.main(["--help"])
    assert stopped.value.code == 0
    assert "--contended SEEDS" in capsys.readouterr().out


@pytest.mark.parametrize("moving", [["--preemptible", "1.0"], ["--compaction", "0.5"]])
def test_the_benchmark_refuses_to_replay_moving_pods_on_the_dra_path(moving, capsys, tmp_path):
    with pytest.raises(SystemExit) as stopped:
        run.main(["--dra", *moving, "--out", str(tmp_path)])
    assert stopped.value.code == 2
    assert "device plugin path only" in capsys.readouterr().err


def test_a_strict_fifo_queue_is_settled_only_when_its_head_cannot_be_admitted():
    """The replay with StrictFIFO queues waits for Kueue only where it knows Kueue's next
    admission: each team's oldest pending Workload of the highest priority, when it fits."""
    def fits(team: str, gpus: int) -> bool:
        return gpus <= 4
    early, late, urgent = (0, "2026-01-01T00:00:01Z"), (0, "2026-01-01T00:00:02Z"), \
        (-10, "2026-01-01T00:00:03Z")
    assert teams.strict_heads([("a", 8, "big", early), ("a", 1, "small", late)], fits) == []
    assert teams.strict_heads([("a", 1, "small", early), ("a", 8, "big", late)], fits) == [
        ("a", 1, "small", early)]
    # a higher priority stands first, however late
    assert teams.strict_heads([("a", 1, "small", early), ("a", 8, "big", urgent)], fits) == []
    # created within the same second: Kueue's order between them is its own
    assert teams.strict_heads([("a", 8, "big", early), ("a", 1, "small", early)], fits) == []
    assert teams.strict_heads([("a", 2, "x", early), ("a", 1, "y", early)], fits) == [
        ("a", 2, "x", early), ("a", 1, "y", early)]
    # one requeued after an eviction may stand by its eviction: the team is left to Kueue
    assert teams.strict_heads([("a", 1, "small", early), ("a", 8, "big", None)], fits) == []
    assert teams.strict_heads([("a", 8, "big", early), ("b", 1, "small", late)], fits) == [
        ("b", 1, "small", late)]


def test_a_reservation_replay_is_set_against_its_seeds_reference_and_plain_replay():
    """The reservation table's ratios: the same seed's reference and, on the same GPU path,
    the shipped profile's replay without reservation; idle GPU-hours against the cluster's."""
    from benchmark import report
    dra = ", Kubernetes 1.37.2, DRA"
    limits = "batch jobs declaring 2 times their run time (backfill)"
    base = {"mix": "synthetic", "nodes": 16, "seed": 9, "gpus": 128,
            "samples": [[10.0, 0, 0, 0]], "wait_p95_1": 0.5}
    rows = [base | {"scheduler": binpack.REFERENCE, "wait_p95_8": 2.0},
            base | {"scheduler": "gpu-binpack-scheduler" + dra, "wait_p95_8": 8.0},
            base | {"scheduler": "gpu-binpack-scheduler", "wait_p95_8": 99.0},
            base | {"scheduler": f"gpu-binpack-scheduler + reservation (x), {limits}" + dra,
                    "wait_p95_8": 4.0, "delivered_share": 0.97, "reservations": 3,
                    "backfills": 2, "reservations_expired": 1, "reserved_idle_gpu_hours": 12.8}]
    line = report.reservation_table(rows).splitlines()[-1]
    assert line == (f"| synthetic | gpu-binpack-scheduler + reservation (x), {limits}, Kubernetes "
                    "1.37.2, DRA | 1 | 97.0% | 2.00 / 4.00 | 30 / 30 | 3, 2, 1 | 1.0% |")


def test_a_teams_replay_with_reservation_shows_what_small_jobs_paid_and_what_it_did():
    """Its own row in the teams page, named by its declared run times, with 1-GPU waits in
    minutes and what the reservations did with teams and without."""
    from benchmark import report
    row = {"mix": "synthetic", "nodes": 16, "gpus": 128, "load": 0.9, "contended": True,
           "reservation": "reservation (x), batch jobs declaring 2 times their run time "
                          "(backfill)",
           "delivered_vs_without_teams": 1.0, "delivered_vs_reference": 0.99,
           "without_teams_vs_reference": 0.99, "contended_hours": 1, "teams": {},
           "one_gpu_wait_p95": {"with_teams": 0.2, "without_teams": 0.1, "reference": 0.5},
           "reserved": {"with_teams": {"reservations": 12, "backfills": 0,
                                       "reservations_expired": 1, "idle_share": 0.002},
                        "without_teams": {"reservations": 14, "backfills": 3,
                                          "reservations_expired": 0, "idle_share": 0.003}}}
    page = report.teams_page([row])
    assert ("| synthetic | 16 | 0.9 | contended | BestEffortFIFO + reservation (jobs declaring "
            "2× their run time) | 1 | 12 / 6 / 30 | 12 / 14 | 0 / 3 | 1 / 0 | 0.2 / 0.3% |"
            ) in page.splitlines()
