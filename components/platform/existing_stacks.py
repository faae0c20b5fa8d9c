"""In a preview: the stacks the platform joins instead of installing (`monitoring.stack:
existing`), read on the cluster as the context's user, so that `pulumi preview` says what
would not work before anything is declared."""

from __future__ import annotations

import pulumi

from ..base.validation import CONFIG_NAMESPACE
from ..monitoring import existing_stack
from .settings import StackSettings
from .stack_cluster import ClusterError, ClusterReader, ClusterUnreachable, NotAllowed
from .wiring import component_inputs

# What the preview identity needs to read an existing monitoring stack
# (docs/operators/preview-access.yaml grants it).
MONITORING_READS = ("get prometheuses (monitoring.coreos.com) and namespaces, list "
                    "deployments (apps)")


class ExistingStackError(Exception):
    """What the platform declares would not work with a stack the cluster runs: raised before
    anything is declared."""

    def __init__(self, problems: list[str]):
        super().__init__("the stack's settings do not fit what the cluster runs (nothing was "
                         "deployed):\n" + "\n".join(f"  - {p}" for p in problems))


def check_existing_stacks(settings: StackSettings) -> None:
    """Refuses (ExistingStackError) what would not work beside the existing stacks the settings
    name, and warns of what would work less; says what it was not allowed to read."""
    if settings.monitoring.stack != "existing":
        return
    try:
        with ClusterReader(settings.cluster) as reader:
            problems, warnings = existing_stack.survey(
                reader, component_inputs(settings).monitoring)
    except NotAllowed as refused:
        problems, warnings = [], [
            f"monitoring.stack: existing: whether the existing Prometheus selects the "
            f"platform's monitors and rules was not checked ({refused}); the preview identity "
            f"needs to {MONITORING_READS}"]
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    for warning in warnings:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: {warning}")
    if problems:
        raise ExistingStackError(problems)
