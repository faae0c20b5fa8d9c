"""What the GpuNodes component takes."""

from __future__ import annotations

from pydantic import Field

from ..base.model import Model
from .settings import GpuNodesSettings


class GpuNodesInputs(Model):
    """The GPU nodes to taint and label."""

    gpu_nodes: GpuNodesSettings = Field(description="The GPU nodes and their taints and labels.")
