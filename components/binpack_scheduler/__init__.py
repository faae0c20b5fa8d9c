"""The binpack scheduler: a second kube-scheduler that packs GPU pods onto busy nodes, and
the PriorityClass of preemptible GPU pods."""

from .component import BinpackScheduler
from .inputs import BinpackSchedulerInputs
from .manifests import (
    CONFIG_DIR,
    CONFIG_FILE,
    deployment,
    preemptible_priority_class,
    rbac_objects,
    scheduler_configuration,
    scheduler_objects,
)

__all__ = ["BinpackScheduler", "BinpackSchedulerInputs", "CONFIG_DIR", "CONFIG_FILE", "deployment",
           "preemptible_priority_class", "rbac_objects", "scheduler_configuration",
           "scheduler_objects"]
