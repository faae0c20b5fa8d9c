"""GPU nodes: the taint that keeps non-GPU pods off them, and their labels, as code.

A node's `spec.taints` is an atomic list in the Kubernetes API: a server-side-apply patch owns and
replaces the whole list. So the program declares the complete list (`gpuNodes.taint` plus
`gpuNodes.extraTaints`) and patches without force by default: if another field manager (the node
lifecycle controller, a cloud provider, kubectl) has since changed the list, `pulumi up` stops with
a conflict instead of silently deleting that manager's taints. `forceTaintOwnership` takes the list
over, for nodes whose existing taints have been copied into `extraTaints`.
"""

from __future__ import annotations

import pulumi

from . import kube
from .settings import StackSettings

# Field manager of the node patches, so `kubectl get node -o yaml --show-managed-fields` shows
# which fields the platform owns.
FIELD_MANAGER = "gpu-platform"


def node_patch(settings: StackSettings, node_name: str) -> dict:
    nodes = settings.gpu_nodes
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


class GpuNodes(kube.Component):
    """One NodePatch per GPU node with the GPU taint (and any extra taints) and labels."""

    def __init__(self, name: str, settings: StackSettings,
                 prefix: str = "",
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:GpuNodes", name, None, opts)
        self.child_prefix = prefix
        self.patches = [kube.declare(node_patch(settings, node), self)
                        for node in settings.gpu_nodes.names]
        self.node_names = settings.gpu_nodes.names
        self.register_outputs({"nodeNames": self.node_names,
                               "taint": str(settings.gpu_nodes.taint)})
