"""The GPU nodes' taints and labels."""

from .component import FIELD_MANAGER, GpuNodes, node_patch
from .inputs import GpuNodesInputs

__all__ = ["FIELD_MANAGER", "GpuNodes", "GpuNodesInputs", "node_patch"]
