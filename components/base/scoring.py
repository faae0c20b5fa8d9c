"""kube-scheduler's NodeResourcesFit scoring as the binpack scheduler configures it and
compaction predicts placements with it: the settings, the resources scored, and the
scoring strategy rendered."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from .facts import GPU_RESOURCE, mig_resource
from .model import Model
from .validation import Invalid, is_qualified_name


class ShapePoint(Model):
    """A point of the scoring shape: a node's utilization, percent, and its score."""

    utilization: int = Field(ge=0, le=100, description="Node utilization, percent (0..100).")
    score: int = Field(ge=0, le=10, description="Score at that utilization (0..10).")


class RequestedToCapacityRatio(Model):
    """How a node's utilization maps to its score."""

    shape: list[ShapePoint] = Field(
        default_factory=lambda: [ShapePoint(utilization=0, score=0),
                                 ShapePoint(utilization=100, score=10)],
        min_length=1,
        description="Score by utilization; rising scores favour fuller nodes (binpacking).")

    @field_validator("shape")
    @classmethod
    def utilization_increases(cls, shape: list[ShapePoint]) -> list[ShapePoint]:
        for index in range(1, len(shape)):
            if shape[index].utilization <= shape[index - 1].utilization:
                raise Invalid("utilization must increase strictly from point to point",
                              f"a value above {shape[index - 1].utilization}",
                              at=(index, "utilization"), value=shape[index].utilization,
                              has_value=True)
        return shape


class ResourceWeight(Model):
    """A resource NodeResourcesFit scores, and its weight."""

    name: str = Field(description="A resource: `cpu`, `memory` or an extended resource such as "
                                  "`nvidia.com/gpu`.")
    weight: int = Field(ge=1, le=100, description="Weight of this resource (1..100).")

    @field_validator("name")
    @classmethod
    def name_is_resource_name(cls, value: str) -> str:
        if not is_qualified_name(value):
            raise Invalid("not a resource name", "cpu, memory or an extended resource such as "
                                                 "nvidia.com/gpu")
        return value


class ScoringStrategy(Model):
    """NodeResourcesFit's scoring: which resources count, and how fullness scores."""

    resources: list[ResourceWeight] = Field(
        default_factory=lambda: [ResourceWeight(name=GPU_RESOURCE, weight=10),
                                 ResourceWeight(name="cpu", weight=1),
                                 ResourceWeight(name="memory", weight=1)],
        min_length=1,
        description="Resources whose utilization is scored, with weights.")
    requested_to_capacity_ratio: RequestedToCapacityRatio = Field(
        default_factory=RequestedToCapacityRatio, description="Scoring shape.")

    @field_validator("resources")
    @classmethod
    def resources_unique(cls, resources: list[ResourceWeight]) -> list[ResourceWeight]:
        names = [r.name for r in resources]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise Invalid("resource listed twice", "each resource once",
                              at=(index, "name"), value=name, has_value=True)
        return resources


def scored_resources(strategy: ScoringStrategy, mig_resources: list[str]) -> list[ResourceWeight]:
    """What the binpack scheduler's NodeResourcesFit scores: the configured resources, and each
    MIG resource at the GPU weight (unless configured), so a MIG slice packs as a whole GPU
    does."""
    weights = {r.name: r.weight for r in strategy.resources}
    gpu_weight = weights.get(GPU_RESOURCE, max(weights.values()))
    return [*strategy.resources, *(ResourceWeight(name=name, weight=gpu_weight)
                                   for name in mig_resources if name not in weights)]


def mig_resources_field():
    return Field(default_factory=list,
                 description="The MIG resources GPU nodes advertise (`nvidia.com/mig-<profile>`, "
                             "with the GPU Operator's mixed strategy; the GpuOperator "
                             "component's `migResources` output): each is packed as a whole GPU "
                             "is.")


def check_mig_resources(names: list[str]) -> list[str]:
    for index, name in enumerate(names):
        if not name.startswith(mig_resource("")):
            raise Invalid("not a MIG resource", f"{mig_resource('<profile>')} names",
                          at=(index,), value=name, has_value=True)
    return names


MigResources = Annotated[list[str], AfterValidator(check_mig_resources)]


def scoring_strategy(strategy: ScoringStrategy, scored: list[ResourceWeight]) -> dict:
    """NodeResourcesFit's scoring strategy: how full a node is, weighted by resource, for the
    `scored` resources (compaction predicts placements with it too)."""
    return {
        "type": "RequestedToCapacityRatio",
        "resources": [{"name": r.name, "weight": r.weight} for r in scored],
        "requestedToCapacityRatio": {
            "shape": [{"utilization": p.utilization, "score": p.score}
                      for p in strategy.requested_to_capacity_ratio.shape],
        },
    }
