"""Real tools the tests run, built from their Go modules at pinned versions.

Binaries are cached outside the repository, keyed by version
($GPU_PLATFORM_TOOLS, default ~/.cache/gpu-platform-tools/<tool>-<version>/), so only the first
run builds them. `python -m tests.kit.tools [unit|integration|all]` builds what a suite needs and
prints where each binary is; every version is pinned here or comes from the settings model.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from components.gpu_compaction.settings import CompactionSettings
from components.monitoring.values import CHART_IMAGES
from components.opa_admission.settings import AdmissionSettings
from components.teams.settings import KueueSettings
from tests.kit import harness

TOOLS_DIR = Path(os.environ.get("GPU_PLATFORM_TOOLS",
                                Path.home() / ".cache" / "gpu-platform-tools"))


def opa_version() -> str:
    """The OPA the policy is tested with is the OPA the platform ships (the image tag's
    version)."""
    return AdmissionSettings().opa.tag.removesuffix("-static")


def kubernetes_version() -> str:
    """The control plane the integration suite runs is the example stack's
    `kubernetesVersion`."""
    return harness.example_settings().kubernetes_version


@dataclass(frozen=True)
class GoTool:
    name: str
    module: str
    version: str                  # what `go get` resolves: a release tag or a commit
    package: str
    label: str = ""               # the version in the cache key and messages, if not `version`
    stamp: dict[str, str] = field(default_factory=dict)   # -X ldflags: variable -> value
    # Replace every requirement the module pins at v0.0.0 with this version of it (how
    # k8s.io/kubernetes refers to its staging modules).
    zero_requires_at: str = ""

    @property
    def binary(self) -> Path:
        return TOOLS_DIR / f"{self.name}-{self.label or self.version}" / self.name


def go() -> str:
    """The Go toolchain: builds the tools, and reads the profiles the benchmark takes."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("building the test tools needs the Go toolchain (`go`) on PATH")
    return go


def _say(message: str) -> None:
    print(message, file=sys.__stderr__, flush=True)


class _Build:
    def __init__(self, tool: GoTool, cwd: Path):
        self.tool, self.cwd = tool, cwd
        self.env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOWORK": "off"}

    def run(self, *args: str) -> str:
        result = subprocess.run([go(), *args], cwd=self.cwd, env=self.env, capture_output=True,
                                text=True)
        if result.returncode != 0:
            # `go mod download -json` reports its error in the JSON on stdout.
            detail = (result.stderr.strip() or result.stdout.strip())[-4000:]
            raise RuntimeError(f"building {self.tool.name} {self.tool.label or self.tool.version}"
                        f" failed at `go {' '.join(args)}`:\n{detail}")
        return result.stdout

    def compile(self, *args: str, started: float) -> None:
        """`go build -v`, reporting how many packages have been compiled as it goes."""
        process = subprocess.Popen([go(), *args], cwd=self.cwd, env=self.env, text=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines: list[str] = []
        reported = time.monotonic()
        assert process.stderr is not None, "Popen opens stderr=PIPE"
        for line in process.stderr:
            lines.append(line.rstrip())
            if time.monotonic() - reported >= 30:
                reported = time.monotonic()
                _say(f"  {self.tool.name}: {len(lines)} packages compiled "
                     f"({reported - started:.0f}s)")
        if process.wait() != 0:
            tail = "\n".join(lines[-60:])
            raise RuntimeError(f"building {self.tool.name} {self.tool.label or self.tool.version}"
                               f" failed at `go {' '.join(args)}`:\n{tail}")


def _cached(binary: Path, what: str, build: Callable[[Path, float], None]) -> Path:
    """`binary` from the cache, or built there first: `build(partial, started)` writes it to
    `partial`, a name of this build's own (two runs may build the same tool at once, and the
    second rename then replaces one finished binary with another), renamed to `binary` once
    done, so that a build cut short never looks finished."""
    if binary.exists():
        return binary
    started = time.monotonic()
    _say(f"building {what} (first run only) ...")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.{threading.get_ident()}.partial")
    build(partial, started)
    partial.replace(binary)
    size = binary.stat().st_size / 2**20
    _say(f"built {binary} ({size:.0f} MiB) in {time.monotonic() - started:.0f}s")
    return binary


def go_build(tool: GoTool) -> Path:
    """Build the tool into the cache, unless already built.

    It is built inside a throwaway wrapper module that requires the tool's module and repeats
    its replace directives (`go install module@version` refuses modules that have any), starting
    from the module's own go.sum.
    """
    def build_into(partial: Path, started: float) -> None:
        with tempfile.TemporaryDirectory() as work:
            build = _Build(tool, Path(work))
            build.run("mod", "init", f"gpu-platform.test/{tool.name}")
            info = json.loads(build.run("mod", "download", "-json",
                                        f"{tool.module}@{tool.version}"))
            # The module's own checksums, so that what it requires is verified against them (a
            # module the checksum database does not know, such as Kueue's scheduler-library
            # v0.1.0-alpha1, fails `go get` otherwise). They are as trusted as the module's
            # source: its download was verified against the database.
            own_sums = Path(info["Dir"]) / "go.sum"
            if own_sums.exists():
                shutil.copyfile(own_sums, Path(work) / "go.sum")
            gomod = json.loads(build.run("mod", "edit", "-json", info["GoMod"]))
            replaces = []
            for replace in gomod.get("Replace") or []:
                old, new = replace["Old"], replace["New"]
                source = old["Path"] + (f"@{old['Version']}" if old.get("Version") else "")
                if new.get("Version"):   # a local directory replacement cannot apply outside it
                    replaces.append(f"-replace={source}={new['Path']}@{new['Version']}")
                elif old["Path"] == f"{tool.module}/{new['Path'].removeprefix('./')}":
                    # The module's own submodule, in its tree: the release tags it alike.
                    replaces.append(f"-replace={source}={old['Path']}@{info['Version']}")
            if tool.zero_requires_at:
                replaces += [f"-replace={req['Path']}={req['Path']}@{tool.zero_requires_at}"
                             for req in gomod.get("Require") or [] if req["Version"] == "v0.0.0"]
            if replaces:
                build.run("mod", "edit", *replaces)
            _say(f"  {tool.name}: resolving modules ({time.monotonic() - started:.0f}s)")
            build.run("get", f"{tool.package}@{info['Version']}")
            ldflags = " ".join(f"-X '{name}={value}'" for name, value in tool.stamp.items())
            build.compile("build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(partial),
                          tool.package, started=started)

    return _cached(tool.binary, f"{tool.name} {tool.label or tool.version} from {tool.module}",
                   build_into)


def module_source(module: str, version: str) -> Path:
    """The module's source tree in the module cache, downloaded if need be: for the files a test
    reads from a tool's own module (CRDs, manifests), which are never copied into the
    repository."""
    with tempfile.TemporaryDirectory() as work:
        build = _Build(GoTool(module, module, version, module), Path(work))
        return Path(json.loads(build.run("mod", "download", "-json", f"{module}@{version}"))["Dir"])


class _LocalBuild(_Build):
    """A build of one of the project's own Go programs, in its module directory: its go.sum is
    complete and is never rewritten."""

    def __init__(self, tool: GoTool, cwd: Path):
        super().__init__(tool, cwd)
        self.env["GOFLAGS"] = "-mod=readonly"


def go_build_local(name: str, directory: Path, module: str) -> Path:
    """Build the Go program in `directory` (a module of this repository), built on `module`,
    into the cache, keyed by the version of `module` it requires and a digest of its sources,
    unless already built."""
    sources = sorted([*directory.glob("*.go"), directory / "go.mod", directory / "go.sum"])
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:12]
    requirement = re.search(rf"^(?:require )?\s*({re.escape(module)}) (\S+)$",
                            (directory / "go.mod").read_text(), re.MULTILINE)
    if requirement is None:
        raise RuntimeError(f"{directory}/go.mod does not require {module}")
    tool = GoTool(name, requirement[1], requirement[2], ".",
                  label=f"{requirement[2]}-{digest}")

    def build_into(partial: Path, started: float) -> None:
        _LocalBuild(tool, directory).compile("build", "-v", "-trimpath", "-o", str(partial), ".",
                                             started=started)

    return _cached(tool.binary, f"{name} from "
                   f"{directory.relative_to(harness.ROOT)} ({requirement[1]} "
                   f"{requirement[2]})", build_into)


def pulumi_config() -> Path:
    """Pulumi's own project and stack loaders (tests/kit/pulumi_config): what the engine would hand
    the program of each stack."""
    return go_build_local("pulumi-config", Path(__file__).parent / "pulumi_config",
                          "github.com/pulumi/pulumi/sdk/v3")


def pulumi_package() -> Path:
    """Pulumi's own plugin project loader, schema binder and Node.js SDK generator
    (tests/kit/pulumi_package): the component package as `pulumi package add` meets it."""
    return go_build_local("pulumi-package", Path(__file__).parent / "pulumi_package",
                          "github.com/pulumi/pulumi/pkg/v3")


def typescript() -> Path:
    """The TypeScript compiler with @pulumi/pulumi and Node's types, at the versions of
    tests/kit/typescript/package-lock.json (installed with `npm ci`): its node_modules."""
    source = Path(__file__).parent / "typescript"
    lock = (source / "package-lock.json").read_bytes()
    home = TOOLS_DIR / f"typescript-{hashlib.sha256(lock).hexdigest()[:12]}"
    modules = home / "node_modules"
    if (modules / ".bin" / "tsc").exists():
        return modules
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("the TypeScript check needs Node.js and npm on PATH")
    started = time.monotonic()
    _say(f"installing {source.relative_to(harness.ROOT)} with npm "
         f"(first run only) ...")
    partial = home.with_name(f"{home.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(source / name, partial / name)
    result = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                            cwd=partial, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"npm ci in {partial} failed:\n{result.stderr[-4000:]}")
    shutil.rmtree(home, ignore_errors=True)
    partial.replace(home)
    _say(f"installed {modules} in {time.monotonic() - started:.0f}s")
    return modules


def opa() -> Path:
    module = "github.com/open-policy-agent/opa"
    return go_build(GoTool("opa", module, f"v{opa_version()}", module))


# Prometheus v3.14.0, the version kube-prometheus-stack 88.5.3 deploys, is Go module v0.314.0.
PROMETHEUS_MODULE_VERSION = "v0.314.0"


def promtool() -> Path:
    module = "github.com/prometheus/prometheus"
    return go_build(GoTool("promtool", module, PROMETHEUS_MODULE_VERSION,
                           f"{module}/cmd/promtool"))


def prometheus() -> Path:
    """The Prometheus server of the same module as promtool (the version the stack deploys):
    the integration suite's reclaim runs query it. Built after promtool, it reuses most of
    promtool's packages."""
    module = "github.com/prometheus/prometheus"
    return go_build(GoTool("prometheus", module, PROMETHEUS_MODULE_VERSION,
                           f"{module}/cmd/prometheus"))


# Alertmanager's amtool checks the generated configuration and tests its routes. The newest
# release the module proxy serves; the configuration format it checks is the one the chart's
# Alertmanager reads.
ALERTMANAGER_VERSION = "v0.34.2"


def amtool() -> Path:
    module = "github.com/prometheus/alertmanager"
    return go_build(GoTool("amtool", module, ALERTMANAGER_VERSION, f"{module}/cmd/amtool"))


# etcd v3.6, the line kube-apiserver 1.36 requires (its go.mod pins the v3.6 client).
ETCD_VERSION = "v3.6.16"


def etcd() -> Path:
    module = "go.etcd.io/etcd/server/v3"
    return go_build(GoTool("etcd", module, ETCD_VERSION, module,
                           stamp={"go.etcd.io/etcd/api/v3/version.GitSHA": ETCD_VERSION}))


# The Kubernetes release on which Dynamic Resource Allocation is the standard GPU path (device
# classes that serve extended resources GA): the integration suite runs it beside the example
# stack's release for the DRA path.
DRA_KUBERNETES_VERSION = "1.37.2"


def _kubernetes(component: str, release: str | None = None) -> Path:
    version = f"v{release or kubernetes_version()}"
    major, minor = version.removeprefix("v").split(".")[:2]
    stamp = {}
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp |= {f"{package}.gitVersion": version, f"{package}.gitMajor": major,
                  f"{package}.gitMinor": minor, f"{package}.gitTreeState": "clean"}
    return go_build(GoTool(component, "k8s.io/kubernetes", version,
                           f"k8s.io/kubernetes/cmd/{component}", stamp=stamp,
                           zero_requires_at=f"v0.{minor}.{version.split('.')[2]}"))


def kube_apiserver() -> Path:
    return _kubernetes("kube-apiserver")


def kube_scheduler() -> Path:
    return _kubernetes("kube-scheduler")


def kube_controller_manager() -> Path:
    return _kubernetes("kube-controller-manager")


def dra_control_plane() -> dict[str, Path]:
    """kube-apiserver, kube-scheduler and kube-controller-manager of DRA_KUBERNETES_VERSION."""
    return {component: _kubernetes(component, DRA_KUBERNETES_VERSION)
            for component in ("kube-apiserver", "kube-scheduler", "kube-controller-manager")}


# The descheduler the compaction component deploys (its image tag); its go.mod replaces
# kube-openapi, which go_build repeats in the wrapper module.
def descheduler_version() -> str:
    return CompactionSettings().image.tag


def descheduler() -> Path:
    module = "sigs.k8s.io/descheduler"
    version = descheduler_version()
    return go_build(GoTool("descheduler", module, version, f"{module}/cmd/descheduler",
                           stamp={f"{module}/pkg/version.version": version}))


# The Kueue the platform will deploy: the chart oci://registry.k8s.io/kueue/charts/kueue 0.19.2
# runs this version of its controller-manager.
KUEUE_MODULE = "sigs.k8s.io/kueue"


def kueue_version() -> str:
    """The version of the image the platform deploys (teams.kueue.image)."""
    return KueueSettings().image.tag


def kueue() -> Path:
    version = kueue_version()
    return go_build(GoTool("kueue", KUEUE_MODULE, version, f"{KUEUE_MODULE}/cmd/kueue",
                           stamp={f"{KUEUE_MODULE}/pkg/version.GitVersion": version}))


def kueue_source() -> Path:
    """Kueue's module, whose CRDs and webhook manifests the integration suite applies."""
    return module_source(KUEUE_MODULE, kueue_version())


# The Prometheus Operator of an existing stack, which the integration suite runs.
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"


def prometheus_operator_version() -> str:
    """The version of the operator the pinned kube-prometheus-stack runs (its image tag)."""
    return next(tag for _, repository, tag in CHART_IMAGES
                if repository == "prometheus-operator/prometheus-operator" and tag)


def prometheus_operator() -> Path:
    """Its version stamped in, as its Makefile does: the config-reloader image it puts beside
    Prometheus is tagged with it."""
    version = prometheus_operator_version()
    return go_build(GoTool("prometheus-operator", PROMETHEUS_OPERATOR_MODULE, version,
                           f"{PROMETHEUS_OPERATOR_MODULE}/cmd/operator",
                           stamp={"github.com/prometheus/common/version.Version":
                                  version.removeprefix("v")}))


def prometheus_operator_source() -> Path:
    """The operator's module, whose CRDs the integration suite applies (the chart's are the
    same)."""
    return module_source(PROMETHEUS_OPERATOR_MODULE, prometheus_operator_version())


SUITES = {
    "unit": (pulumi_config, pulumi_package, typescript, opa, promtool, amtool),
    "integration": (pulumi_config, opa, etcd, kube_apiserver, kube_scheduler,
                    kube_controller_manager, dra_control_plane, descheduler, kueue,
                    prometheus_operator, prometheus),
}


# How many tools build at once: one's module download overlaps another's compile, and Go's
# compiler uses every core for each (GPU_PLATFORM_TOOL_BUILDS sets it).
CONCURRENT_BUILDS = int(os.environ.get("GPU_PLATFORM_TOOL_BUILDS", "2"))


def build(builds: list[Callable[[], object]]) -> list[str]:
    """Run `builds` (tools of this module), CONCURRENT_BUILDS at a time; the failures'
    messages."""
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=CONCURRENT_BUILDS) as pool:
        for future in [pool.submit(build) for build in dict.fromkeys(builds)]:
            try:
                future.result()
            except RuntimeError as error:
                failed.append(str(error))
    return failed


def main(suites: list[str]) -> None:
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        sys.exit(f"tests/kit/tools.py: unknown suite {unknown}; allowed: {sorted(SUITES)}")
    if failed := build([b for suite in suites for b in SUITES[suite]]):
        sys.exit("tests/kit/tools.py: " + "\n".join(failed))


if __name__ == "__main__":
    # The test commands build the tools before pytest starts, so that the build's progress is
    # shown.
    main(sys.argv[1:] or ["unit"])
