"""The gpu-platform component provider: serves the components to Pulumi programs in any language.
`pulumi package add` runs it to read their schema and generate an SDK; `pulumi up` runs it to
declare them. The components are the program's own (components/, one directory up)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi.provider.experimental import component_provider_host  # noqa: E402

from components.package import COMPONENTS, PACKAGE, VERSION  # noqa: E402

if __name__ == "__main__":
    component_provider_host(COMPONENTS, PACKAGE, version=VERSION)
