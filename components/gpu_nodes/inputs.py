"""What the GpuNodes component takes."""

from __future__ import annotations

from ..base.model import Model, section
from .settings import GpuNodesSettings


class GpuNodesInputs(Model):
    """The GPU nodes to taint and label."""

    gpu_nodes: GpuNodesSettings = section(GpuNodesSettings, required=True)
