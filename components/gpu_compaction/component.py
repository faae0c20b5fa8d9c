"""GPU compaction: the Kubernetes descheduler's HighNodeUtilization on GPU nodes. Opted-in pods
on lightly used GPU nodes are evicted, and the binpack scheduler places their replacements on
busier nodes, so that whole nodes come free for the jobs that need one.

Each run is a CronJob pod that the binpack scheduler itself places: while that scheduler is
unavailable the run stays pending and evicts nothing, so no pod is ever evicted onto a scheduler
that cannot place it again. Evictions go through the eviction API, so PodDisruptionBudgets hold.
"""

import pulumi

from ..base.component import Component, declare, declare_all
from .inputs import GpuCompactionInputs
from .manifests import compaction_objects
from .zz_generated_args import GpuCompactionArgs


class GpuCompaction(Component[GpuCompactionInputs]):
    """Compaction: a CronJob that runs the descheduler's HighNodeUtilization on GPU nodes, placed
    by the binpack scheduler, with its RBAC and policy."""

    namespace: str
    "The CronJob's namespace."
    schedule: str
    "When a run starts (cron)."

    def __init__(self, name: str, args: GpuCompactionArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _declare(self, name: str, inputs: GpuCompactionInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        objects = compaction_objects(inputs)
        namespace = declare(objects[0], self)
        self.resources = declare_all(objects[1:], self, depends_on=[namespace])
        self.namespace = inputs.compaction.namespace
        self.schedule = inputs.compaction.schedule
        self.register_outputs({"namespace": self.namespace, "schedule": self.schedule})
