"""The binpack scheduler: a second kube-scheduler whose scoring prefers nodes that are already
busy, so that GPU pods fill nodes up instead of leaving a few free GPUs stranded on every node."""

import pulumi

from ..base.component import Component, declare, declare_all
from .inputs import BinpackSchedulerInputs
from .manifests import scheduler_objects
from .zz_generated_args import BinpackSchedulerArgs


class BinpackScheduler(Component[BinpackSchedulerInputs]):
    """The binpack scheduler: a second kube-scheduler whose scoring packs GPU pods onto busy
    nodes, its RBAC, configuration and Deployment, and the PriorityClass of preemptible GPU
    pods."""

    scheduler_name: str
    "The schedulerName GPU pods name to be placed by it."
    namespace: str
    "Its namespace."
    preemptible_class: str | None
    "The PriorityClass of preemptible GPU pods, when one is declared."

    def __init__(self, name: str, args: BinpackSchedulerArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _declare(self, name: str, inputs: BinpackSchedulerInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        objects = scheduler_objects(inputs)
        namespace = declare(objects[0], self)
        # The quota first: where critical-priority pods need one, they are refused without it.
        quota = declare(objects[1], self, depends_on=[namespace])
        self.resources = declare_all(objects[2:], self, depends_on=[namespace, quota])
        sched = inputs.scheduler
        self.scheduler_name = sched.name
        self.namespace = sched.namespace
        self.preemptible_class = (sched.preemptible_class.name
                                  if sched.preemptible_class.enabled else None)
        self.register_outputs({"schedulerName": self.scheduler_name, "namespace": self.namespace,
                               "preemptibleClass": self.preemptible_class})
