"""Idle GPU reclaim: a CronJob that asks the monitoring stack's Prometheus which GPU pods have
been idle, reports them to their owners (events on the pod and its controller) and, with
`action: evict`, evicts those still idle after a grace period, through the eviction API so that
PodDisruptionBudgets hold. Opt-in per namespace or team; its rights are a Role in each opted-in
namespace and nothing cluster-wide."""

import pulumi

from ..base.component import Component, declare, declare_all
from ..base.validation import Invalid, SettingsError, Subject, describe_invalid
from .inputs import GpuReclaimInputs
from .manifests import reclaim_objects
from .zz_generated_args import GpuReclaimArgs


class GpuReclaim(Component[GpuReclaimInputs]):
    """Idle GPU reclaim: a CronJob that reports idle GPU pods of opted-in namespaces and, where
    the stack says so, evicts them after a grace period, with a Role in each of those
    namespaces."""

    namespace: str
    "The CronJob's namespace."
    schedule: str
    "When a run starts (cron)."
    action: str
    "What a run does with an idle pod by default: `report` or `evict` (`reclaim.action`)."
    actions: dict[str, str]
    "What a run does in each namespace it applies to: its policy's action, else `action`."
    namespaces: list[str]
    "The namespaces reclaim applies to."

    def __init__(self, name: str, args: GpuReclaimArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _check(self, inputs: GpuReclaimInputs, subject: Subject) -> None:
        # Declared alone, `enabled` is not its switch: a reclaim that applies nowhere is refused
        # here as the stack's settings refuse it.
        if not inputs.opted_in_namespaces:
            raise SettingsError([describe_invalid(
                subject.root, ("reclaim", "namespaces"),
                Invalid("reclaim applies to no namespace that is not exempt",
                        "at least one namespace in reclaim.namespaces, or a team in "
                        "reclaim.teams with teamNamespaces, outside exemptNamespaces"),
                inputs.reclaim.namespaces)], subject)

    def _declare(self, name: str, inputs: GpuReclaimInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        objects = reclaim_objects(inputs)
        namespace = declare(objects[0], self)
        self.resources = declare_all(objects[1:], self, depends_on=[namespace])
        self.namespace = inputs.reclaim.namespace
        self.schedule = inputs.reclaim.schedule
        self.action = inputs.reclaim.action
        self.actions = {namespace: policy.action
                        for namespace, policy in inputs.policies.items()}
        self.namespaces = inputs.opted_in_namespaces
        self.register_outputs({"namespace": self.namespace, "schedule": self.schedule,
                               "action": self.action, "actions": self.actions,
                               "namespaces": self.namespaces})
