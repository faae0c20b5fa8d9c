"""Real tools the tests run, built from their Go modules at pinned versions.

Binaries are cached outside the repository, keyed by version
($GPU_PLATFORM_TOOLS, default ~/.cache/gpu-platform-tools/<tool>-<version>/), so only the first
run builds them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from components.settings import AdmissionSettings  # noqa: E402

TOOLS_DIR = Path(os.environ.get("GPU_PLATFORM_TOOLS",
                                Path.home() / ".cache" / "gpu-platform-tools"))


def opa_version() -> str:
    """The OPA the policy is tested with is the OPA the platform ships (the image tag's
    version)."""
    return AdmissionSettings().opa.tag.removesuffix("-static")


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("building the test tools needs the Go toolchain (`go`) on PATH")
    return go


def _run(tool: str, version: str, args: list[str], cwd: Path, env: dict) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building {tool} {version} failed at `{' '.join(args[1:])}`:\n"
                           f"{result.stderr[-4000:]}")
    return result.stdout


def go_build(tool: str, module: str, version: str, package: str) -> Path:
    """Build `package` of `module` at `version` into the tool cache, unless already built.

    It is built inside a throwaway wrapper module that requires the tool's module and repeats
    its replace directives (`go install module@version` refuses modules that have any).
    """
    target = TOOLS_DIR / f"{tool}-{version}"
    binary = target / tool
    if binary.exists():
        return binary
    go = _go()
    print(f"building {tool} {version} from {module} (first run only) ...", file=sys.__stderr__,
          flush=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    with tempfile.TemporaryDirectory() as work:
        cwd = Path(work)
        _run(tool, version, [go, "mod", "init", f"gpu-platform.test/{tool}"], cwd, env)
        info = json.loads(_run(tool, version, [go, "mod", "download", "-json",
                                               f"{module}@{version}"], cwd, env))
        gomod = _run(tool, version, [go, "mod", "edit", "-json", info["GoMod"]], cwd, env)
        for replace in json.loads(gomod).get("Replace") or []:
            old, new = replace["Old"], replace["New"]
            if not new.get("Version"):
                continue      # a local directory replacement cannot apply outside the module
            source = old["Path"] + (f"@{old['Version']}" if old.get("Version") else "")
            _run(tool, version, [go, "mod", "edit",
                                 f"-replace={source}={new['Path']}@{new['Version']}"], cwd, env)
        _run(tool, version, [go, "get", f"{package}@{version}"], cwd, env)
        target.mkdir(parents=True, exist_ok=True)
        _run(tool, version, [go, "build", "-trimpath", "-o", str(binary), package], cwd, env)
    print(f"built {binary}", file=sys.__stderr__, flush=True)
    return binary


def opa() -> Path:
    module = "github.com/open-policy-agent/opa"
    return go_build("opa", module, f"v{opa_version()}", module)


# Prometheus v3.14.0, the version kube-prometheus-stack 88.5.3 deploys, is Go module v0.314.0.
PROMETHEUS_MODULE_VERSION = "v0.314.0"


def promtool() -> Path:
    module = "github.com/prometheus/prometheus"
    return go_build("promtool", module, PROMETHEUS_MODULE_VERSION, f"{module}/cmd/promtool")


if __name__ == "__main__":
    # `tests/run` builds the tools before pytest starts, so that the build's progress is shown.
    try:
        opa()
        promtool()
    except RuntimeError as error:
        sys.exit(f"tests/run: {error}")
