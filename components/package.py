"""The components as a Pulumi package: what `provider/` serves to programs in any language
(`pulumi package add`), and the release it is."""

from .binpack_scheduler import BinpackScheduler
from .gpu_compaction import GpuCompaction
from .gpu_nodes import GpuNodes
from .gpu_operator import GpuOperator
from .kube import PACKAGE
from .monitoring import Monitoring
from .opa_admission import OpaAdmission
from .platform import GpuPlatform
from .teams import Teams

# The release: `v<VERSION>` is the git tag that pins it (`pulumi package add <repo>@v<VERSION>`),
# and CHANGELOG.md's newest release heading (docs/developers/releasing.md).
VERSION = "0.1.0"

COMPONENTS = [GpuPlatform, GpuNodes, GpuOperator, BinpackScheduler, OpaAdmission, Monitoring,
              GpuCompaction, Teams]

__all__ = ["COMPONENTS", "PACKAGE", "VERSION"]
