"""In a preview: the stacks the platform joins instead of installing (`monitoring.stack:
existing`, `teams.kueue.mode: existing`), read on the cluster as the context's user, so that
`pulumi preview` says what would not work before anything is declared."""

from __future__ import annotations

import pulumi

from ..base.model import Findings
from ..base.validation import CONFIG_NAMESPACE
from ..monitoring import existing_stack
from ..platform.settings import StackSettings
from ..platform.wiring import component_inputs
from .cluster import ClusterError, ClusterReader, ClusterUnreachable, NotAllowed
from .existing_kueue import existing_kueue_findings

# What the preview identity needs to read an existing monitoring stack
# (the stack's previewAccess output grants it).
MONITORING_READS = ("get prometheuses (monitoring.coreos.com) and namespaces, list "
                    "deployments (apps)")


class ExistingStackError(Exception):
    """What the platform declares would not work with a stack the cluster runs: raised before
    anything is declared."""

    def __init__(self, problems: list[str]):
        super().__init__("the stack's settings do not fit what the cluster runs (nothing was "
                         "deployed):\n" + "\n".join(f"  - {p}" for p in problems))


def monitoring_findings(settings: StackSettings) -> Findings:
    """What the preview says of the cluster's monitoring stack, if the stack joins it."""
    if settings.monitoring.stack != "existing":
        return Findings()
    try:
        with ClusterReader(settings.cluster) as reader:
            return existing_stack.survey(reader, component_inputs(settings).monitoring)
    except NotAllowed as refused:
        return Findings(warnings=[
            f"monitoring.stack: existing: whether the existing Prometheus selects the "
            f"platform's monitors and rules was not checked ({refused}); the preview identity "
            f"needs to {MONITORING_READS}"])
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None


def check_existing_stacks(settings: StackSettings) -> None:
    """Refuses (ExistingStackError) what would not work beside the existing stacks the settings
    name, all at once, and warns of what would work less; says what it was not allowed to
    read."""
    found = monitoring_findings(settings).add(existing_kueue_findings(settings))
    for warning in found.warnings:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: {warning}")
    if found.problems:
        raise ExistingStackError(found.problems)
