"""Kueue's release: its Configuration and the chart's values."""


import yaml

from ..base import charts, manifests
from ..base.facts import kueue_integrations
from ..base.validation import STACK, Subject
from .inputs import TeamsInputs

# Kueue's lease, as the chart names it.
LEASE = "c1f6bfd2.kueue.x-k8s.io"


def frameworks(inputs: TeamsInputs) -> list[str]:
    """The integrations GPU workloads come through: the built-in kinds' and the stack's
    frameworks'. Kueue starts one whose CRD the cluster lacks once the CRD appears."""
    return [i.name for i in kueue_integrations(inputs.teams.frameworks)]


def namespace_selector(namespaces: list[str]) -> dict:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": sorted(namespaces)}]}


def kueue_configuration(inputs: TeamsInputs) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2): jobs without a queue name managed
    in the team namespaces only, all-or-nothing admission, fair sharing, quotas of GPUs only."""
    teams = inputs.teams
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443",
                    # The quota, usage and borrowing gauges per ClusterQueue, for the dashboard.
                    "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": LEASE},
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": namespace_selector(list(teams.team_namespaces)),
        # A workload whose pods are not all running within the timeout gives its quota back
        # and is queued again: no job holds GPUs partly.
        "waitForPodsReady": {"timeout": teams.wait_for_pods_ready, "blockAdmission": False,
                             "requeuingStrategy": {"timestamp": "Eviction",
                                                   "backoffBaseSeconds": 60,
                                                   "backoffMaxSeconds": 3600}},
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare",
                                                 "LessThanInitialShare"]},
        # CPU and memory are not counted: only the GPU resources the queues declare are. On
        # the DRA path a claim on a GPU class counts against its resource's quota, as a request
        # of the resource does: a quota means the same GPUs on either path.
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared", **({"deviceClassMappings": [
            {"name": resource, "deviceClassNames": classes}
            for resource, classes in sorted(inputs.device_classes.items())]}
            if inputs.device_classes else {})},
        "integrations": {"frameworks": frameworks(inputs)},
    }


def generated_values(inputs: TeamsInputs) -> dict:
    """The values the program derives from the settings."""
    kueue = inputs.teams.kueue
    return {
        "controllerManager": {
            "replicas": kueue.replicas,
            "manager": {
                "image": {"repository": inputs.mirrored(kueue.image.repository),
                          "tag": kueue.image.tag, "pullPolicy": "IfNotPresent"},
                # Pods in team namespaces cannot be created while Kueue is down.
                "priorityClassName": manifests.CRITICAL_PRIORITY,
            },
            "podDisruptionBudget": {"enabled": kueue.replicas > 1, "minAvailable": 1},
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(
            kueue_configuration(inputs), sort_keys=False)},
        # Monitoring declares the scrape configuration.
        "enablePrometheus": False,
    }


def chart_values(inputs: TeamsInputs) -> dict:
    """The values the release is installed with: generated values plus the stack's extras
    (which check_chart_values has checked)."""
    return charts.deep_merge(generated_values(inputs), inputs.teams.kueue.extra_values)


def check_chart_values(inputs: TeamsInputs, subject: Subject = STACK) -> None:
    """The stack's extra values may be merged over the generated ones (SettingsError naming
    each key that may not)."""
    charts.check_extra_values(generated_values(inputs), inputs.teams.kueue.extra_values,
                              "teams.kueue.extraValues", subject)
