"""What compaction's plan assumes of the binpack scheduler: that it scores every feasible node.
With a smaller share scored, on a cluster with more feasible nodes than kube-scheduler always
scores, a replacement can land where the plan did not put it; the settings warn of it."""

from __future__ import annotations

# kube-scheduler scores every feasible node up to this many, whatever share is set
# (minFeasibleNodesToFind, pkg/scheduler/schedule_one.go, k8s.io/kubernetes v1.37.2).
ALWAYS_SCORED_NODES = 100
PAGE = "docs/concepts/compaction.md#limits"


def scored_share_warning(compaction_enabled: bool, percentage_of_nodes_to_score: int
                         ) -> str | None:
    """Why compaction's runs may not empty the nodes they plan to (None: they will)."""
    if not compaction_enabled or percentage_of_nodes_to_score == 100:
        return None
    share = ("its adaptive share" if percentage_of_nodes_to_score == 0
             else f"{percentage_of_nodes_to_score}%")
    return (f"compaction.enabled with scheduler.percentageOfNodesToScore "
            f"{percentage_of_nodes_to_score}: each run plans where the evicted pods land as if "
            f"the binpack scheduler scored every feasible node, but with more than "
            f"{ALWAYS_SCORED_NODES} it scores {share} of them, so a replacement can land on a "
            f"node the plan did not choose and a run can restart pods without emptying a node; "
            f"keep 100 where compaction runs ({PAGE})")
