"""The binpack scheduler's settings for a fleet of GPU nodes on the DRA path, which the preview
advises when the cluster has one: docs/operators/sizing.md gives the figures behind them."""

from __future__ import annotations

from .settings import SchedulerSettings

# On the DRA path kube-scheduler's cost of scoring a node grows with every ResourceSlice of the
# cluster, and each placement writes a claim besides the binding: from about this many GPU
# nodes on, scoring every node at the shipped client rate binds a burst slowly.
DRA_FLEET_GPU_NODES = 1000
DRA_FLEET_SHARE = 10
DRA_FLEET_CLIENT_RATE = (500, 1000)
SIZING_PAGE = "docs/operators/sizing.md#large-fleets-a-thousand-gpu-nodes-and-more"


def dra_fleet_advice(scheduler: SchedulerSettings, gpu_nodes: int) -> str | None:
    """What to change, on the DRA path, for a cluster of `gpu_nodes` GPU nodes (None: nothing)."""
    if gpu_nodes < DRA_FLEET_GPU_NODES:
        return None
    share, rate = scheduler.percentage_of_nodes_to_score, scheduler.client_connection
    qps, burst = DRA_FLEET_CLIENT_RATE
    changes = []
    if share == 0 or share > DRA_FLEET_SHARE:
        changes.append(f"scheduler.percentageOfNodesToScore: {DRA_FLEET_SHARE} (now {share})")
    if rate.qps < qps or rate.burst < burst:
        changes.append(f"scheduler.clientConnection qps: {qps}, burst: {burst} (now "
                       f"{rate.qps} and {rate.burst})")
    if not changes:
        return None
    return (f"{gpu_nodes} GPU nodes on the DRA path: kube-scheduler scores each node against "
            f"every ResourceSlice of the cluster and writes a claim for each placement, so "
            f"with these settings a burst of GPU pods waits to be placed; set "
            f"{' and '.join(changes)}, which trades a little packing for placing bursts "
            f"several times faster ({SIZING_PAGE})")
