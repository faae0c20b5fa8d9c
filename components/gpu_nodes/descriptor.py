"""The GPU nodes' package, as the platform assembles it: its component (it deploys nothing)."""

from ..base.descriptor import Descriptor
from .component import GpuNodes

DESCRIPTOR = Descriptor(GpuNodes)
