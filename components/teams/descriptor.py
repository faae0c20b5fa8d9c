"""The teams' package, as the platform assembles it: its component, and Kueue's chart and image
when the stack installs Kueue."""

from ..base.charts import chart_deployable
from ..base.descriptor import Deployable, Descriptor
from ..base.facts import KUEUE_CHART
from .component import Teams
from .inputs import TeamsInputs
from .mixin import mixin

_BROUGHT_BY = ("teams.enabled",)


def _installs(inputs: TeamsInputs) -> bool:
    return inputs.teams.enabled and inputs.teams.kueue.installs_chart


def images(inputs: TeamsInputs) -> list[Deployable]:
    return [Deployable(inputs.image(inputs.teams.kueue.image), _BROUGHT_BY, _installs(inputs))]


def charts(inputs: TeamsInputs) -> list[Deployable]:
    return [chart_deployable(KUEUE_CHART, inputs.teams.kueue, _BROUGHT_BY, _installs(inputs))]


DESCRIPTOR = Descriptor(Teams, images=images, charts=charts, mixin=mixin)
