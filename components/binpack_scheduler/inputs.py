"""What the BinpackScheduler component takes."""

from __future__ import annotations

from ..base.model import KubernetesVersion, PulledImages, kubernetes_version_field, section
from ..base.scoring import MigResources, ResourceWeight, mig_resources_field, scored_resources
from .settings import SchedulerSettings


class BinpackSchedulerInputs(PulledImages):
    """The binpack scheduler, with the Kubernetes version that picks its image and the MIG
    resources it packs as it packs GPUs."""

    scheduler: SchedulerSettings = section(SchedulerSettings)
    kubernetes_version: KubernetesVersion = kubernetes_version_field()
    mig_resources: MigResources = mig_resources_field()


    @property
    def scored_resources(self) -> list[ResourceWeight]:
        return scored_resources(self.scheduler.scoring_strategy, self.mig_resources)

    @property
    def scheduler_image(self) -> str:
        return f"{self.mirrored('registry.k8s.io/kube-scheduler')}:v{self.kubernetes_version}"
