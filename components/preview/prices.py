"""In a preview: showback's price keys against the GPU models of the cluster's nodes
(components/monitoring/prices.py), so that a key that would price nothing stops the preview."""

from __future__ import annotations

import pulumi

from ..base.model import Read
from ..base.validation import CONFIG_NAMESPACE
from ..monitoring.prices import price_findings
from ..platform.settings import StackSettings
from .cluster import ClusterError, ClusterReader, ClusterUnreachable, NotAllowed
from .conflicts import NODES


class PriceError(Exception):
    """A price that would price no GPU of the cluster: raised before anything is declared."""

    def __init__(self, problems: list[str]):
        super().__init__("the stack's prices name GPUs the cluster does not have (nothing was "
                         "deployed):\n" + "\n".join(f"  - {p}" for p in problems))


def price_reads(settings: StackSettings) -> list[Read]:
    """What the check reads (the preview identity is granted it)."""
    return [NODES] if settings.monitoring.usage.priced() else []


def check_prices(settings: StackSettings) -> None:
    """Refuses (PriceError) every price key that names no GPU model of the cluster's nodes;
    warns where that cannot be told."""
    usage = settings.monitoring.usage
    if not usage.priced():
        return
    try:
        with ClusterReader(settings.cluster) as reader:
            nodes = reader.items(NODES.path())
    except NotAllowed as refused:
        pulumi.log.warn(f"{CONFIG_NAMESPACE}: monitoring.usage: the price keys "
                        f"were not checked against the cluster's GPU models ({refused}); the "
                        f"preview identity needs to list nodes")
        return
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    found = price_findings(usage, nodes)
    for warning in found.warnings:
        pulumi.log.warn(warning)
    if found.problems:
        raise PriceError(found.problems)
