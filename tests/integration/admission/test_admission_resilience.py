"""OPA's restarts and bursts: a container killed, a pod deleted, both replicas killed mid-burst,
policy changes rolled out under a burst, and no OPA pod at all."""

import statistics
import time

import pytest

from tests.integration.admission.opa import (
    USER_NAMESPACE,
    create_pods,
    gpu_pod_admitted,
    kubelet_state,
    probe_of_a_later_run,
    roll_out,
)
from tests.kit.cluster.controlplane import ApiError, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER
from tests.kit.cluster.nodes_and_pods import ensure_namespace, placement, pod

# Its figures need the machine to itself: `bash tests/run integration` runs it alone.
pytestmark = pytest.mark.serial

# How soon OPA decides again after its container or pod restarts: it loads the policy from the
# pod's volumes in well under a second; the rest is the kubelet's restart and readiness probe.
RESTART_SECONDS = 10


def test_an_opa_container_killed_comes_back_with_its_policy_by_itself(admission,
                                                                     example_settings):
    """As when the kernel kills OPA at its memory limit: the kubelet restarts the container,
    which loads the policy from the pod's volumes again, with no other component's help."""
    replicas = example_settings.admission.replicas
    victim = admission.opa_pods()[0]
    killed = time.monotonic()
    admission.kubelet.kill(victim, "opa")
    wait_until(lambda: victim.containers["opa"].restarts == 1 and admission.serving(replicas),
               "the killed OPA container to be restarted and ready", timeout=RESTART_SECONDS,
               explain=lambda: kubelet_state(admission))
    print(f"\nOPA container killed: restarted and ready again after "
          f"{time.monotonic() - killed:.1f} s")
    stored = admission.cp.admin.get("v1", "Pod", victim.name,
                                    example_settings.admission.namespace)
    assert stored["status"]["containerStatuses"][0]["restartCount"] == 1
    before = admission.decisions()
    for index in range(4):      # both replicas decide again
        assert gpu_pod_admitted(admission.cp.admin, example_settings, f"after-kill-{index}")
    assert admission.decisions() == before + 4


def test_a_deleted_opa_pod_is_replaced_by_one_that_decides(admission, example_settings):
    """The whole pod gone (a node drained, a pod deleted): its ReplicaSet's replacement loads
    the policy from its own volumes."""
    adm = example_settings.admission
    victim = admission.opa_pods()[0]
    deleted = time.monotonic()
    admission.cp.admin.delete("v1", "Pod", victim.name, adm.namespace)
    wait_until(lambda: victim.uid not in {p.uid for p in admission.opa_pods()}
               and admission.serving(adm.replicas),
               "a replacement OPA pod ready behind the Service", timeout=30,
               explain=lambda: kubelet_state(admission))
    print(f"\nOPA pod deleted: replaced and ready after {time.monotonic() - deleted:.1f} s")
    assert gpu_pod_admitted(admission.cp.admin, example_settings)


def test_a_burst_of_gpu_pods_through_the_webhook_is_admitted_without_errors(admission,
                                                                           example_settings):
    """Many GPU pods at once from many clients, each asked of OPA: every one admitted. They ask
    for a node that does not exist, so none is bound, and they are removed afterwards."""
    settings, namespace = example_settings, "burst"
    ensure_namespace(admission.cp.admin, namespace)

    def gpu_pod(index: int) -> tuple[str, dict]:
        obj = pod(f"burst-{index}", namespace, gpus=1, settings=settings,
                  scheduler=settings.scheduler.name)
        obj["spec"]["nodeSelector"] = {"gpu-platform.io/burst": "nowhere"}
        return "gpu", obj

    before = admission.decisions()
    try:
        results = create_pods(admission, gpu_pod, clients=16, dry_run=False, count=400)
    finally:
        admission.cp.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                                   params={"gracePeriodSeconds": "0"})
    errors = [error for _, _, _, error in results if error]
    latencies = sorted(seconds for _, _, seconds, _ in results)
    elapsed = results[-1][0] + results[-1][2] - results[0][0]
    print(f"\n400 GPU pods by 16 clients in {elapsed:.1f} s: create p50 "
          f"{statistics.median(latencies) * 1000:.0f} ms, p99 "
          f"{latencies[int(len(latencies) * 0.99) - 1] * 1000:.0f} ms, {len(errors)} errors")
    assert errors == []
    assert admission.decisions() >= before + 400


def test_opa_killed_mid_burst_refuses_gpu_pods_only_until_it_is_back(admission,
                                                                     example_settings):
    """Both replicas killed while pods are being created: pods without GPUs never notice (OPA is
    never asked about them); GPU pods are refused (failure policy Fail) until OPA is back, and
    admitted again within seconds."""
    settings = example_settings
    replicas = settings.admission.replicas
    killed_at: list[float] = []

    def mixed(index: int) -> tuple[str, dict]:
        if index % 2:
            return "cpu", pod(f"mixed-{index}", USER_NAMESPACE)
        return "gpu", pod(f"mixed-{index}", USER_NAMESPACE, gpus=1, settings=settings,
                          scheduler=settings.scheduler.name)

    def kill_both() -> None:
        time.sleep(1.0)
        killed_at.append(time.monotonic())
        for running in admission.opa_pods():
            admission.kubelet.kill(running, "opa")
        wait_until(lambda: admission.serving(replicas), "both OPA replicas back",
                   timeout=RESTART_SECONDS, explain=lambda: kubelet_state(admission))
        # Ready endpoints are what the test reads; the API server calls OPA through its own
        # view of them, which can lag on a loaded machine.
        wait_until(lambda: gpu_pod_admitted(admission.cp.admin, settings),
                   "the API server to admit a GPU pod again", timeout=RESTART_SECONDS)
        time.sleep(2.0)     # GPU pods admitted again, for a while

    results = create_pods(admission, mixed, clients=4, dry_run=True, during=kill_both)
    (killed,) = killed_at
    cpu_errors = [error for _, kind, _, error in results if kind == "cpu" and error]
    gpu = [(start, error) for start, kind, _, error in results if kind == "gpu"]
    refused = [start for start, error in gpu if error]
    assert cpu_errors == [], cpu_errors[:3]
    early = [error for start, kind, seconds, error in results
             if kind == "gpu" and error and start + seconds < killed]
    assert early == [], f"GPU pods refused before OPA was killed: {early[:3]}"
    last_refused = max(refused, default=killed) - killed
    admitted_after = [start for start, error in gpu if start > killed + last_refused]
    print(f"\nboth OPA replicas killed mid-burst: {len(results)} pods created by 4 clients, "
          f"{len(refused)} GPU pods refused, the last {last_refused:.1f} s after the kill; "
          f"{len(admitted_after)} GPU pods admitted after it; no pod without GPUs refused")
    assert last_refused < RESTART_SECONDS
    assert len(admitted_after) >= 10
    for error in (error for _, error in gpu if error):
        assert settings.admission.webhook_name in error, error


# Policy changes rolled out in a row while GPU pods are being created.
ROLLOUTS = 5


def test_policy_rollouts_under_a_burst_of_gpu_pods_refuse_none(admission, example_settings):
    """Five policy changes rolled out, one after another, while 16 clients create GPU pods: each
    is a new OPA generation that the webhooks switch to once it is ready, and the old one is
    removed once nothing calls it, so no GPU pod is refused. (Each change exempts one more
    namespace; the last rollout brings the example stack's policy back.)"""
    settings = example_settings
    durations: list[float] = []

    def roll_in_turn() -> None:
        for index in range(ROLLOUTS + 1):
            exempt = [f"rollout-{i}" for i in range(index + 1)] if index < ROLLOUTS else []
            changed = settings.model_copy(update={"admission": settings.admission.model_copy(
                update={"exempt_namespaces": settings.admission.exempt_namespaces + exempt})})
            started = time.monotonic()
            roll_out(admission, changed, f"{len(exempt)} more exempt namespaces")
            durations.append(time.monotonic() - started)

    def gpu_pod(index: int) -> tuple[str, dict]:
        return "gpu", pod(f"rolling-{index}", USER_NAMESPACE, gpus=1, settings=settings,
                          scheduler=settings.scheduler.name)

    results = create_pods(admission, gpu_pod, clients=16, dry_run=True, during=roll_in_turn)
    refused = [error for _, _, _, error in results if error]
    latencies = sorted(seconds for _, _, seconds, _ in results)
    print(f"\n{len(durations)} policy rollouts ({', '.join(f'{d:.1f}' for d in durations)} s) "
          f"under {len(results)} GPU pod creations by 16 clients: {len(refused)} refused; "
          f"create p50 {statistics.median(latencies) * 1000:.0f} ms, p99 "
          f"{latencies[int(len(latencies) * 0.99) - 1] * 1000:.0f} ms")
    assert len(results) >= 1000
    assert refused == [], refused[:3]


def test_with_opa_down_the_failure_policy_holds_and_other_pods_still_schedule(
        admission, example_settings, declared):
    """No OPA pod at all (the Deployment scaled to zero): the next `pulumi up` stops at the
    reachability probe, GPU pods are refused, and everything else goes on."""
    kube, adm = admission.cp.admin, example_settings.admission
    kube.merge_patch("apps/v1", "Deployment", admission.generation_name(),
                     {"spec": {"replicas": 0}},
                     adm.namespace, "scale", what="scale OPA to zero")
    try:
        wait_until(lambda: not admission.opa_pods() and not admission.ready_endpoints()
                   and not admission.kubelet.terminating_in(adm.namespace),
                   "every OPA pod gone", timeout=60)
        # The next `pulumi up` (and its preview) stops at the reachability probe, naming the
        # webhook and the cause, whatever the failure policy of the pod webhook.
        for dry_run in (True, False):
            with pytest.raises(ApiError) as unreachable:
                kube.apply(probe_of_a_later_run(declared, "unreachable"), TEST_MANAGER,
                           dry_run=dry_run)
            print("\nreachability probe refused:", unreachable.value.message)
            assert unreachable.value.status == 500
            assert f'failed calling webhook "{adm.reachability_webhook_name}"' \
                in unreachable.value.message
        # No other ConfigMap asks OPA.
        kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "app-config", "namespace": USER_NAMESPACE}})
        gpu_pod = pod("train-while-opa-down", USER_NAMESPACE, gpus=1, settings=example_settings,
                      scheduler=example_settings.scheduler.name)
        with pytest.raises(ApiError) as refused:
            kube.create(gpu_pod)
        assert refused.value.status == 500
        assert adm.webhook_name in refused.value.message
        kube.create(pod("web-while-opa-down", USER_NAMESPACE))
        assert placement(kube, USER_NAMESPACE, "web-while-opa-down") == "cpu-node-1"
    finally:
        kube.merge_patch("apps/v1", "Deployment", admission.generation_name(),
                         {"spec": {"replicas": adm.replicas}}, adm.namespace, "scale",
                         what="scale OPA back")
    wait_until(lambda: admission.serving(adm.replicas), "OPA back", timeout=30)
