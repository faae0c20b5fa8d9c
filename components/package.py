"""The components as a Pulumi package: what `provider/` serves to programs in any language
(`pulumi package add`), and the release it is. COMPONENTS is the one registry of components:
each one's args are generated from the inputs it declares (`Component[<inputs>]`)."""

from .base.component import PACKAGE
from .binpack_scheduler.component import BinpackScheduler
from .gpu_compaction.component import GpuCompaction
from .gpu_nodes.component import GpuNodes
from .gpu_operator.component import GpuOperator
from .gpu_reclaim.component import GpuReclaim
from .monitoring.component import Monitoring
from .opa_admission.component import OpaAdmission
from .platform.component import GpuPlatform
from .teams.component import Teams

# The release: `v<VERSION>` is the git tag that pins it (`pulumi package add <repo>@v<VERSION>`),
# and CHANGELOG.md's newest release heading (docs/developers/releasing.md).
VERSION = "0.1.0"

COMPONENTS = [GpuPlatform, GpuNodes, GpuOperator, BinpackScheduler, OpaAdmission, Monitoring,
              GpuCompaction, Teams, GpuReclaim]

__all__ = ["COMPONENTS", "PACKAGE", "VERSION"]
