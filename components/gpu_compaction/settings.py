"""The `compaction` section of the stack settings."""

from __future__ import annotations

from pydantic import Field, field_validator

from ..base.facts import GPU_PRESENT_LABEL
from ..base.model import (
    ContainerResources,
    ImageSettings,
    LabelKey,
    Model,
    python_image_field,
)
from ..base.validation import (
    CronSchedule,
    DnsLabel,
    GoDuration,
    Invalid,
    OwnNamespace,
    cron_job_namespace_field,
    cron_schedule_field,
    go_duration_seconds,
    is_label_value,
    is_qualified_name,
)


class CompactionSettings(Model):
    """Moving opted-in GPU pods off lightly used GPU nodes with the descheduler, so whole
    nodes come free."""

    enabled: bool = Field(
        default=False,
        description="Run the descheduler's HighNodeUtilization on GPU nodes, so that opted-in "
                    "pods on lightly used GPU nodes move to busier ones and whole nodes come "
                    "free. Off by default: it evicts running pods. Device plugin path only "
                    "(the descheduler counts GPUs from the nodes' status). See "
                    "docs/concepts/compaction.md.")
    name: DnsLabel = Field(default="gpu-compaction",
                           description="Names the CronJob, its ServiceAccount, ClusterRole and "
                                       "policy ConfigMap.")
    namespace: OwnNamespace = cron_job_namespace_field("gpu-compaction")
    image: ImageSettings = Field(
        default_factory=lambda: ImageSettings(repository="registry.k8s.io/descheduler/descheduler",
                                              tag="v0.36.0"),
        description="Descheduler image (pinned; the integration suite builds this version).")
    schedule: CronSchedule = cron_schedule_field("*/15 * * * *", "a compaction run")
    opt_in_label: LabelKey = Field(
        default="gpu-platform.io/compaction",
        description="Only pods carrying this label with the value `allowed` are ever moved "
                    "(set it in the pod template of a Deployment, StatefulSet or Job whose "
                    "pods may restart elsewhere).")
    underused_percent: int = Field(
        default=50, ge=1, le=99,
        description="A GPU node whose requested GPUs (and each MIG resource in use) are at or "
                    "below this share of its capacity is emptied onto busier nodes, percent. "
                    "With `planThreshold`, the highest threshold a run may use.")
    plan_threshold: bool = Field(
        default=True,
        description="Before each run, choose the nodes to empty, least used first, replaying "
                    "the descheduler's rules and the binpack scheduler's placements; the run's "
                    "thresholds (GPUs at most `underusedPercent`; pods, CPU and memory) and "
                    "node selector then take just those, and a run that would free no node "
                    "evicts nothing. Off: every run uses `underusedPercent`. See "
                    "docs/concepts/compaction.md#planned-thresholds.")
    plan_image: ImageSettings = python_image_field("the threshold plan")
    min_pod_age: GoDuration = Field(
        default="2h",
        description="Pods younger than this are never moved (Go duration: 30m, 2h, 1h30m): a "
                    "pod that just started, or just moved, stays put.")
    # With planThreshold a run evicts only the pods of the nodes it empties, so a per-node limit
    # below a node's pod count means that node is never emptied: 8 empties a full 8-GPU node of
    # 1-GPU pods (docs/benchmarks/compaction-study.md: 8 and 8 beat 4 and 2 with planning).
    max_evictions_per_run: int = Field(default=8, ge=1, le=100,
                                       description="Pods evicted per run, at most.")
    max_evictions_per_node: int = Field(default=8, ge=1, le=16,
                                        description="Pods evicted from one node per run, at "
                                                    "most; with planThreshold, a node with more "
                                                    "pods that may move is never emptied.")
    node_selector: str = Field(
        default=f"{GPU_PRESENT_LABEL[0]}={GPU_PRESENT_LABEL[1]}",
        description="Label selector of the nodes compaction looks at: by default the label GPU "
                    "Feature Discovery gives every GPU node.")
    resources: ContainerResources = Field(
        default_factory=lambda: ContainerResources(
            requests={"cpu": "50m", "memory": "128Mi"}, limits={"memory": "512Mi"}),
        description="Descheduler container requests and limits.")

    @field_validator("node_selector")
    @classmethod
    def selector_of_labels(cls, value: str) -> str:
        for term in value.split(","):
            key, equals, label_value = term.partition("=")
            if not equals or not is_qualified_name(key.strip()) or \
                    not is_label_value(label_value.strip()):
                raise Invalid("not a label selector of key=value terms",
                              "key=value[,key=value...], e.g. nvidia.com/gpu.present=true")
        return value

    @property
    def opt_in(self) -> dict[str, str]:
        return {self.opt_in_label: "allowed"}

    @property
    def min_pod_age_hours(self) -> float:
        return go_duration_seconds(self.min_pod_age) / 3600
