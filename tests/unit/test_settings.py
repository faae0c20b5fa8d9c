"""Stack settings: the example stack is valid, and every class of mistake stops the run before
anything is registered, with a message that names the setting, the value and what is allowed."""

import copy

import pytest

from components.base.validation import SettingsError
from components.platform.config import load_settings, parse_config_value, retired_settings
from tests.kit import harness
from tests.kit.stacks import KUBECONFIG, MINIMAL, TEAMS, raw, with_changes


def with_team(**changes) -> dict:
    """TEAMS with the first team changed."""
    teams = copy.deepcopy(TEAMS)
    teams["teams"][0] |= changes
    return teams


# (case id, settings, the setting named, a fragment of the value shown, a fragment of "allowed")
MISTAKES = [
    ("teams on a Kubernetes Kueue does not support",
     with_changes(kubernetesVersion="1.33.5", teams=TEAMS),
     "gpu-platform:teams.enabled", "true", "kubernetesVersion 1.34.0 or newer"),
    ("teams on without a team", with_changes(teams={"enabled": True}),
     "gpu-platform:teams.teams", "[]", "at least one team"),
    ("quotas above what the named GPU nodes hold",
     with_changes(gpuNodes={"names": ["gpu-node-1"], "gpusPerNode": 4}, teams=TEAMS),
     "gpu-platform:teams.teams", "8", "quotas that add up to 4 or less"),
    ("quotas above what the GPU node pools hold at most",
     with_changes(gpuNodes={"taintedBy": "nodePool", "names": [], "maxNodes": 1,
                            "gpusPerNode": 4},
                  teams=TEAMS),
     "gpu-platform:teams.teams", "8", "quotas that add up to 4 or less"),
    ("a node pools' maximum where the program names the nodes",
     with_changes(gpuNodes={"names": ["gpu-node-1"], "maxNodes": 4}),
     "gpu-platform:gpuNodes.maxNodes", "4", "gpuNodes.names counts them"),
    ("a namespace in two teams",
     with_changes(teams=with_team(namespaces=["research", "vision"])),
     "gpu-platform:teams.teams[1].namespaces", '"vision"', "each namespace in one team"),
    ("a team namespace the webhook never sees",
     with_changes(teams=TEAMS, admission={"exemptNamespaces": ["research"]}),
     "gpu-platform:teams.teams[0].namespaces", '"research"', "a namespace of the team's own"),
    ("a framework Kueue has no integration for",
     with_changes(teams={**TEAMS, "frameworks": ["ray.io/rayjob", "ray.io/rayservice"]}),
     "gpu-platform:teams.frameworks[1]", '"ray.io/rayservice"',
     "one of jobset.x-k8s.io/jobset, leaderworkerset.x-k8s.io/leaderworkerset"),
    ("a GPU flavor named as the flavor that counts pods",
     with_changes(teams={**TEAMS, "flavors": [{"name": "any-node"}]}),
     "gpu-platform:teams.flavors[0].name", '"any-node"', "another name"),
    ("a quota of CPUs", with_changes(teams=with_team(quota={"gpu": {"cpu": 8}})),
     "gpu-platform:teams.teams[0].quota.gpu.cpu", "8", "NVIDIA's resources"),
    ("a flavor's node label key invalid",
     with_changes(teams={**TEAMS, "flavors": [{"name": "gpu",
                                               "nodeLabels": {"gpu model": "h100"}}]}),
     "gpu-platform:teams.flavors[0].nodeLabels.gpu model", '"gpu model"', "DNS-subdomain prefix"),
    ("a quota on a flavor that does not exist",
     with_changes(teams=with_team(quota={"h100": {"nvidia.com/gpu": 2}})),
     "gpu-platform:teams.teams[0].quota.h100", "2", "one of gpu"),
    ("lending more than the quota",
     with_changes(teams=with_team(lendingLimit={"gpu": {"nvidia.com/gpu": 9}})),
     "gpu-platform:teams.teams[0].lendingLimit.gpu.nvidia.com/gpu", "9", "0..5"),
    ("a MIG quota without the mixed strategy",
     with_changes(teams=with_team(quota={"gpu": {"nvidia.com/mig-1g.10gb": 4}})),
     "gpu-platform:teams.teams[0].quota.gpu.nvidia.com/mig-1g.10gb", "4",
     "mixed MIG strategy is off"),
    ("a queueing strategy Kueue does not have",
     with_changes(teams=with_team(queueingStrategy="FIFO")),
     "gpu-platform:teams.teams[0].queueingStrategy", '"FIFO"', "StrictFIFO"),
    ("GPU pods outside teams neither refused nor admitted",
     with_changes(teams={**TEAMS, "gpuPodsOutsideTeams": "ignore"}),
     "gpu-platform:teams.gpuPodsOutsideTeams", '"ignore"', "'refuse' or 'admit'"),
    ("kubernetes version missing", with_changes(kubernetesVersion=None),
     "gpu-platform:kubernetesVersion", "required", ""),
    ("kubernetes too old", with_changes(kubernetesVersion="1.29.9"),
     "gpu-platform:kubernetesVersion", '"1.29.9"', "1.30.0 or newer"),
    ("kubernetes version unquoted in YAML", with_changes(kubernetesVersion="1.3"),
     "gpu-platform:kubernetesVersion", '"1.3"', "MAJOR.MINOR.PATCH"),
    ("kubernetes version with v", with_changes(kubernetesVersion="v1.35.0"),
     "gpu-platform:kubernetesVersion", '"v1.35.0"', "without a leading v"),
    ("node name not DNS", with_changes(gpuNodes={"names": ["gpu-1", "GPU_2"]}),
     "gpu-platform:gpuNodes.names[1]", '"GPU_2"', "DNS-1123 subdomain"),
    ("more GPU nodes than the cluster may have",
     with_changes(gpuNodes={"names": ["gpu-1", "gpu-2"]}, gpuOperator={"maxClusterNodes": 1}),
     "gpu-platform:gpuOperator.maxClusterNodes", "1", "2 or more"),
    ("scheduler burst below its qps",
     with_changes(scheduler={"clientConnection": {"qps": 300, "burst": 100}}),
     "gpu-platform:scheduler.clientConnection.burst", "100", "300 or more"),
    ("renew deadline past the lease",
     with_changes(scheduler={"leaderElection": {"leaseDuration": "10s",
                                                "renewDeadline": "10s"}}),
     "gpu-platform:scheduler.leaderElection.renewDeadline", '"10s"',
     "shorter than leaseDuration (10s)"),
    ("retry period too long to renew in time",
     with_changes(scheduler={"leaderElection": {"renewDeadline": "4s", "retryPeriod": "4s"}}),
     "gpu-platform:scheduler.leaderElection.retryPeriod", '"4s"',
     "shorter than renewDeadline / 1.2"),
    ("lease duration not a Go duration",
     with_changes(scheduler={"leaderElection": {"leaseDuration": "1d"}}),
     "gpu-platform:scheduler.leaderElection.leaseDuration", '"1d"', "Go duration"),
    ("node listed twice", with_changes(gpuNodes={"names": ["gpu-1", "gpu-1"]}),
     "gpu-platform:gpuNodes.names[1]", '"gpu-1"', "each node once"),
    ("taint effect unknown", with_changes(gpuNodes={"taint": "nvidia.com/gpu=present:NoRun"}),
     "gpu-platform:gpuNodes.taint.effect", '"NoRun"', "'NoSchedule', 'PreferNoSchedule' or"),
    ("taint without effect", with_changes(gpuNodes={"taint": "nvidia.com/gpu"}),
     "gpu-platform:gpuNodes.taint", '"nvidia.com/gpu"', "key=value:Effect"),
    ("taint key invalid", with_changes(gpuNodes={"taint": "bad key:NoSchedule"}),
     "gpu-platform:gpuNodes.taint.key", '"bad key"', "[DNS-subdomain prefix/]name"),
    ("extra taint repeats the gpu taint",
     with_changes(gpuNodes={"extraTaints": ["nvidia.com/gpu=other:NoSchedule"]}),
     "gpu-platform:gpuNodes.extraTaints[0]", "nvidia.com/gpu=other:NoSchedule",
     "unique by key and effect"),
    ("scheduler node selector key invalid",
     with_changes(scheduler={"nodeSelector": {"node pool": "platform"}}),
     "gpu-platform:scheduler.nodeSelector.node pool", '"node pool"', "DNS-subdomain prefix"),
    ("node label value invalid", with_changes(gpuNodes={"labels": {"pool": "a b"}}),
     "gpu-platform:gpuNodes.labels.pool", '"a b"', "at most 63 characters"),
    ("misspelt section", with_changes(gpuOpertor={}),
     "gpu-platform:gpuOpertor", "unknown setting", "gpuOperator"),
    ("misspelt key", with_changes(scheduler={"replica": 3}),
     "gpu-platform:scheduler.replica", "unknown setting", "replicas"),
    ("vfio manager without sandbox workloads",
     with_changes(gpuOperator={"vfioManager": {"enabled": True}}),
     "gpu-platform:gpuOperator.vfioManager.enabled", "true", "sandboxWorkloads.enabled: true"),
    ("time-slicing without device plugin",
     with_changes(gpuOperator={"devicePlugin": {"enabled": False}, "timeSlicing": {"replicas": 4}}),
     "gpu-platform:gpuOperator.timeSlicing.replicas", "4", "devicePlugin.enabled: true"),
    ("time-slicing of one", with_changes(gpuOperator={"timeSlicing": {"replicas": 1}}),
     "gpu-platform:gpuOperator.timeSlicing.replicas", "1", "greater than or equal to 2"),
    ("mig manager without strategy",
     with_changes(gpuOperator={"migManager": {"enabled": True}, "mig": {"strategy": "none"}}),
     "gpu-platform:gpuOperator.mig.strategy", '"none"', "single or mixed"),
    ("dcgm exporter off", with_changes(gpuOperator={"dcgmExporter": {"enabled": False}}),
     "gpu-platform:gpuOperator.dcgmExporter.enabled", "false", "true"),
    ("extra value overrides a generated one",
     with_changes(gpuOperator={"extraValues": {"dcgmExporter": {"serviceMonitor":
                                                                {"enabled": True}}}}),
     "gpu-platform:gpuOperator.extraValues.dcgmExporter.serviceMonitor.enabled",
     "generated from other settings", "keys the program does not set"),
    ("extra values set the DRA driver on the device plugin path",
     with_changes(gpuOperator={"extraValues": {"draDriver": {"featureGates": {"MPS": True}}}}),
     "gpu-platform:gpuOperator.extraValues.draDriver.featureGates.MPS",
     "would hand the same GPUs out twice", "gpuOperator.gpuPath: dra"),
    ("extra values deploy the DRA cluster resource",
     with_changes(gpuOperator={"extraValues": {"gpuCluster": {"deployCR": True}}}),
     "gpu-platform:gpuOperator.extraValues.gpuCluster.deployCR",
     "generated from other settings", "keys the program does not set"),
    ("extra values name a DRA driver value the chart lacks",
     with_changes(kubernetesVersion="1.37.2", gpuOperator={
         "gpuPath": "dra", "extraValues": {"draDriver": {"gpus": {"kubletPlugin": {}}}}}),
     "gpu-platform:gpuOperator.extraValues.draDriver.gpus.kubletPlugin",
     "the pinned chart (gpu-operator v26.7.0) has no such DRA driver value",
     "allowed under draDriver: computeDomains, featureGates"),
    ("the DRA path on Kubernetes 1.36",
     with_changes(kubernetesVersion="1.36.4", gpuOperator={"gpuPath": "dra"}),
     "gpu-platform:gpuOperator.gpuPath", '"dra"', "kubernetesVersion 1.37.0 or newer"),
    ("time-slicing on the DRA path",
     with_changes(kubernetesVersion="1.37.2",
                  gpuOperator={"gpuPath": "dra", "timeSlicing": {"replicas": 4}}),
     "gpu-platform:gpuOperator.timeSlicing", "4", "gpuPath: devicePlugin, or leave it off"),
    ("compaction on the DRA path",
     with_changes(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"},
                  compaction={"enabled": True}),
     "gpu-platform:compaction.enabled", "true", "gpuOperator.gpuPath devicePlugin"),
    ("a topology on the DRA path, where Kueue's placement counts no GPU",
     with_changes(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"},
                  teams={**TEAMS, "topology": {"preset": "nvlink-clique"}}),
     "gpu-platform:teams.topology", '"nvlink-clique"',
     "a ComputeDomain's pods select an NVLink clique with a nodeSelector"),
    ("extra values switch on the toolkit's NRI plugin",
     with_changes(gpuOperator={"extraValues": {"cdi": {"nriPluginEnabled": True}}}),
     "gpu-platform:gpuOperator.extraValues.cdi.nriPluginEnabled",
     "injects the GPUs a pod annotation names", "leave it off"),
    ("an NVIDIA device class listed as claimable",
     with_changes(admission={"deviceClasses": ["nic.example.com", "gpu.nvidia.com"]}),
     "gpu-platform:admission.deviceClasses[1]", '"gpu.nvidia.com"',
     "classes that select no NVIDIA device"),
    ("extra values switch the ClusterPolicy off for DRA",
     with_changes(gpuOperator={"extraValues": {"clusterPolicy": {"deployCR": False}}}),
     "gpu-platform:gpuOperator.extraValues.clusterPolicy.deployCR",
     "generated from other settings", "keys the program does not set"),
    ("extra values put NVIDIA_VISIBLE_DEVICES back in charge",
     with_changes(gpuOperator={"extraValues": {"toolkit": {"env": []}}}),
     "gpu-platform:gpuOperator.extraValues.toolkit.env",
     "generated from other settings", "keys the program does not set"),
    ("no cluster", {k: v for k, v in MINIMAL.items() if k != "cluster"},
     "gpu-platform:cluster", "required setting is missing", "required setting is missing"),
    ("kubeconfig that does not exist",
     with_changes(cluster={"kubeconfig": "/nonexistent/kubeconfig"}),
     "gpu-platform:cluster.kubeconfig", '"/nonexistent/kubeconfig"', "unset for $KUBECONFIG"),
    ("context the kubeconfig does not have",
     with_changes(cluster={"kubeconfig": str(KUBECONFIG), "context": "prod"}),
     "gpu-platform:cluster.context", '"prod"', "one of gpu-cluster, staging"),
    ("node-pool taint mode with names",
     with_changes(gpuNodes={"taintedBy": "nodePool"}),
     "gpu-platform:gpuNodes.names", '["gpu-node-1"]', "set taints and labels on the node pool"),
    ("node-pool taint mode with labels",
     with_changes(gpuNodes={"taintedBy": "nodePool", "names": [], "labels": {"a": "b"}}),
     "gpu-platform:gpuNodes.labels", '{"a": "b"}', "taintedBy: program"),
    ("program taint mode without names", with_changes(gpuNodes={"names": []}),
     "gpu-platform:gpuNodes.names", "[]", "or taintedBy: nodePool"),
    ("local chart that does not exist",
     with_changes(gpuOperator={"chartPath": "/nonexistent/gpu-operator"}),
     "gpu-platform:gpuOperator.chartPath", '"/nonexistent/gpu-operator"', "unset to install"),
    ("chart repository without a scheme",
     with_changes(monitoring={"repository": "charts.example.com"}),
     "gpu-platform:monitoring.repository", '"charts.example.com"', "oci:// registry"),
    ("registry mirror with a scheme",
     with_changes(imageRegistryMirror="https://registry.example.com"),
     "gpu-platform:imageRegistryMirror", '"https://registry.example.com"', "without a scheme"),
    ("receiver with two destinations", with_changes(monitoring={"alertmanager": {"receivers": [
        {"name": "x", "severities": ["critical"], "webhookUrl": "https://a.example/",
         "pagerdutyRoutingKey": "k"}]}}),
     "gpu-platform:monitoring.alertmanager.receivers[0]", '["webhookUrl", "pagerdutyRoutingKey"]',
     "one of webhookUrl, slackApiUrl (with slackChannel) or pagerdutyRoutingKey"),
    ("slack receiver without a channel", with_changes(monitoring={"alertmanager": {"receivers": [
        {"name": "x", "severities": ["warning"], "slackApiUrl": "https://hooks.example/x"}]}}),
     "gpu-platform:monitoring.alertmanager.receivers[0].slackChannel", "null",
     "slackChannel such as #gpu-alerts"),
    ("receiver for an unknown severity", with_changes(monitoring={"alertmanager": {"receivers": [
        {"name": "x", "severities": ["page"], "webhookUrl": "https://a.example/"}]}}),
     "gpu-platform:monitoring.alertmanager.receivers[0].severities[0]", '"page"',
     "'critical', 'warning' or 'info'"),
    ("storage class not a name", with_changes(monitoring={"storage": {
        "storageClassName": "Fast SSD"}}),
     "gpu-platform:monitoring.storage.storageClassName", '"Fast SSD"', "DNS-1123 subdomain"),
    ("extra value changes the dashboard label",
     with_changes(monitoring={"extraValues": {"grafana": {"sidecar": {"dashboards": {
         "label": "x"}}}}}),
     "gpu-platform:monitoring.extraValues.grafana.sidecar.dashboards.label",
     "generated from other settings", "keys the program does not set"),
    ("shape not increasing", with_changes(scheduler={"scoringStrategy": {
        "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 5},
                                               {"utilization": 50, "score": 10}]}}}),
     "gpu-platform:scheduler.scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
     "50", "a value above 50"),
    ("utilization over 100", with_changes(scheduler={"scoringStrategy": {
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                               {"utilization": 101, "score": 10}]}}}),
     "gpu-platform:scheduler.scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
     "101", "less than or equal to 100"),
    ("score over 10", with_changes(scheduler={"scoringStrategy": {
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11}]}}}),
     "gpu-platform:scheduler.scoringStrategy.requestedToCapacityRatio.shape[0].score",
     "11", "less than or equal to 10"),
    ("weight zero", with_changes(scheduler={"scoringStrategy": {
        "resources": [{"name": "nvidia.com/gpu", "weight": 0}]}}),
     "gpu-platform:scheduler.scoringStrategy.resources[0].weight", "0",
     "greater than or equal to 1"),
    ("weight over 100", with_changes(scheduler={"scoringStrategy": {
        "resources": [{"name": "nvidia.com/gpu", "weight": 101}]}}),
     "gpu-platform:scheduler.scoringStrategy.resources[0].weight", "101",
     "less than or equal to 100"),
    ("scoring ignores GPUs", with_changes(scheduler={"scoringStrategy": {
        "resources": [{"name": "cpu", "weight": 1}]}}),
     "gpu-platform:scheduler.scoringStrategy.resources", '["cpu"]', "nvidia.com/gpu"),
    ("unknown score plugin", with_changes(scheduler={"scorePluginWeights": {"MostPacked": 2}}),
     "gpu-platform:scheduler.scorePluginWeights.MostPacked", '"MostPacked"',
     "TaintToleration, NodeAffinity, NodeResourcesFit"),
    ("packing plugin turned off",
     with_changes(scheduler={"scorePluginWeights": {"NodeResourcesFit": 0}}),
     "gpu-platform:scheduler.scorePluginWeights.NodeResourcesFit", "0",
     "1..100 (NodeResourcesFit is the plugin that packs)"),
    ("nodes to score over 100", with_changes(scheduler={"percentageOfNodesToScore": 101}),
     "gpu-platform:scheduler.percentageOfNodesToScore", "101", "less than or equal to 100"),
    ("mixed MIG without profiles",
     with_changes(gpuOperator={"mig": {"strategy": "mixed"}}),
     "gpu-platform:gpuOperator.mig.profiles", "[]", "the profiles in use"),
    ("MIG profiles with the single strategy",
     with_changes(gpuOperator={"mig": {"strategy": "single", "profiles": ["1g.10gb"]}}),
     "gpu-platform:gpuOperator.mig.profiles", '["1g.10gb"]', "strategy: mixed"),
    ("MIG profile with a resource prefix",
     with_changes(gpuOperator={"mig": {"strategy": "mixed",
                                       "profiles": ["nvidia.com/mig-1g.10gb"]}}),
     "gpu-platform:gpuOperator.mig.profiles[0]", '"nvidia.com/mig-1g.10gb"', "such as 1g.10gb"),
    ("scheduler in kube-system", with_changes(scheduler={"namespace": "kube-system"}),
     "gpu-platform:scheduler.namespace", '"kube-system"', "not one of default, kube-system"),
    ("two components share a namespace", with_changes(admission={"namespace": "monitoring"}),
     "gpu-platform:monitoring.namespace", '"monitoring"', "a separate namespace per component"),
    ("scheduler name not DNS", with_changes(scheduler={"name": "GPU Scheduler"}),
     "gpu-platform:scheduler.name", '"GPU Scheduler"', "DNS-1123 label"),
    ("preemptible class not below the default priority",
     with_changes(scheduler={"preemptibleClass": {"value": 0}}),
     "gpu-platform:scheduler.preemptibleClass.value", "0", "less than or equal to -1"),
    ("preemptible class named like a system class",
     with_changes(scheduler={"preemptibleClass": {"name": "system-preemptible"}}),
     "gpu-platform:scheduler.preemptibleClass.name", '"system-preemptible"',
     "such as gpu-preemptible"),
    ("GPU pod priority ceiling that refuses the preemptible class",
     with_changes(scheduler={"preemptibleClass": {"value": -100}},
                  admission={"maxGpuPodPriority": -200}),
     "gpu-platform:admission.maxGpuPodPriority", "-200", "at least -100"),
    ("one OPA replica", with_changes(admission={"replicas": 1}),
     "gpu-platform:admission.replicas", "1", "greater than or equal to 2"),
    ("unpinned OPA image", with_changes(admission={"opa": {"repository": "openpolicyagent/opa",
                                                           "tag": "latest"}}),
     "gpu-platform:admission.opa.tag", '"latest"', "never 'latest'"),
    ("resource pattern with inner star",
     with_changes(admission={"gpuResourceNames": ["nvidia.com/*-gpu"]}),
     "gpu-platform:admission.gpuResourceNames[0]", '"nvidia.com/*-gpu"', "a prefix ending in *"),
    ("admission mode unknown", with_changes(admission={"mode": "warn"}),
     "gpu-platform:admission.mode", '"warn"', "'enforce', 'mutate' or 'audit'"),
    ("audit mode that would refuse pods when OPA is down",
     with_changes(admission={"mode": "audit", "failurePolicy": "Fail"}),
     "gpu-platform:admission.failurePolicy", '"Fail"', "Ignore (the default in audit mode)"),
    ("runtime class not a name", with_changes(admission={"nvidiaRuntimeClasses": ["NVIDIA"]}),
     "gpu-platform:admission.nvidiaRuntimeClasses[0]", '"NVIDIA"', "DNS-1123 subdomains"),
    ("failure policy unknown", with_changes(admission={"failurePolicy": "Retry"}),
     "gpu-platform:admission.failurePolicy", '"Retry"', "'Fail' or 'Ignore'"),
    ("webhook timeout too long", with_changes(admission={"timeoutSeconds": 31}),
     "gpu-platform:admission.timeoutSeconds", "31", "less than or equal to 30"),
    ("renewal window longer than validity",
     with_changes(admission={"certificate": {"serverValidityHours": 720,
                                             "earlyRenewalHours": 720}}),
     "gpu-platform:admission.certificate.earlyRenewalHours", "720",
     "fewer hours than the shortest validity (720)"),
    ("exempt namespace invalid", with_changes(admission={"exemptNamespaces": ["Team A"]}),
     "gpu-platform:admission.exemptNamespaces[0]", '"Team A"', "DNS-1123"),
    ("scrape interval not a duration", with_changes(monitoring={"scrapeInterval": "15"}),
     "gpu-platform:monitoring.scrapeInterval", '"15"', "Prometheus duration"),
    ("compaction schedule not cron", with_changes(compaction={"enabled": True,
                                                              "schedule": "every 15m"}),
     "gpu-platform:compaction.schedule", '"every 15m"', "minute hour day-of-month"),
    ("compaction min age in days", with_changes(compaction={"minPodAge": "1d"}),
     "gpu-platform:compaction.minPodAge", '"1d"', "Go duration"),
    ("compaction node selector with a set", with_changes(compaction={
        "nodeSelector": "nvidia.com/gpu.present in (true)"}),
     "gpu-platform:compaction.nodeSelector", "in (true)", "key=value"),
    ("compaction threshold of 100", with_changes(compaction={"underusedPercent": 100}),
     "gpu-platform:compaction.underusedPercent", "100", "less than or equal to 99"),
    ("compaction in the scheduler's namespace", with_changes(compaction={
        "enabled": True, "namespace": "gpu-scheduler"}),
     "gpu-platform:compaction.namespace", '"gpu-scheduler"', "separate namespace"),
    ("compaction opt-in label not a key", with_changes(compaction={"optInLabel": "may move"}),
     "gpu-platform:compaction.optInLabel", '"may move"', "DNS-subdomain prefix"),
    ("reclaim on with nothing opted in", with_changes(reclaim={"enabled": True}),
     "gpu-platform:reclaim.enabled", "true", "at least one namespace"),
    ("activity threshold as a percentage", with_changes(monitoring={"usage": {
        "activeThreshold": 5}}),
     "gpu-platform:monitoring.usage.activeThreshold", "5", "between 0 and 1"),
    ("reclaim window too short", with_changes(reclaim={"idleFor": "5m"}),
     "gpu-platform:reclaim.idleFor", '"5m"', "10m or more"),
    ("reclaim window past the retention", with_changes(reclaim={
        "enabled": True, "namespaces": ["ml"], "idleFor": "30d"}),
     "gpu-platform:reclaim.idleFor", '"30d"', "15d or less"),
    ("reclaim grace period not a duration", with_changes(reclaim={"gracePeriod": "4 hours"}),
     "gpu-platform:reclaim.gracePeriod", '"4 hours"', "Prometheus duration"),
    ("reclaim of an exempt namespace", with_changes(
        admission={"exemptNamespaces": ["infra"]},
        reclaim={"enabled": True, "namespaces": ["infra"]}),
     "gpu-platform:reclaim.namespaces[0]", '"infra"', "not exempt"),
    ("reclaim of the monitoring namespace", with_changes(
        reclaim={"enabled": True, "namespaces": ["ml", "monitoring"]}),
     "gpu-platform:reclaim.namespaces[1]", '"monitoring"', "not the platform's own"),
    ("reclaim of kube-system", with_changes(
        reclaim={"enabled": True, "namespaces": ["kube-system"]}),
     "gpu-platform:reclaim.namespaces[0]", '"kube-system"', "not exempt"),
    ("reclaim of a team that does not exist", with_changes(teams=TEAMS, reclaim={
        "enabled": True, "teams": ["research", "robotics"]}),
     "gpu-platform:reclaim.teams[1]", '"robotics"', "one of research, vision"),
    ("reclaim of a team without teams", with_changes(reclaim={
        "enabled": True, "teams": ["research"]}),
     "gpu-platform:reclaim.teams[0]", '"research"', "teams.enabled: true"),
    ("reclaim with an existing monitoring stack and no Prometheus URL", with_changes(
        monitoring={"stack": "existing"}, reclaim={"enabled": True, "namespaces": ["ml"]}),
     "gpu-platform:reclaim.prometheusUrl", "null", "prometheus-operated"),
    ("reclaim Prometheus URL without a scheme", with_changes(reclaim={
        "prometheusUrl": "prometheus:9090"}),
     "gpu-platform:reclaim.prometheusUrl", '"prometheus:9090"', "http(s)://host"),
    ("reclaim keep annotation not a key", with_changes(reclaim={"keepAnnotation": "keep me"}),
     "gpu-platform:reclaim.keepAnnotation", '"keep me"', "DNS-subdomain prefix"),
    ("reclaim action unknown", with_changes(reclaim={"action": "delete"}),
     "gpu-platform:reclaim.action", '"delete"', "'report' or 'evict'"),
    ("reclaim schedule not cron", with_changes(reclaim={"schedule": "hourly"}),
     "gpu-platform:reclaim.schedule", '"hourly"', "minute hour day-of-month"),
    ("reclaim without a limit", with_changes(reclaim={"maxEvictionsPerRun": 0}),
     "gpu-platform:reclaim.maxEvictionsPerRun", "0", "greater than or equal to 1"),
    ("a receiver of a team that does not exist", with_changes(teams=TEAMS, monitoring={
        "alertmanager": {"receivers": [{"name": "chat", "severities": ["info"],
                                        "teams": ["robots"],
                                        "webhookUrl": "https://chat.example/in"}]}}),
     "gpu-platform:monitoring.alertmanager.receivers[0].teams[0]", '"robots"',
     "one of research, vision"),
]


@pytest.mark.parametrize("settings, setting, value, allowed",
                         [case[1:] for case in MISTAKES], ids=[case[0] for case in MISTAKES])
def test_bad_setting_is_named_with_its_value_and_nothing_is_registered(settings, setting, value,
                                                                       allowed):
    with pytest.raises(SettingsError) as raised:
        recording = harness.Recording()
        try:
            harness.run_program(harness.stack_file_config(settings), recording)
        finally:
            assert recording.registrations == [], "a resource was registered before validation"
    lines = [p for p in raised.value.problems if p.startswith(setting + " ") or
             p.startswith(setting + ":")]
    assert lines, f"no problem names {setting}: {raised.value.problems}"
    assert value in lines[0] and allowed in lines[0], lines[0]


def test_every_problem_is_reported_at_once():
    settings = with_changes(kubernetesVersion="1.28.0", scheduler={"replicas": 0},
                            admission={"timeoutSeconds": 0})
    with pytest.raises(SettingsError) as raised:
        load_settings(raw(settings))
    named = " ".join(raised.value.problems)
    for setting in ("kubernetesVersion", "scheduler.replicas", "admission.timeoutSeconds"):
        assert f"gpu-platform:{setting}" in named


def test_example_stack_is_valid_and_complete(example_settings):
    stack = {key: parse_config_value(value) for key, value in harness.example_config().items()}
    assert example_settings.kubernetes_version == stack["gpu-platform:kubernetesVersion"]
    # The example sets every setting there is, so it doubles as the reference. The one secret
    # is shown as the command that sets it.
    text = harness.EXAMPLE_STACK.read_text()
    assert "pulumi config set --secret --path monitoring.grafana.adminPassword" in text
    # A top-level setting that is unset by default is shown as a commented example.
    assert "# gpu-platform:imageRegistryMirror: " in text
    # A setting its other settings refuse is shown commented, with its value.
    assert "#   maxNodes: " in text
    paths = setting_paths(type(example_settings))
    assert "teams.teams[].queueingStrategy" in paths
    for path in paths:
        if path in ("monitoring.grafana.adminPassword", "imageRegistryMirror",
                    "gpuNodes.maxNodes"):
            continue
        if path.startswith(receivers := "monitoring.alertmanager.receivers[]."):
            # Each sends to a secret: shown as the commands that set one.
            assert f"'{receivers.replace('[]', '[0]')}{path.removeprefix(receivers)}" in text, \
                f"Pulumi.dev.yaml shows no command that sets {path}"
            continue
        keys = path.replace("[].", "[] ").replace(".", " ").split()
        assert set_in({f"gpu-platform:{keys[0]}": stack.get(f"gpu-platform:{keys[0]}")},
                      [f"gpu-platform:{keys[0]}", *keys[1:]]), f"Pulumi.dev.yaml lacks {path}"


@pytest.mark.parametrize("gpu_nodes, unset", [
    ({"taintedBy": "nodePool", "names": []}, "gpuNodes.maxNodes and gpuNodes.gpusPerNode not set"),
    ({"taintedBy": "nodePool", "names": [], "gpusPerNode": 8}, "gpuNodes.maxNodes not set"),
    ({"names": ["gpu-node-1"]}, "gpuNodes.gpusPerNode not set")])
def test_quotas_the_settings_cannot_check_are_named_in_every_run(gpu_nodes, unset):
    settings = load_settings(raw(with_changes(gpuNodes=gpu_nodes, teams=TEAMS)))
    assert [w for w in settings.warnings if "were not checked" in w] == [
        "gpu-platform: the teams' quotas of nvidia.com/gpu (adding up to 8) were not checked "
        f"against what the GPU nodes hold: {unset}; set "
        f"{'them' if ' and ' in unset else 'it'} to have a quota beyond the nodes refused"]
    checked = load_settings(raw(with_changes(
        gpuNodes={"taintedBy": "nodePool", "names": [], "maxNodes": 2, "gpusPerNode": 4},
        teams=TEAMS)))
    assert not [w for w in checked.warnings if "were not checked" in w]


def test_minimal_stack_gets_documented_defaults():
    settings = load_settings(raw(MINIMAL))
    assert str(settings.gpu_nodes.taint) == "nvidia.com/gpu=present:NoSchedule"
    assert settings.scheduler.name == "gpu-binpack-scheduler"
    assert settings.gpu_operator.chart_version == "v26.7.0"
    assert settings.monitoring.chart_version == "88.5.3"
    assert settings.gpu_operator.driver.enabled is False
    off = ("mig_manager", "vgpu_manager", "vgpu_device_manager", "vfio_manager")
    assert not any(getattr(settings.gpu_operator, name).enabled for name in off)
    assert settings.admission.gpu_resource_names == ["nvidia.com/*"]
    assert (settings.admission.mode, settings.admission.failure_policy) == ("enforce", "Fail")


def test_audit_mode_never_blocks_a_pod_by_default():
    settings = load_settings(raw(with_changes(admission={"mode": "audit"})))
    assert settings.admission.failure_policy == "Ignore"


def test_taint_accepts_kubectl_and_object_forms():
    as_text = with_changes(gpuNodes={"taint": "example.com/accelerator:NoExecute"})
    as_object = with_changes(gpuNodes={"taint": {"key": "example.com/accelerator",
                                                 "effect": "NoExecute"}})
    parsed = [load_settings(raw(s)).gpu_nodes.taint for s in (as_text, as_object)]
    assert parsed[0] == parsed[1]
    assert parsed[0].value == "" and str(parsed[0]) == "example.com/accelerator:NoExecute"


def setting_paths(model, prefix: str = "") -> list[str]:
    """Every leaf setting of a settings model, as dotted camelCase paths; a list of sections
    (`teams.teams`) is `[]`, followed by the paths within an item."""
    from typing import get_args, get_origin

    from pydantic import BaseModel

    def section(annotation) -> type[BaseModel] | None:
        if (isinstance(annotation, type) and issubclass(annotation, BaseModel)
                and annotation.__name__ not in ("Taint", "ImageSettings")):
            return annotation
        return None

    paths = []
    for field in model.model_fields.values():
        path = f"{prefix}{field.alias}"
        annotation = field.annotation
        if inner := section(annotation):
            paths.extend(setting_paths(inner, path + "."))
        elif get_origin(annotation) is list and (item := section(get_args(annotation)[0])):
            paths.extend(setting_paths(item, path + "[]."))
        else:
            paths.append(path)
    return paths


def set_in(node, keys: list[str]) -> bool:
    """Whether the stack file's value `node` sets the setting at `keys` (after `[]`, in some
    item of the list)."""
    if not keys:
        return True
    key, *rest = keys
    if key.endswith("[]"):
        items = node.get(key[:-2]) if isinstance(node, dict) else None
        return isinstance(items, list) and any(set_in(item, rest) for item in items)
    return isinstance(node, dict) and key in node and set_in(node[key], rest)


@pytest.mark.parametrize("section", ["compaction", "reclaim", "reservation"])
@pytest.mark.parametrize("schedule", ["@hourly", "*/10 * * *", "0 3 * * MON"])
def test_a_runs_schedule_is_five_numeric_cron_fields(section, schedule):
    """Each in-cluster run's schedule is refused, naming the setting, unless it is five numeric
    cron fields (a CronJob takes macros and names; the benchmark's and the docs' arithmetic on
    schedules does not)."""
    with pytest.raises(SettingsError) as refused:
        load_settings(raw(with_changes(**{section: {"schedule": schedule}})))
    assert f'gpu-platform:{section}.schedule = "{schedule}": not a cron schedule; allowed: ' \
           'five numeric fields: minute hour day-of-month month day-of-week, e.g. ' \
           '"*/10 * * * *"' in refused.value.problems


def test_a_setting_of_an_earlier_release_is_ignored_with_a_warning():
    """admission.kubeMgmt named the kube-mgmt image, which no longer runs: a stack file that
    still sets it deploys, and the run says the key can go."""
    config = raw(with_changes(admission={"kubeMgmt": {"repository": "openpolicyagent/kube-mgmt",
                                                      "tag": "11.0.7"}}))
    assert load_settings(config) == load_settings(raw(MINIMAL))
    assert retired_settings(config) == [
        "gpu-platform:admission.kubeMgmt is ignored: kube-mgmt no longer runs (OPA loads its "
        "policy from its ConfigMap itself); remove the key"]
    assert retired_settings(raw(MINIMAL)) == []


def test_the_idle_thresholds_of_earlier_releases_give_way_to_the_one_threshold():
    """Idle was judged by three thresholds; a stack file that still sets the alert's or
    reclaim's deploys, and the run names the one that decides now."""
    config = raw(with_changes(reclaim={"idleBelow": 0.1},
                              monitoring={"alerts": {"idleUtilizationPercent": 10}}))
    assert load_settings(config) == load_settings(raw(MINIMAL))
    warnings = retired_settings(config)
    assert [w.split(" is ignored")[0] for w in warnings] == [
        "gpu-platform:reclaim.idleBelow", "gpu-platform:monitoring.alerts.idleUtilizationPercent"]
    assert all("monitoring.usage.activeThreshold" in w for w in warnings)
