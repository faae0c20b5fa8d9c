"""What OPA loads when it starts: the admission policy's files with their parameters, and its
own server policy; a digest of all of it names the generation of OPA that serves them."""

import json
from pathlib import Path

from ..base.facts import (
    ADMISSION_GATE,
    AUDIT_LABEL,
    KUEUE_DEFAULT_QUEUE,
    KUEUE_PREFIX,
    MANAGED_LABEL,
    PARENT_ANNOTATION,
    POD_GROUP_KEY,
    PODSET_LABEL,
    PREFERRED_TOPOLOGY,
    PROFILE_PLACEHOLDER,
    REQUIRED_TOPOLOGY,
    TOPOLOGY_GATE,
    KueueIntegration,
    kueue_integrations,
)
from .facts import (
    BUILTIN_PRIORITY_CLASSES,
    CLAIM_CONTROLLERS,
    COMPUTE_DOMAIN_CONFIG_KINDS,
    DAEMONSET_CONTROLLERS,
    DEVICE_ANNOTATION_PREFIXES,
    DEVICE_CLASS_RESOURCE_PREFIX,
    DEVICE_HOST_PATHS,
    GPU_SHARING_CONFIG_KINDS,
    JOB_CONTROLLERS,
    NVIDIA_DEVICE_CLASS_SUFFIX,
    PARENT_CONTROLLERS,
    PRIVILEGED_CAPABILITIES,
    TOOLKIT_DEVICE_LIST_ROOT,
    WORKLOAD_KINDS,
    PodTemplate,
    path_spellings,
)
from .inputs import OpaAdmissionInputs

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"
# The rules the webhooks ask for: data.gpuplatform.admission.review (validating) and .mutation
# (mutating) of the policy in policy/admission. /v0/data takes the AdmissionReview as input
# and returns the rule's value as the response body.
DECISION_PATH = ("v0", "data", "gpuplatform", "admission", "review")
MUTATION_PATH = ("v0", "data", "gpuplatform", "admission", "mutation")
# The templates webhook's: warnings only, about the pods a workload's controller would make.
TEMPLATES_PATH = ("v0", "data", "gpuplatform", "admission", "templates")
# The admission policy (policy/admission) and its parameters, mounted at POLICY_MOUNT. The
# parameters are loaded at data.gpuplatform.params, where the policy reads them.
POLICY_CONFIGMAP = "opa-admission-policy"
POLICY_MOUNT = "/policy"
PARAMS_KEY = "params.json"
PARAMS_ROOT = "gpuplatform.params"
# OPA's own API authorization and health rules (policy/opa), with their data, at
# SERVER_POLICY_MOUNT; the data at data.opa_server.
SERVER_POLICY_CONFIGMAP = "opa-server-policy"
SERVER_POLICY_MOUNT = "/server-policy"
SERVER_DATA_KEY = "opa-server.json"
SERVER_DATA_ROOT = "opa_server"


def rego_files(subdir: str) -> dict[str, str]:
    """The policy files under `policy/<subdir>` that ship, by file name (tests stay behind). A
    ConfigMap's keys are file names, so the rule groups' folders flatten, and two files of one
    name would be one key: refused."""
    shipped = [path for path in sorted((POLICY_DIR / subdir).rglob("*.rego"))
               if not path.name.endswith("_test.rego")]
    names = [path.name for path in shipped]
    if len(set(names)) != len(names):
        raise ValueError(f"policy/{subdir}: policy files share a name: {sorted(names)}")
    return {path.name: path.read_text() for path in shipped}


def policy_params(inputs: OpaAdmissionInputs) -> dict:
    """The admission policy's parameters, as the policy reads them (data ... params.json)."""
    adm = inputs.admission
    return {
        "mode": adm.mode,
        "schedulerName": inputs.scheduler_name,
        "gpuResourceNames": guarded_resource_names(inputs),
        "deviceClassResourcePrefix": DEVICE_CLASS_RESOURCE_PREFIX,
        "exemptNamespaces": inputs.exempt_namespaces,
        "gpuNodeNames": list(inputs.gpu_nodes.names or []),
        # With node pools the program knows no GPU node's name: any pod bound by name may be on
        # one.
        "gpuNodeNamesKnown": inputs.gpu_nodes.names is not None,
        # The first taint keeps other pods off GPU nodes; GPU pods need to tolerate them all.
        "gpuTaints": [{**taint.as_manifest(), "value": taint.value, "text": str(taint),
                       "toleration": taint.toleration()} for taint in inputs.gpu_nodes.taints],
        # Taints the platform puts on a GPU node for a while (a reservation's, a fault's): no
        # pod may ask to tolerate them by name, but from the one user that gives it.
        "passingTaints": [{"key": taint.key, "meaning": taint.meaning,
                           "givenBy": taint.given_by or ""}
                          for taint in inputs.gpu_nodes.passing_taints],
        "gpuRuntimeClasses": list(adm.nvidia_runtime_classes),
        "daemonSetControllers": list(DAEMONSET_CONTROLLERS),
        "auditLabel": AUDIT_LABEL,
        "gpuPath": inputs.gpu_path,
        "draDeviceClassSuffixes": [NVIDIA_DEVICE_CLASS_SUFFIX],
        "platformDeviceClasses": [c.model_dump(by_alias=True, exclude_none=True)
                                  for c in inputs.platform_device_classes],
        "claimWriters": claim_writers(inputs),
        "draWriters": inputs.dra_writers.model_dump(by_alias=True),
        "deviceTaintWriters": list(adm.device_taint_writers),
        "gpuSharingConfigKinds": list(GPU_SHARING_CONFIG_KINDS),
        "computeDomainConfigKinds": list(COMPUTE_DOMAIN_CONFIG_KINDS),
        "allowedDeviceClasses": list(adm.device_classes),
        "privilegedCapabilities": list(PRIVILEGED_CAPABILITIES),
        # Each guarded host path in every spelling the node resolves to it.
        "deviceHostPaths": [spelling for path in DEVICE_HOST_PATHS
                            for spelling in path_spellings(path)],
        "toolkitDeviceListRoot": TOOLKIT_DEVICE_LIST_ROOT,
        "deviceAnnotationPrefixes": list(DEVICE_ANNOTATION_PREFIXES),
        "maxGpuPodPriority": adm.max_gpu_pod_priority,
        # "" when the class is not declared: then no pod can name it.
        "preemptibleClass": inputs.preemptible_class or "",
        "teams": team_params(inputs),
        "workloadTemplates": workload_templates(),
        "builtinPriorityClasses": BUILTIN_PRIORITY_CLASSES,
    }


def template_path(template: PodTemplate) -> dict:
    """A template's path as the policy walks it: the fields down to `at`, then (`each`: `item`
    of a list, `value` of a map, or "" for none) the fields `then` within each."""
    for marker, each in (("[]", "item"), ("{}", "value")):
        if marker in template.path:
            at, then = template.path.split(marker + ".")
            return {"at": at.split("."), "each": each, "then": then.split(".")}
    return {"at": template.path.split("."), "each": "", "then": []}


def workload_templates() -> dict[str, list[dict]]:
    """Each workload kind's pod templates, by `<group>/<kind>`: where they are, who creates
    their pods and the owner reference it sets on them."""
    return {f"{w.group}/{w.kind}": [
        {**template_path(t), "creator": t.creator,
         "owner": {"apiVersion": t.owner[0], "kind": t.owner[1]}} for t in w.templates]
        for w in WORKLOAD_KINDS}


def team_params(inputs: OpaAdmissionInputs) -> dict:
    """What the policy keeps GPU pods in the teams' queues with: the team of each namespace,
    what Kueue marks the pods it manages with, and who creates the pods of the Jobs it admits."""
    teams = inputs.teams
    return {
        "enabled": teams is not None,
        "namespaces": teams.namespaces if teams else {},
        "gpuPodsOutsideTeams": teams.gpu_pods_outside_teams if teams else "admit",
        "queue": KUEUE_DEFAULT_QUEUE,
        "kueueUsers": [teams.kueue_user] if teams else [],
        "workloadControllers": list(teams.workload_controllers) if teams else [],
        "suspendedKinds": {f"{i.group}/{i.kind}": i.suspend.split(".")
                           for i in suspended_integrations(inputs)},
        "admissionGate": ADMISSION_GATE,
        "gates": [ADMISSION_GATE, TOPOLOGY_GATE],
        "managedLabel": MANAGED_LABEL,
        "parentAnnotation": PARENT_ANNOTATION,
        "parentControllers": list(PARENT_CONTROLLERS),
        "podGroupKey": POD_GROUP_KEY,
        "podSetLabel": PODSET_LABEL,
        "metadataPrefix": KUEUE_PREFIX,
        "jobControllers": list(JOB_CONTROLLERS),
        "topologyLevels": list(teams.topology_levels) if teams else [],
        "topologyRequests": [REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY],
    }


def suspended_integrations(inputs: OpaAdmissionInputs) -> list[KueueIntegration]:
    """The kinds Kueue suspends in a team namespace until it admits them: Jobs, and the
    stack's frameworks' that have a suspend field. None without teams."""
    if inputs.teams is None:
        return []
    return [i for i in kueue_integrations(inputs.teams.frameworks) if i.suspend]


def guarded_resource_names(inputs: OpaAdmissionInputs) -> list[str]:
    """Every resource name (a trailing * matches a prefix) that may resolve to a GPU: the
    stack's GPU resources, those the platform's DeviceClasses serve, and every DeviceClass's own
    name (the policy lets through those of `admission.deviceClasses`). The webhooks' conditions
    and the policy both read this list."""
    served = [c.spec["extendedResourceName"].replace(PROFILE_PLACEHOLDER, "*")
              for c in inputs.platform_device_classes if "extendedResourceName" in c.spec]
    names = [*inputs.admission.gpu_resource_names, *served, DEVICE_CLASS_RESOURCE_PREFIX + "*"]
    return list(dict.fromkeys(names))


def claim_writers(inputs: OpaAdmissionInputs) -> list[str]:
    """Who allocates and releases DRA claims: the schedulers and the resource-claim
    controller."""
    return [*CLAIM_CONTROLLERS, *([inputs.scheduler_user] if inputs.scheduler_user else [])]


def server_data() -> str:
    """data.opa_server for the authorization policy: the decisions callers may ask for."""
    return json.dumps({"admission_decision_paths": [list(DECISION_PATH), list(MUTATION_PATH),
                                                     list(TEMPLATES_PATH)]})


def loaded_files(inputs: OpaAdmissionInputs) -> dict[str, dict[str, str]]:
    """What OPA loads at start, by ConfigMap: the admission policy with its parameters, and
    OPA's own server policy with its data."""
    return {POLICY_CONFIGMAP: {**rego_files("admission"),
                               PARAMS_KEY: json.dumps(policy_params(inputs), indent=2)},
            SERVER_POLICY_CONFIGMAP: {**rego_files("opa"), SERVER_DATA_KEY: server_data()}}



def policy_files() -> list[str]:
    """OPA's file arguments: each policy by path, and each data file under the document it
    belongs at (a data file loaded with its directory would land at the root)."""
    return [*(f"{SERVER_POLICY_MOUNT}/{name}" for name in rego_files("opa")),
            f"{SERVER_DATA_ROOT}:{SERVER_POLICY_MOUNT}/{SERVER_DATA_KEY}",
            *(f"{POLICY_MOUNT}/{name}" for name in rego_files("admission")),
            f"{PARAMS_ROOT}:{POLICY_MOUNT}/{PARAMS_KEY}"]
