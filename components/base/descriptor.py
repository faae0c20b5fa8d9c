"""A component package's descriptor: what the package contributes beyond its component,
declared once in the package (its `descriptor.py`) and read by whatever assembles it (the
package Pulumi serves, the air-gapped lists, the docs), so none of those keeps a list of its
own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from .component import Component, InputsT
from .mixin import AlertSettings, Mixin


@dataclass(frozen=True)
class Deployable:
    """An image or a Helm chart the platform can deploy: its reference, the settings that bring
    it (all of them; none: every stack), and whether the stack's settings do."""

    reference: str
    brought_by: tuple[str, ...]
    deployed: bool


def _nothing(_: Any) -> list[Deployable]:
    return []


@dataclass(frozen=True)
class Descriptor(Generic[InputsT]):
    """A component package: its component; the images and charts it can deploy, from its
    inputs (whichever settings bring them: the air-gapped lists show them all); and its mixin,
    the alerts and scrapes Monitoring collects, from its inputs, the stack's alert thresholds
    and, once declared, its component."""

    component: type[Component[InputsT]]
    images: Callable[[InputsT], Sequence[Deployable]] = field(default=_nothing)
    charts: Callable[[InputsT], Sequence[Deployable]] = field(default=_nothing)
    mixin: Callable[[InputsT, AlertSettings, Any], Mixin] | None = None

    @property
    def package(self) -> str:
        """The package under components/ that holds it."""
        return self.component.__module__.split(".")[1]

    def accepts(self, inputs: Any) -> bool:
        """Whether `inputs` are this component's."""
        return isinstance(inputs, self.component._inputs_model)
