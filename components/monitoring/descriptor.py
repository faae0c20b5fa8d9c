"""Monitoring's package, as the platform assembles it: its component, and kube-prometheus-stack
and its images when the stack installs it."""

from ..base.charts import chart_deployable
from ..base.descriptor import Deployable, Descriptor
from .component import Monitoring
from .inputs import MonitoringInputs
from .values import CHART, chart_images

_INSTALLS = ("monitoring.stack: install",)


def images(inputs: MonitoringInputs) -> list[Deployable]:
    installs = inputs.monitoring.stack == "install"
    return [Deployable(image, _INSTALLS, installs) for image in chart_images(inputs)]


def charts(inputs: MonitoringInputs) -> list[Deployable]:
    return [chart_deployable(CHART, inputs.monitoring, _INSTALLS,
                             inputs.monitoring.stack == "install")]


DESCRIPTOR = Descriptor(Monitoring, images=images, charts=charts)
