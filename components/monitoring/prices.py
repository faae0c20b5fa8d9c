"""Showback's prices against the cluster's GPUs: a price is keyed by the model name the DCGM
exporter reports (`monitoring.usage.pricePerGpuHour`), and a key that names no GPU of the
cluster leaves its costs empty without a word. GPU Feature Discovery labels each GPU node with
the same model name, spaces written as dashes, which the preview reads."""

from __future__ import annotations

import re

from ..base.model import Findings
from ..base.validation import CONFIG_NAMESPACE
from .settings import UsageSettings

# GPU Feature Discovery's label of a node's GPU model, e.g. NVIDIA-H100-80GB-HBM3; shared GPUs
# (time-slicing) and MIG strategies add a suffix to it.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
PRODUCT_SUFFIX = re.compile(r"-(SHARED|MIG-.*)$")
SETTING = f"{CONFIG_NAMESPACE}:monitoring.usage.pricePerGpuHour"
GROUPS = f"{CONFIG_NAMESPACE}:monitoring.usage.nodeGroupPrices"


def node_gpu_models(nodes: list[dict]) -> set[str]:
    """The GPU models the nodes' labels name, as GPU Feature Discovery writes them."""
    return {PRODUCT_SUFFIX.sub("", label) for node in nodes
            if (label := (node["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL))}


def as_label(model: str) -> str:
    """A model name as the exporter reports it, written as GPU Feature Discovery labels it."""
    return model.strip().replace(" ", "-")


def price_findings(usage: UsageSettings, nodes: list[dict]) -> Findings:
    """A problem for each price whose key names no GPU model of `nodes`; a warning where no node
    says its model yet (GPU Feature Discovery runs once the GPU Operator is installed), and for
    each node group price whose selector matches no node now (a group scaled to nothing)."""
    keyed = [(f"{SETTING}.{key}", key, price) for key, price in usage.price_per_gpu_hour.items()]
    selectors = []
    for index, group in enumerate(usage.node_group_prices):
        setting = f"{GROUPS}[{index}]"
        keyed += [(f"{setting}.pricePerGpuHour.{key}", key, price)
                  for key, price in group.price_per_gpu_hour.items()]
        selectors.append((f"{setting}.nodeSelector", group.node_selector))
    if not keyed:
        return Findings()
    warnings = [f"{setting} = {selector}: matches no node of the cluster now; its prices apply "
                f"once such nodes join" for setting, selector in selectors
                if not any(_matches(node, selector) for node in nodes)]
    models = node_gpu_models(nodes)
    if not models:
        return Findings(warnings=[
            *warnings, f"{SETTING}: no node carries {GPU_PRODUCT_LABEL} yet (GPU Feature "
            f"Discovery labels GPU nodes once the GPU Operator runs), so the price keys were "
            f"not checked against the cluster's GPU models"])
    return Findings(warnings=warnings, problems=[
        f"{setting} = {price}: names no GPU model of the cluster's nodes; allowed: a model "
        f"as the DCGM exporter's modelName writes it, which GPU Feature Discovery's "
        f"{GPU_PRODUCT_LABEL} writes with dashes for spaces (the nodes': "
        f"{', '.join(sorted(models))})"
        for setting, key, price in sorted(keyed) if as_label(key) not in models])


def _matches(node: dict, selector: dict[str, str]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())
