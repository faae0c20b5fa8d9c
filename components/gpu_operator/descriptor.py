"""The GPU Operator's package, as the platform assembles it: its component, the chart on every
stack and the chart's images, each with the switch or GPU path that runs it."""

from ..base.charts import chart_deployable
from ..base.descriptor import Deployable, Descriptor
from .component import GpuOperator
from .inputs import GpuOperatorInputs
from .mixin import mixin
from .values import CHART, CHART_IMAGES, ChartImage


def _brought_by(image: ChartImage) -> tuple[str, ...]:
    """The settings that make the chart run one of its images."""
    return tuple(option for option in (
        image.switch and f"gpuOperator.{image.switch}.enabled",
        image.gpu_path and f"gpuOperator.gpuPath: {image.gpu_path}") if option)


def images(inputs: GpuOperatorInputs) -> list[Deployable]:
    return [Deployable(image.ref(inputs), _brought_by(image), image.deployed(inputs.gpu_operator))
            for image in CHART_IMAGES]


def charts(inputs: GpuOperatorInputs) -> list[Deployable]:
    return [chart_deployable(CHART, inputs.gpu_operator, (), True)]


DESCRIPTOR = Descriptor(GpuOperator, images=images, charts=charts, mixin=mixin)
