"""What the GpuReclaim component takes."""

from __future__ import annotations

from pydantic import Field

from ..base.facts import DEFAULT_ACTIVE_THRESHOLD
from ..base.model import PulledImages, section
from ..base.validation import NamespaceNames
from .settings import NamespacePolicy, ReclaimSettings


class GpuReclaimInputs(PulledImages):
    """Idle GPU reclaim, with the Prometheus it reads, the query that says which pods are idle,
    and the namespaces it must never touch."""

    reclaim: ReclaimSettings = section(ReclaimSettings, switched=True)
    prometheus_url: str = Field(
        description="The Prometheus HTTP API the runs query, as the CronJob's pod reaches it "
                    "(`reclaim.prometheusUrl`, else the Monitoring component's Prometheus).")
    idle_query: str = Field(
        description="The PromQL query whose answer is the idle pods, one series per pod with "
                    "`namespace` and `pod` (the usage rules' definition of idle, over "
                    "`reclaim.idleFor`).")
    idle_below: float = Field(
        default=DEFAULT_ACTIVE_THRESHOLD,
        description="The engine activity (a fraction) at or below which a GPU is idle, "
                    "`monitoring.usage.activeThreshold`: what the reports say.")
    team_namespaces: dict[str, str] = Field(
        default_factory=dict,
        description="Each team namespace, with its team (the Teams component's "
                    "`teamNamespaces` output): `reclaim.teams` applies to these.")
    workload_owners: dict[str, str] = Field(
        default_factory=dict,
        description="The kinds Kueue admits in team namespaces (`group/Kind`, the core group "
                    "empty), with their API resources: a run follows a team pod's controllers "
                    "through these to the Workload that holds it, and may get them there.")
    exempt_namespaces: NamespaceNames = Field(
        default_factory=list,
        description="Namespaces reclaim never touches: admission's exempt namespaces and the "
                    "platform's own.")

    @property
    def policies(self) -> dict[str, NamespacePolicy]:
        """What reclaim does in each namespace it applies to: those named and those of the teams
        named, less the exempt ones and those whose policy is `off`."""
        reclaim = self.reclaim
        named = set(reclaim.namespaces) | {namespace for namespace, team in
                                           self.team_namespaces.items()
                                           if team in reclaim.teams}
        chosen = {namespace: reclaim.policy_of(namespace, self.team_namespaces.get(namespace))
                  for namespace in sorted(named - set(self.exempt_namespaces))}
        return {namespace: policy for namespace, policy in chosen.items()
                if policy.action != "off"}

    @property
    def opted_in_namespaces(self) -> list[str]:
        """The namespaces reclaim acts in (see `policies`)."""
        return list(self.policies)
