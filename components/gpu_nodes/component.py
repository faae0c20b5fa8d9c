"""GPU nodes: the taint that keeps non-GPU pods off them, and their labels, as code.

A node's `spec.taints` is an atomic list in the Kubernetes API: a server-side-apply patch owns and
replaces the whole list. So the program declares the complete list (`gpuNodes.taint` plus
`gpuNodes.extraTaints`) and patches without force by default: if another field manager (the node
lifecycle controller, a cloud provider, kubectl) has since changed the list, `pulumi up` stops with
a conflict instead of silently deleting that manager's taints. `forceTaintOwnership` takes the list
over, for nodes whose existing taints have been copied into `extraTaints`.
"""

import pulumi

from ..base.component import Component, declare
from .inputs import GpuNodesInputs
from .zz_generated_args import GpuNodesArgs

# Field manager of the node patches, so `kubectl get node -o yaml --show-managed-fields` shows
# which fields the platform owns.
FIELD_MANAGER = "gpu-platform"


def node_patch(inputs: GpuNodesInputs, node_name: str) -> dict:
    nodes = inputs.gpu_nodes
    annotations = {"pulumi.com/patchFieldManager": FIELD_MANAGER}
    if nodes.force_taint_ownership:
        annotations["pulumi.com/patchForce"] = "true"
    metadata = {"name": node_name, "annotations": annotations}
    if nodes.labels:
        metadata["labels"] = dict(nodes.labels)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": {"taints": [taint.as_manifest() for taint in nodes.taints]},
    }


class GpuNodes(Component[GpuNodesInputs]):
    """The GPU nodes' taints and labels: one NodePatch per named GPU node (none when node pools
    set the taint)."""

    node_names: list[str]
    "The GPU nodes' names (empty when node pools set the taint)."
    taints: list[str]
    ("The taints every GPU node carries, as kubectl writes them (`key=value:Effect`), the GPU "
     "taint first.")

    def __init__(self, name: str, args: GpuNodesArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _declare(self, name: str, inputs: GpuNodesInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        nodes = inputs.gpu_nodes
        self.patches = [declare(node_patch(inputs, node), self) for node in nodes.names]
        self.node_names = list(nodes.names)
        self.taints = [str(taint) for taint in nodes.taints]
        self.register_outputs({"nodeNames": self.node_names, "taints": self.taints})
