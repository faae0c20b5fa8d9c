"""What the Teams component takes."""

from __future__ import annotations

from pydantic import Field

from ..base.model import GpuNodeFacts, PulledImages, gpu_nodes_field, section
from .settings import TeamsSettings


class TeamsInputs(PulledImages):
    """Kueue and the teams' queues, with the GPU nodes' taints their flavors tolerate."""

    teams: TeamsSettings = section(TeamsSettings, required=True, switched=True)
    gpu_nodes: GpuNodeFacts = gpu_nodes_field()
    device_classes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="On the DRA path, each GPU resource and the DeviceClasses whose claims "
                    "hold it (the GpuOperator component's `servedResources` output): Kueue "
                    "counts a claim on one against the resource's quota.")
