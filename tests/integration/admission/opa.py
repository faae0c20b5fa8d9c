"""OPA behind the declared webhooks on the package's control plane (Admission), and what the
tests do with it: ask whether a pod would be admitted and why it is refused, roll a policy change
out as `pulumi up` does (a new OPA generation, the webhooks switched to it once it is ready),
switch the admission mode, and create pods from many clients at once."""

import copy
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import requests

from components import opa_admission
from components.base import facts
from components.opa_admission.inputs import OpaAdmissionInputs
from components.platform.settings import StackSettings
from tests.kit.cluster.controlplane import ApiError, ControlPlane, wait_until
from tests.kit.cluster.declared_objects import TEST_MANAGER, find
from tests.kit.cluster.kubelet import ProcessKubelet, RunningPod
from tests.kit.cluster.nodes_and_pods import pod
from tests.kit.cluster.running_platform import ready_endpoints
from tests.kit.cluster.running_platform import refusal as dry_run_refusal
from tests.kit.harness import admission_of

USER_NAMESPACE = "team-a"


@dataclass
class Admission:
    cp: ControlPlane
    kubelet: ProcessKubelet
    settings: StackSettings
    ca_bundle: str
    # The OPA generation the webhooks call (roll_out moves it on).
    current: OpaAdmissionInputs

    def generation_name(self, base: str = facts.OPA_SERVICE) -> str:
        return opa_admission.generation_name(self.current, base)

    def opa_pods(self) -> list[RunningPod]:
        """The running pods of the generation the webhooks call."""
        return self.kubelet.pods_of(self.settings.admission.namespace,
                                    lambda name: name.startswith(f"{self.generation_name()}-"))

    def ready_endpoints(self) -> list[str]:
        return ready_endpoints(self.cp.admin, self.settings.admission.namespace,
                               self.generation_name())

    def decisions(self) -> float:
        """How many admission decisions the OPA pods have served (from their own metrics)."""
        total = 0.0
        for running in self.opa_pods():
            text = requests.get(f"http://{running.address}:{opa_admission.DIAGNOSTIC_PORT}"
                                f"/metrics", timeout=5).text
            total += sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith("http_request_duration_seconds_count")
                         and 'handler="v0/data"' in line)
        return total

    def serving(self, replicas: int) -> bool:
        """`replicas` OPA pods ready and in the Service's endpoints, and no other pod."""
        pods = self.opa_pods()
        return (len(pods) == replicas and all(p.containers["opa"].ready for p in pods)
                and self.ready_endpoints() == sorted(p.address for p in pods))

    def available(self, replicas: int) -> bool:
        """Serving, and its Deployment available as `pulumi up` waits for it before it switches
        the webhooks: every replica ready for the Deployment's minReadySeconds."""
        status = self.cp.admin.get("apps/v1", "Deployment", self.generation_name(),
                                   self.settings.admission.namespace).get("status", {})
        return (self.serving(replicas) and status.get("availableReplicas") == replicas
                and any(c["type"] == "Available" and c["status"] == "True"
                        for c in status.get("conditions", [])))


def gpu_pod_admitted(kube, settings: StackSettings, name: str = "probe") -> bool:
    """Whether a GPU pod that keeps the rules is admitted now (a dry run: OPA is asked)."""
    return admitted(kube, pod(name, USER_NAMESPACE, gpus=1, settings=settings,
                              scheduler=settings.scheduler.name))


def gpu_pod_admitted_on(kube, settings: StackSettings, scheduler: str | None) -> bool:
    return admitted(kube, pod("webhook-probe", USER_NAMESPACE, gpus=1, settings=settings,
                              scheduler=scheduler))


def kubelet_state(admission: Admission) -> str:
    lines = []
    for running in admission.opa_pods():
        for name, container in running.containers.items():
            lines.append(f"{running.name}/{name}: ready={container.ready} "
                         f"restarts={container.restarts}")
            if container.process:
                lines.append(container.process.tail(10))
    return "\n".join(lines) + f"\nready endpoints: {admission.ready_endpoints()}"


def admitted(kube, obj) -> bool:
    """Whether the API server would create `obj` now (a dry run)."""
    return dry_run_refusal(kube, obj) == ""


def refusal(kube, obj) -> str:
    with pytest.raises(ApiError) as refused:
        kube.create(obj)
    assert refused.value.status == 403, refused.value.message
    return refused.value.message


def gpu_pod_with(settings: StackSettings, name: str, **spec) -> dict:
    """A GPU pod on the binpack scheduler with `spec` added."""
    obj = pod(name, USER_NAMESPACE, gpus=1, settings=settings, scheduler=settings.scheduler.name)
    obj["spec"].update(spec)
    return obj


def bare_gpu_pod(name: str) -> dict:
    """A GPU pod as a vendor's chart writes it: no scheduler, no tolerations."""
    return pod(name, USER_NAMESPACE, gpus=1)


# How long a rolled-out policy change may take to reach every OPA pod behind the webhook:
# each new pod loads the policy at start and is ready within seconds, and the Deployment
# replaces the pods one at a time, none before the next is ready.
ROLLOUT_SECONDS = 60


def switch_mode(admission: Admission, settings: StackSettings, mode: str) -> StackSettings:
    """Roll the stack to another admission mode (see roll_out)."""
    adm = settings.admission.model_copy(update={
        "mode": mode, "failure_policy": "Ignore" if mode == "audit" else "Fail"})
    return roll_out(admission, settings.model_copy(update={"admission": adm}), f"mode {mode}")


def roll_out(admission: Admission, changed: StackSettings, what: str) -> StackSettings:
    """Roll the stack onto changed settings as `pulumi up` does: a new OPA generation (its
    ConfigMaps, Service and Deployment, each replacing the old one, created first), then, once
    its Deployment is available, both webhook configurations, built from the changed settings,
    which call its Service; the old generation's objects are deleted last."""
    adm, inputs = changed.admission, admission_of(changed)
    cp = admission.cp
    # One `pulumi up` after another: the last one's old generation has handed over (an up
    # takes longer than OPA's shutdown wait).
    wait_until(lambda: not admission.kubelet.terminating_in(adm.namespace),
               "the old OPA generation to be gone", timeout=60)
    started = time.monotonic()
    old = admission.current
    new_generation = opa_admission.generation(inputs) != opa_admission.generation(old)
    for obj in [*opa_admission.policy_config_maps(inputs), opa_admission.service(inputs),
                opa_admission.deployment(inputs)]:
        cp.admin.apply(obj, TEST_MANAGER)
    admission.current = inputs
    wait_until(lambda: admission.available(adm.replicas),
               f"the OPA pods of {what} available behind their Service",
               timeout=ROLLOUT_SECONDS, explain=lambda: kubelet_state(admission))
    print(f"\npolicy change to {what}: its OPA Deployment available after "
          f"{time.monotonic() - started:.1f} s")
    cp.admin.apply(opa_admission.webhook_configuration(inputs, admission.ca_bundle),
                   TEST_MANAGER)
    mutating = opa_admission.mutating_webhook_configuration(inputs, admission.ca_bundle)
    if mutating:
        cp.admin.apply(mutating, TEST_MANAGER)
    else:
        cp.admin.delete("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                        "gpu-platform-admission")
    if new_generation:
        delete_generation(cp, old)
    return changed


def delete_generation(cp: ControlPlane, inputs: OpaAdmissionInputs) -> None:
    """Delete an OPA generation's objects, as the engine deletes replaced resources: its pods
    then end gracefully (the kubelet gives them their grace period)."""
    for obj in [opa_admission.deployment(inputs), opa_admission.service(inputs),
                *opa_admission.policy_config_maps(inputs)]:
        cp.admin.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                        obj["metadata"]["namespace"], propagation="Background")


def probe_of_a_later_run(declared, run: str) -> dict:
    """The declared reachability probe as a later `pulumi up` applies it when the way to OPA
    has changed (a new fingerprint)."""
    probe = copy.deepcopy(find(declared.objects, "ConfigMap", opa_admission.REACHABILITY_PROBE))
    probe["data"]["fingerprint"] = run
    return probe


def client(admission: Admission):
    """A client of its own, for a thread."""
    cp = admission.cp
    return type(cp.admin)(cp.server, cp.ca_file, cert=cp.admin_cert)


Result = tuple[float, str, float, str]       # start, kind, seconds, error ("" if admitted)


def create_pods(admission: Admission, make: Callable[[int], tuple[str, dict]], clients: int,
                dry_run: bool, count: int = 0, during: Callable[[], None] | None = None
                ) -> list[Result]:
    """Pods made by `make(index)` created from `clients` threads: `count` of them, or as many
    as they manage while `during` runs."""
    results: list[Result] = []
    lock = threading.Lock()
    done = threading.Event()
    indices = iter(range(count)) if count else itertools.count()

    def create() -> None:
        kube = client(admission)
        while not done.is_set():
            with lock:
                index = next(indices, None)
            if index is None:
                return
            kind, obj = make(index)
            started = time.monotonic()
            try:
                kube.create(obj, dry_run=dry_run)
                error = ""
            except ApiError as refused:
                error = refused.message
            with lock:
                results.append((started, kind, time.monotonic() - started, error))

    threads = [threading.Thread(target=create) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        if during is not None:
            during()
    finally:
        if during is not None:
            done.set()
        for thread in threads:
            thread.join()
    return sorted(results)
