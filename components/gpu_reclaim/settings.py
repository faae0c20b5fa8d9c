"""The `reclaim` section of the stack settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..base.model import (
    ContainerResources,
    ImageSettings,
    Model,
    python_image_field,
    script_resources_field,
)
from ..base.validation import (
    CronSchedule,
    DnsLabel,
    Duration,
    Invalid,
    NamespaceNames,
    OwnNamespace,
    PrometheusUrl,
    check_qualified_name,
    cron_job_namespace_field,
    cron_schedule_field,
    duration_seconds,
    prometheus_url_field,
)

# Idle is judged on the usage rules' per-minute series and the exporter's samples: a shorter
# window would judge a pod on a handful of samples (as monitoring.usage.window).
MIN_IDLE_FOR = "10m"
# Keep-alives a policy may allow per report: a bound, so that a grace period ends.
MAX_KEEP_ALIVES = 10


class ReclaimPolicy(Model):
    """What reclaim does in some of the opted-in teams and namespaces where it differs from the
    stack-wide `action`, `gracePeriod` and `allowKeep`: a team on `evict` beside teams on
    `report`, or one that may not keep idle GPUs. A setting left unset is the stack-wide one."""

    teams: list[str] = Field(
        default_factory=list,
        description="Teams of `reclaim.teams` the policy applies to (all their namespaces).")
    namespaces: NamespaceNames = Field(
        default_factory=list,
        description="Opted-in namespaces the policy applies to (named in `reclaim.namespaces` "
                    "or a namespace of a team in `reclaim.teams`). A namespace gets one policy "
                    "at most, whether named or through its team.")
    action: Literal["off", "report", "evict"] | None = Field(
        default=None,
        description="As `reclaim.action`, or `off`: reclaim leaves these namespaces alone (no "
                    "report, no rights there). Unset: `reclaim.action`.")
    grace_period: Duration | None = Field(
        default=None, description="As `reclaim.gracePeriod`. Unset: `reclaim.gracePeriod`.")
    allow_keep: bool | None = Field(
        default=None, description="As `reclaim.allowKeep`. Unset: `reclaim.allowKeep`.")
    keep_alives: int | None = Field(
        default=None, ge=0, le=MAX_KEEP_ALIVES,
        description="As `reclaim.keepAlives`. Unset: `reclaim.keepAlives`.")

    @model_validator(mode="after")
    def applies_to_something_and_changes_something(self) -> ReclaimPolicy:
        if not (self.teams or self.namespaces):
            raise Invalid("a policy for no team and no namespace",
                          "at least one team in `teams` or namespace in `namespaces`",
                          at=("teams",), value=[], has_value=True)
        if (self.action is None and self.grace_period is None and self.allow_keep is None
                and self.keep_alives is None):
            raise Invalid("a policy that changes nothing",
                          "at least one of action, gracePeriod, allowKeep and keepAlives",
                          at=("action",), value=None, has_value=True)
        return self


@dataclass(frozen=True)
class NamespacePolicy:
    """What reclaim does in one namespace: its policy's settings, else the stack-wide ones."""
    action: str
    grace_period: str
    allow_keep: bool
    keep_alives: int

    @property
    def grace_period_seconds(self) -> float:
        return duration_seconds(self.grace_period)



class ReclaimSettings(Model):
    """Idle GPU reclaim: pods whose GPUs did no work for a while are reported to their owners
    and, where the stack says so, evicted so that others can use the GPUs. Opt-in per namespace
    or team; report only unless `action` is `evict`."""

    enabled: bool = Field(
        default=False,
        description="Run the reclaim CronJob, which reads GPU activity from the monitoring "
                    "stack's Prometheus and acts on idle GPU pods of the opted-in namespaces "
                    "and teams. Off by default. See docs/operators/idle-reclaim.md.")
    name: DnsLabel = Field(default="gpu-reclaim",
                           description="Names the CronJob, its ServiceAccount, Roles and "
                                       "ConfigMap.")
    namespace: OwnNamespace = cron_job_namespace_field("gpu-reclaim")
    action: Literal["report", "evict"] = Field(
        default="report",
        description="`report`: an idle pod gets an event (on it and on its controller) and an "
                    "alert, and nothing else happens. `evict`: the same, then, once "
                    "`gracePeriod` has passed since the first report and the pod is still "
                    "idle, it is evicted through the eviction API (PodDisruptionBudgets hold). "
                    "Start with `report`.")
    idle_for: Duration = Field(
        default="1h",
        description=f"A pod is idle when it held its GPUs for this whole trailing window (a "
                    f"duration, {MIN_IDLE_FOR} or more, at most the monitoring stack's "
                    f"retention) and none of them was active (above "
                    f"`monitoring.usage.activeThreshold`) at any sample within it: a pod active "
                    f"at any time within the window is never idle.")
    grace_period: Duration = Field(
        default="2h",
        description="With `action: evict`: how long after a pod was first reported idle it may "
                    "be evicted if still idle (a duration): the owner's time to use it, keep "
                    "it or let it go. A pod active again starts over.")
    namespaces: NamespaceNames = Field(
        default_factory=list,
        description="Namespaces whose GPU pods reclaim applies to (opt-in: none by default).")
    teams: list[str] = Field(
        default_factory=list,
        description="Teams (names in `teams.teams`) whose namespaces reclaim applies to, as "
                    "well as `namespaces`; needs `teams.enabled`.")
    policies: list[ReclaimPolicy] = Field(
        default_factory=list,
        description="Per team or namespace, what reclaim does where it differs from the "
                    "stack-wide settings (docs/operators/idle-reclaim.md#a-policy-per-team).")
    keep_annotation: str = Field(
        default="gpu-platform.io/keep-gpus",
        description="The annotation by which a pod's owner asks to keep its GPUs although idle "
                    "(any value but `false`); honoured only with `allowKeep`.")
    allow_keep: bool = Field(
        default=True,
        description="Honour `keepAnnotation`: a pod that carries it is neither reported nor "
                    "evicted. Off: the annotation is ignored, and the report says so.")
    keep_alives: int = Field(
        default=1, ge=0, le=MAX_KEEP_ALIVES,
        description="Where the action is `evict`: how many times the owner of a reported pod "
                    "may restart its grace period by annotating it `gpu-platform.io/keep-alive` "
                    "(the run removes the annotation and counts it); 0: never.")
    max_evictions_per_run: int = Field(
        default=4, ge=1, le=100,
        description="Pods evicted per run, at most (the longest reported first).")
    schedule: CronSchedule = cron_schedule_field("*/10 * * * *", "a reclaim run")
    prometheus_url: PrometheusUrl = prometheus_url_field("the runs query")
    image: ImageSettings = python_image_field("the reclaim script")
    resources: ContainerResources = script_resources_field("the run's container")

    @field_validator("idle_for")
    @classmethod
    def window_holds_samples(cls, value: str) -> str:
        if duration_seconds(value) < duration_seconds(MIN_IDLE_FOR):
            raise Invalid("too short to judge a GPU idle on", f"{MIN_IDLE_FOR} or more (the "
                          "usage rules sample once a minute)")
        return value

    @field_validator("keep_annotation")
    @classmethod
    def annotation_key(cls, value: str) -> str:
        return check_qualified_name(value, "annotation key")

    @model_validator(mode="after")
    def something_opted_in(self) -> ReclaimSettings:
        if self.enabled and not (self.namespaces or self.teams):
            raise Invalid("reclaim is on but no namespace or team opted in, so it would do "
                          "nothing", "at least one namespace in reclaim.namespaces or team in "
                          "reclaim.teams, or enabled: false", at=("enabled",), value=True,
                          has_value=True)
        return self

    @model_validator(mode="after")
    def policies_name_opted_in_teams_once(self) -> ReclaimSettings:
        seen: dict[str, int] = {}
        for index, policy in enumerate(self.policies):
            for position, team in enumerate(policy.teams):
                if team not in self.teams:
                    raise Invalid("a team that did not opt in to reclaim",
                                  f"a team of reclaim.teams ({', '.join(self.teams) or 'none'})",
                                  at=("policies", index, "teams", position), value=team,
                                  has_value=True)
                if team in seen:
                    raise Invalid(f"a team with a policy already (reclaim.policies[{seen[team]}])",
                                  "one policy per team", at=("policies", index, "teams", position),
                                  value=team, has_value=True)
                seen[team] = index
        return self

    def policies_applying(self, namespace: str, team: str | None) -> list[tuple[int, str]]:
        """Each policy that applies to `namespace` (of `team`, if a team's), in order: its
        index, and how it names the namespace (`by name` or `through team <team>`). The
        settings allow one at most; the stack's settings check that against the teams."""
        return [(index, "by name" if namespace in policy.namespaces else f"through team {team}")
                for index, policy in enumerate(self.policies)
                if namespace in policy.namespaces or (team is not None and team in policy.teams)]

    def policy_of(self, namespace: str, team: str | None) -> NamespacePolicy:
        """What reclaim does in `namespace` (of `team`, if a team's): the policy naming it or
        its team, else the stack-wide settings."""
        applying = self.policies_applying(namespace, team)
        if not applying:
            return NamespacePolicy(self.action, self.grace_period, self.allow_keep,
                                   self.keep_alives)
        chosen = self.policies[applying[0][0]]
        return NamespacePolicy(
            chosen.action or self.action, chosen.grace_period or self.grace_period,
            self.allow_keep if chosen.allow_keep is None else chosen.allow_keep,
            self.keep_alives if chosen.keep_alives is None else chosen.keep_alives)

    @property
    def idle_for_seconds(self) -> float:
        return duration_seconds(self.idle_for)

