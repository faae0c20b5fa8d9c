"""The components as a Pulumi package: what `provider/` serves to programs in any language
(`pulumi package add`), and the release it is. COMPONENTS: the platform and each registered
package's component (components/registry.py); each one's args are generated from the inputs it
declares (`Component[<inputs>]`)."""

from .base.component import PACKAGE
from .platform.component import GpuPlatform
from .registry import DESCRIPTORS

# The release: `v<VERSION>` is the git tag that pins it (`pulumi package add <repo>@v<VERSION>`),
# and CHANGELOG.md's newest release heading (docs/developers/releasing.md).
VERSION = "0.1.0"

COMPONENTS = [GpuPlatform, *(descriptor.component for descriptor in DESCRIPTORS)]

__all__ = ["COMPONENTS", "PACKAGE", "VERSION"]
