"""The `scheduler` section of the stack settings."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from ..base.model import ContainerResources, Labels, Model
from ..base.scoring import ScoringStrategy
from ..base.validation import (
    DnsLabel,
    GoDuration,
    Invalid,
    OwnNamespace,
    check_dns_label,
    go_duration_seconds,
)

# Score plugins of kube-scheduler's default profile and their weights there
# (pkg/scheduler/apis/config/v1/default_plugins.go of k8s.io/kubernetes, 1.30 to 1.36).
DEFAULT_SCORE_WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1,
                         "PodTopologySpread": 2, "InterPodAffinity": 2,
                         "NodeResourcesBalancedAllocation": 1, "ImageLocality": 1}
# What the binpack profile changes (0: the plugin does not score). BalancedAllocation favours
# nodes whose CPU and memory are equally used, which is unrelated to where GPUs are free;
# ImageLocality favours nodes that already hold the image, which an idle node often does.
# Either can outweigh one GPU's worth of NodeResourcesFit, so both are off
# (docs/concepts/binpack-scheduler.md).
BINPACK_SCORE_WEIGHTS = {"NodeResourcesBalancedAllocation": 0, "ImageLocality": 0}


class PreemptibleClassSettings(Model):
    """The PriorityClass GPU pods opt in to preemption with."""

    enabled: bool = Field(
        default=True,
        description="Declare the PriorityClass GPU workloads opt in to preemption with: a GPU "
                    "pod that cannot be placed preempts such pods where that makes room, so a "
                    "job that needs a whole node does not wait for one to drain. Not on the "
                    "DRA path, where kube-scheduler (up to 1.37) does not preempt for GPUs: "
                    "every run warns of it. See docs/concepts/preemptible-gpu-pods.md.")
    name: str = Field(default="gpu-preemptible",
                      description="The PriorityClass's name (pods set it as "
                                  "`priorityClassName`; names starting with `system-` are the "
                                  "API server's).")
    value: int = Field(
        default=-100, ge=-1_000_000_000, le=-1,
        description="Its priority: below 0, the priority of pods that name no class (unless "
                    "the cluster has a globalDefault class), so only pods that opt in are ever "
                    "preempted by GPU pods.")

    @field_validator("name")
    @classmethod
    def class_name(cls, value: str) -> str:
        check_dns_label(value)
        if value.startswith("system-"):
            raise Invalid("the API server reserves names starting with system- for its own "
                          "classes", "a DNS-1123 label such as gpu-preemptible")
        return value


class ClientConnectionSettings(Model):
    """How fast the scheduler may call the API server."""

    qps: int = Field(
        default=200, ge=1, le=5000,
        description="Requests per second the binpack scheduler may send the API server, "
                    "sustained (1..5000): each placement costs about two (the binding and an "
                    "event), and on the DRA path several more (the claim it writes). "
                    "kube-scheduler's own default, 50, caps a burst of pending GPU pods at "
                    "about 50 placements a second; docs/benchmarks says what each value "
                    "measured, and docs/operators/sizing.md what to set on large fleets.")
    burst: int = Field(
        default=400, ge=1, le=10000,
        description="Requests it may send at once above `qps` (at least `qps`).")

    @model_validator(mode="after")
    def burst_covers_qps(self) -> ClientConnectionSettings:
        if self.burst < self.qps:
            raise Invalid("a burst below qps would cap the rate at the burst",
                          f"{self.qps} or more", at=("burst",), value=self.burst,
                          has_value=True)
        return self


class LeaderElectionSettings(Model):
    """How the scheduler's replicas elect the one that schedules."""

    lease_duration: GoDuration = Field(
        default="10s",
        description="How long a standby replica waits after the leader's last renewal before "
                    "it takes over (a Go duration): a leader that crashes stops GPU placement "
                    "for about this long plus `retryPeriod`, at most plus 4.4 x "
                    "`retryPeriod` (a standby's tries are jittered).")
    renew_deadline: GoDuration = Field(
        default="8s",
        description="How long the leader keeps trying to renew before it gives up leading and "
                    "restarts (shorter than `leaseDuration`): the API server may be unreachable "
                    "this long without the scheduler restarting.")
    retry_period: GoDuration = Field(
        default="2s",
        description="How often the leader renews and a standby tries to take over.")


    @model_validator(mode="after")
    def deadlines_in_order(self) -> LeaderElectionSettings:
        # client-go's own rule: leaseDuration > renewDeadline > 1.2 x retryPeriod.
        lease, renew, retry = map(go_duration_seconds, (self.lease_duration, self.renew_deadline,
                                                        self.retry_period))
        if renew >= lease:
            raise Invalid("the leader must give up before its lease expires",
                          f"a duration shorter than leaseDuration ({self.lease_duration})",
                          at=("renewDeadline",), value=self.renew_deadline, has_value=True)
        if renew <= 1.2 * retry:
            raise Invalid("the leader must be able to retry a renewal before its deadline",
                          f"a duration shorter than renewDeadline / 1.2 "
                          f"({renew / 1.2:g}s)", at=("retryPeriod",), value=self.retry_period,
                          has_value=True)
        return self


class SchedulerSettings(Model):
    """The binpack scheduler: a second kube-scheduler that packs GPU pods, and the
    PriorityClass of preemptible GPU pods."""

    name: DnsLabel = Field(default="gpu-binpack-scheduler",
                           description="schedulerName GPU pods must use; also names the "
                                       "scheduler's Deployment, ServiceAccount and "
                                       "leader-election lease.")
    namespace: OwnNamespace = Field(default="gpu-scheduler",
                                    description="Namespace of the scheduler.")
    replicas: int = Field(default=2, ge=1, le=5,
                          description="Scheduler pods (1..5); leader election is on when >1.")
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy,
                                              description="NodeResourcesFit scoring.")
    score_plugin_weights: dict[str, int] = Field(
        default_factory=lambda: dict(BINPACK_SCORE_WEIGHTS),
        description="Weights of kube-scheduler's score plugins in the binpack profile, merged "
                    "over the defaults NodeResourcesBalancedAllocation: 0 and ImageLocality: 0 "
                    "(0 turns a plugin's scoring off); plugins not named keep kube-scheduler's "
                    "weights (TaintToleration 3, NodeAffinity 2, PodTopologySpread 2, "
                    "InterPodAffinity 2, NodeResourcesFit 1). See "
                    "docs/concepts/binpack-scheduler.md.")
    system_default_spread: bool = Field(
        default=False,
        description="Apply kube-scheduler's system default topology spread (hostname maxSkew 3, "
                    "zone maxSkew 5, ScheduleAnyway) to pods a Service, ReplicaSet or "
                    "StatefulSet selects. Off: replicas pack like any GPU pod; spread "
                    "constraints that pods declare themselves still apply.")
    percentage_of_nodes_to_score: int = Field(
        default=100, ge=0, le=100,
        description="Share of feasible nodes kube-scheduler scores before it picks one, percent "
                    "(0: its adaptive default, which above 100 nodes stops early and can miss "
                    "the busiest node; it scores at least 100). Fewer nodes scored place "
                    "faster and pack a little less: docs/operators/sizing.md says when to.")
    resources: ContainerResources = Field(
        default_factory=lambda: ContainerResources(
            requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"}),
        description="Scheduler container requests and limits.")
    node_selector: Labels = Field(
        default_factory=dict,
        description="Labels of the nodes the scheduler's pods run on, such as a node pool of the "
                    "platform's own services, so that GPU placement does not stop when busy "
                    "workload nodes are drained or scaled away. Empty: any node that admits "
                    "them.")
    log_level: int = Field(default=2, ge=0, le=10, description="kube-scheduler -v verbosity.")
    preemptible_class: PreemptibleClassSettings = Field(
        default_factory=PreemptibleClassSettings,
        description="The PriorityClass of GPU pods that may be preempted.")
    client_connection: ClientConnectionSettings = Field(
        default_factory=ClientConnectionSettings,
        description="The scheduler's rate of requests to the API server.")
    leader_election: LeaderElectionSettings = Field(
        default_factory=LeaderElectionSettings,
        description="How the replicas elect the one that schedules (with more than one).")


    @field_validator("score_plugin_weights", mode="before")
    @classmethod
    def weights_over_binpack_defaults(cls, weights: Any) -> Any:
        return {**BINPACK_SCORE_WEIGHTS, **weights} if isinstance(weights, dict) else weights

    @field_validator("score_plugin_weights")
    @classmethod
    def weights_of_score_plugins(cls, weights: dict[str, int]) -> dict[str, int]:
        for name, weight in weights.items():
            if name not in DEFAULT_SCORE_WEIGHTS:
                raise Invalid("not a score plugin of kube-scheduler's default profile",
                              ", ".join(DEFAULT_SCORE_WEIGHTS), at=(name,), value=name,
                              has_value=True)
            lowest = 1 if name == "NodeResourcesFit" else 0
            if not lowest <= weight <= 100:
                raise Invalid("weight out of range", f"{lowest}..100" + (
                    " (NodeResourcesFit is the plugin that packs)" if lowest else
                    ", 0 to turn the plugin's scoring off"), at=(name,), value=weight,
                    has_value=True)
        return weights
