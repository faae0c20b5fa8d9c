"""The `gpuNodes` section of the stack settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..base.model import Labels, Model, Taint
from ..base.validation import Invalid, is_dns_subdomain


class GpuNodesSettings(Model):
    """The GPU nodes: which they are, who taints them, and their taints and labels."""

    tainted_by: Literal["program", "nodePool"] = Field(
        default="program",
        description="`program`: the program taints and labels the nodes in `names`. "
                    "`nodePool`: the cluster's GPU node pools register the taint themselves "
                    "(autoscaled or recreated nodes); the program never patches a node and uses "
                    "the taint only for tolerations and the admission policy. See "
                    "docs/concepts/gpu-node-taints.md.")
    names: list[str] = Field(
        default_factory=list,
        description="Names of the Node objects that carry NVIDIA GPUs (unique; required with "
                    "taintedBy: program, not allowed with nodePool).")
    taint: Taint = Field(
        default_factory=lambda: Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),
        description="Taint that keeps pods without a matching toleration off GPU nodes.")
    extra_taints: list[Taint] = Field(
        default_factory=list,
        description="Other taints the GPU nodes must keep. The program owns the whole taint list "
                    "of each GPU node (the list is atomic in the Kubernetes API), so any taint "
                    "not declared here is removed when `forceTaintOwnership` is on.")
    force_taint_ownership: bool = Field(
        default=False,
        description="Take the taint list over when another field manager (kubelet, a cloud "
                    "controller, kubectl) owns it. Off: such a conflict stops `pulumi up` and "
                    "changes nothing.")
    labels: Labels = Field(
        default_factory=dict, description="Labels added to every GPU node.")
    gpus_per_node: int | None = Field(
        default=None, ge=1, le=64,
        description="How many GPUs each GPU node has (1..64); unset: not known. With it, the "
                    "teams' quotas of nvidia.com/gpu are checked against what the GPU nodes "
                    "hold: the named nodes, or with taintedBy: nodePool, `maxNodes` of them.")
    max_nodes: int | None = Field(
        default=None, ge=1,
        description="With taintedBy: nodePool, the most GPU nodes the node pools can hold "
                    "(their autoscalers' maximum, summed); unset: not known, and the teams' "
                    "quotas are not checked against the nodes (every run says so). Not with "
                    "taintedBy: program, whose names count the nodes.")

    @field_validator("names")
    @classmethod
    def names_are_node_names(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if not is_dns_subdomain(name):
                raise Invalid("not a valid node name",
                              "a DNS-1123 subdomain: lowercase a-z, 0-9, '-' and '.', at most "
                              "253 characters", at=(index,), value=name, has_value=True)
            if name in names[:index]:
                raise Invalid("node listed twice", "each node once", at=(index,), value=name,
                              has_value=True)
        return names

    @model_validator(mode="after")
    def names_fit_the_taint_mode(self) -> GpuNodesSettings:
        if self.tainted_by == "program" and self.max_nodes is not None:
            raise Invalid("with taintedBy: program the named nodes are the GPU nodes",
                          "unset (gpuNodes.names counts them), or taintedBy: nodePool",
                          at=("maxNodes",), value=self.max_nodes, has_value=True)
        if self.tainted_by == "program" and not self.names:
            raise Invalid("the program taints the nodes it is given, and none are",
                          "the names of the GPU nodes, or taintedBy: nodePool when the node "
                          "pools set the taint", at=("names",), value=[], has_value=True)
        if self.tainted_by == "nodePool":
            for key, value in (("names", self.names), ("labels", self.labels),
                               ("forceTaintOwnership", self.force_taint_ownership)):
                if value:
                    raise Invalid("with taintedBy: nodePool the program never patches a node",
                                  f"no {key} (set taints and labels on the node pool), or "
                                  "taintedBy: program", at=(key,), value=value,
                                  has_value=True)
        return self

    @model_validator(mode="after")
    def taints_are_unique(self) -> GpuNodesSettings:
        seen = {(self.taint.key, self.taint.effect)}
        for index, taint in enumerate(self.extra_taints):
            if (taint.key, taint.effect) in seen:
                raise Invalid("a node cannot carry two taints with the same key and effect",
                              "taints unique by key and effect, and distinct from "
                              "gpuNodes.taint", at=("extraTaints", index), value=str(taint),
                              has_value=True)
            seen.add((taint.key, taint.effect))
        return self

    @property
    def node_count(self) -> int | None:
        """How many GPU nodes there are at most, where the settings say: the named ones, or the
        node pools' maximum."""
        return len(self.names) if self.tainted_by == "program" else self.max_nodes

    @property
    def taints(self) -> list[Taint]:
        """The complete taint list each GPU node carries."""
        return [self.taint, *self.extra_taints]
