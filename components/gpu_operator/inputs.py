"""What the GpuOperator component takes."""

from __future__ import annotations

from pydantic import Field

from ..base.model import GpuNodeFacts, PulledImages, gpu_nodes_field, section
from .settings import GpuOperatorSettings


class GpuOperatorInputs(PulledImages):
    """NVIDIA's GPU Operator, with the GPU nodes' taints its operands tolerate and the GPU
    nodes' names that size its namespace's quota."""

    gpu_operator: GpuOperatorSettings = section(GpuOperatorSettings)
    gpu_nodes: GpuNodeFacts = gpu_nodes_field()
    secret_values: bool = Field(
        default=False,
        description="Store the release's values as a secret: set it when "
                    "`gpuOperator.extraValues` holds a credential.")
