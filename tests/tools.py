"""Real tools the tests run, built from their Go modules at pinned versions.

Binaries are cached outside the repository, keyed by version
($GPU_PLATFORM_TOOLS, default ~/.cache/gpu-platform-tools/<tool>-<version>/), so only the first
run builds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from components.settings import AdmissionSettings  # noqa: E402

TOOLS_DIR = Path(os.environ.get("GPU_PLATFORM_TOOLS",
                                Path.home() / ".cache" / "gpu-platform-tools"))


def opa_version() -> str:
    """The OPA the policy is tested with is the OPA the platform ships (the image tag's
    version)."""
    return AdmissionSettings().opa.tag.removesuffix("-static")


def go_install(tool: str, module: str, version: str) -> Path:
    """`go install module@version` into the tool cache, unless already built."""
    target = TOOLS_DIR / f"{tool}-{version}"
    binary = target / tool
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"building {tool} {version} needs the Go toolchain (`go`) on PATH")
    target.mkdir(parents=True, exist_ok=True)
    print(f"building {tool} {version} from {module} (first run only) ...", file=sys.__stderr__,
          flush=True)
    env = {**os.environ, "GOBIN": str(target), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    result = subprocess.run([go, "install", f"{module}@{version}"], env=env,
                            capture_output=True, text=True)
    if result.returncode != 0 or not binary.exists():
        raise RuntimeError(f"building {tool} {version} failed:\n{result.stderr[-4000:]}")
    print(f"built {binary}", file=sys.__stderr__, flush=True)
    return binary


def opa() -> Path:
    return go_install("opa", "github.com/open-policy-agent/opa", f"v{opa_version()}")


if __name__ == "__main__":
    # `tests/run` builds the tools before pytest starts, so that the build's progress is shown.
    try:
        opa()
    except RuntimeError as error:
        sys.exit(f"tests/run: {error}")
