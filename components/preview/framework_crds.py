"""In a preview, with teams on: which of the frameworks' kinds the cluster serves, against
`teams.frameworks`. The platform installs none of their CRDs or controllers, so it says which
listed framework the cluster lacks (Kueue sets up its integration once the CRD is served) and
which served one the teams' queues leave out (its workloads are then not admitted whole)."""

from __future__ import annotations

import pulumi

from ..base.facts import FRAMEWORK_INTEGRATIONS
from ..base.model import Read
from ..base.validation import CONFIG_NAMESPACE
from ..platform.settings import StackSettings
from .cluster import ClusterError, ClusterReader, ClusterUnreachable, NotAllowed

# The frameworks' CRDs, by name (`<resource>.<group>`), each a read of the preview.
CRD_READS = {f"{f.resource}.{f.group}": Read("apiextensions.k8s.io/v1",
                                             "customresourcedefinitions",
                                             name=f"{f.resource}.{f.group}")
             for f in FRAMEWORK_INTEGRATIONS}


def framework_reads(settings: StackSettings) -> list[Read]:
    return list(CRD_READS.values()) if settings.teams.enabled else []


def framework_notes(settings: StackSettings, served: set[str]) -> tuple[list[str], list[str]]:
    """(infos, warnings) for the CRDs the cluster serves (by name, `<resource>.<group>`)."""
    listed = settings.teams.frameworks
    infos, warnings = [], []
    for framework in FRAMEWORK_INTEGRATIONS:
        crd = f"{framework.resource}.{framework.group}"
        if framework.name in listed and crd not in served:
            infos.append(
                f"teams.frameworks: {framework.name}: the cluster serves no {framework.kind} "
                f"(CRD {crd}); the platform does not install it. Install {framework.crds} (Kueue "
                f"v0.19.2 is built against it) for teams to run {framework.kind}s: Kueue sets "
                f"up the integration once the CRD is served")
        elif framework.name not in listed and crd in served:
            warnings.append(
                f"teams.frameworks leaves out {framework.name}, but the cluster serves "
                f"{framework.kind}s (CRD {crd}): in a team namespace Kueue will not admit one "
                f"whole, and the GPU pods its controller makes are refused for want of Kueue's "
                f"admission; add {framework.name} to teams.frameworks")
    return infos, warnings


def report_framework_crds(settings: StackSettings) -> None:
    """Logs framework_notes for the stack's cluster; says so where it may not read the CRDs."""
    if not settings.teams.enabled:
        return
    try:
        with ClusterReader(settings.cluster) as reader:
            served = {name for name, read in CRD_READS.items()
                      if reader.get(read.path()) is not None}
    except NotAllowed as refused:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: not checked: which of teams.frameworks the cluster "
                        f"serves ({refused}); the preview identity needs to get "
                        f"customresourcedefinitions (apiextensions.k8s.io), as the "
                        f"stack's previewAccess grants")
        return
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    infos, warnings = framework_notes(settings, served)
    for info in infos:
        pulumi.log.info(f"{CONFIG_NAMESPACE}: {info}")
    for warning in warnings:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: {warning}")
