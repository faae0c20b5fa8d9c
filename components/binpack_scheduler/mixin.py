"""The binpack scheduler's monitoring: an alert when it is down (then new GPU pods, which must
use it, wait), and the scrape of its secure metrics port."""

from ..base import manifests
from ..base.facts import SCHEDULER_COMPONENT, SCHEDULER_METRICS_PORT_NAME
from ..base.mixin import (
    AlertSettings,
    Mixin,
    Scrape,
    alert,
    deployment_unavailable,
    secure_endpoint,
)
from .inputs import BinpackSchedulerInputs


def mixin(inputs: BinpackSchedulerInputs, alerts: AlertSettings, _component: object = None
          ) -> Mixin:
    sched = inputs.scheduler
    return Mixin(
        alerts=[alert("BinpackSchedulerUnavailable",
                      deployment_unavailable(sched.namespace, sched.name),
                      alerts.unavailable_for, "critical", "The GPU binpack scheduler is down",
                      f"No pod of {sched.namespace}/{sched.name} has been available for "
                      f"{alerts.unavailable_for}: new GPU pods, which must use it, are not "
                      "scheduled.")],
        scrapes=[Scrape(kind="ServiceMonitor", name=sched.name, namespace=sched.namespace,
                        selector=manifests.selector_labels(sched.name, SCHEDULER_COMPONENT),
                        endpoint=secure_endpoint(SCHEDULER_METRICS_PORT_NAME))],
        critical_pods_namespaces=[sched.namespace])
