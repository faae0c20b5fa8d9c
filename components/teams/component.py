"""Teams: Kueue, and a queue with a GPU quota for each team. Kueue admits a team's workloads
against its quota (suspending Jobs and gating pods until then), lends idle quota to the other
teams of the cohort and takes it back when needed, shares what is left by the teams' weights,
and admits a workload all or nothing. It never sets `schedulerName`: the binpack scheduler still
places every GPU pod it admits. docs/concepts/teams.md explains the choices.

The ResourceFlavors are declared first after the release, and Kueue's webhooks decide them: if
the API server cannot reach Kueue, `pulumi up` stops there, naming the webhook, before any queue
or team namespace depends on it.
"""

import pulumi

from ..base import charts, manifests
from ..base.component import Component, declare, declare_all
from ..base.facts import KUEUE_CHART
from ..base.validation import Subject
from .inputs import TeamsInputs
from .kueue import chart_values, check_chart_values
from .queues import (
    COMPONENT,
    cluster_queue,
    local_queue,
    pod_flavor,
    resource_flavor,
    team_namespace,
    topologies,
    workload_priority_classes,
)
from .zz_generated_args import TeamsArgs


class Teams(Component[TeamsInputs]):
    """Kueue (or, with `kueue.mode: existing`, the cluster's own) and the teams' queues: a
    ClusterQueue per team with its GPU quota in one cohort, a LocalQueue in each of its
    namespaces, the GPU flavors and the workload priorities."""

    namespace: str
    "Kueue's namespace."
    team_namespaces: dict[str, str]
    "Each team namespace, with its team."
    kueue_user: str
    "Kueue's identity in its requests to the API server (its ServiceAccount's user name)."

    def __init__(self, name: str, args: TeamsArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _check(self, inputs: TeamsInputs, subject: Subject) -> None:
        check_chart_values(inputs, subject)

    def _declare(self, name: str, inputs: TeamsInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        teams, kueue = inputs.teams, inputs.teams.kueue
        # With the cluster's own Kueue (`mode: existing`), only the teams' objects go into it.
        kueue_ready = [self._install_kueue(inputs)] if kueue.installs_chart else []
        # Kueue's webhooks decide these first: `pulumi up` stops here if they cannot be
        # reached, before anything depends on Kueue.
        # The flavors name the Topologies: Kueue counts their nodes by its levels once they
        # exist.
        topology_ready = [declare(t, self, kueue_ready) for t in topologies(inputs)]
        flavors = [declare(resource_flavor(inputs, f.name, f.node_labels), self,
                           kueue_ready + topology_ready)
                   for f in teams.flavors]
        flavors.append(declare(pod_flavor(inputs), self, kueue_ready + topology_ready))
        classes = declare_all(workload_priority_classes(inputs), self, flavors)
        for team in teams.teams:
            queue = declare(cluster_queue(inputs, team), self, flavors)
            for team_ns in team.namespaces:
                # Left in place when the team or the stack goes: it holds the team's work.
                created = declare(team_namespace(team, team_ns), self, retain=True)
                declare(local_queue(team, team_ns), self,
                        [queue, created, *classes.values()])
        self.namespace = kueue.namespace
        self.team_namespaces = teams.team_namespaces
        self.kueue_user = kueue.controller_user
        self.register_outputs({"namespace": self.namespace,
                               "teamNamespaces": self.team_namespaces,
                               "kueueUser": self.kueue_user})

    def _install_kueue(self, inputs: TeamsInputs) -> pulumi.Resource:
        """Kueue's namespace, its critical-pods quota and its release."""
        kueue = inputs.teams.kueue
        namespace = declare(manifests.namespace(kueue.namespace, "restricted", COMPONENT), self)
        # The quota first: where critical-priority pods need one, they are refused without it.
        quota = declare(manifests.critical_pods_quota(kueue.namespace, COMPONENT,
                                                      manifests.replicas_quota(kueue.replicas)),
                        self, [namespace])
        return charts.release(
            kueue.release_name, chart=KUEUE_CHART, version=kueue.chart_version,
            repository=kueue.repository, namespace=kueue.namespace, values=chart_values(inputs),
            parent=self, protection=kueue.protection, chart_path=kueue.chart_path,
            depends_on=[namespace, quota])
