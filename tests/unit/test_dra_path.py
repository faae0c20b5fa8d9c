"""What the components declare on the DRA path (`gpuOperator.gpuPath: dra`): the chart's DRA
stack in place of the device plugin, the platform's DeviceClasses, and Kueue's and the operator's
quotas counting GPU claims."""

from components import gpu_operator, teams
from components.base.facts import (
    COMPUTE_DOMAIN_LABEL,
)
from components.base.model import minor_release
from components.binpack_scheduler.preemption import NO_DRA_PREEMPTION_THROUGH
from components.opa_admission.compute_domains import compute_domain_policy
from tests.kit import harness, tools
from tests.kit.harness import admission_of, operator_of
from tests.kit.stacks import TEAMS
from tests.unit.test_components import DEFAULT, settings_of

DRA = settings_of(kubernetesVersion="1.37.2",
                  gpuOperator={"gpuPath": "dra", "mig": {"strategy": "mixed",
                                                         "profiles": ["1g.10gb"]}})


def test_the_dra_path_deploys_the_chart_s_dra_stack_instead_of_the_device_plugin():
    values = gpu_operator.chart_values(operator_of(DRA))
    assert values["clusterPolicy"] == {"deployCR": False}
    assert values["gpuCluster"] == {"deployCR": True}
    assert gpu_operator.chart_values(operator_of(DEFAULT))["clusterPolicy"] == {"deployCR": True}
    images = {image.image for image in gpu_operator.chart_images(operator_of(DRA))}
    assert "dra-driver-nvidia-gpu" in images
    assert not images & {"k8s-device-plugin", "container-toolkit"}
    # The operator's DCGM exporter claims every GPU with adminAccess in its own namespace.
    labels = gpu_operator.operator_namespace(operator_of(DRA))["metadata"]["labels"]
    assert labels["resource.kubernetes.io/admin-access"] == "true"
    assert "resource.kubernetes.io/admin-access" not in gpu_operator.operator_namespace(
        operator_of(DEFAULT))["metadata"]["labels"]


def test_a_driver_the_operator_installs_on_the_dra_path_comes_from_its_driver_resource():
    driver = settings_of(kubernetesVersion="1.37.2",
                         gpuOperator={"gpuPath": "dra", "driver": {"enabled": True}})
    values = gpu_operator.chart_values(operator_of(driver))
    assert values["driver"] == {"enabled": True,
                                "nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": True}}


def test_the_dra_driver_s_values_are_the_pinned_chart_s():
    extra = {"draDriver": {"featureGates": {"MPSSupport": True},
                           "computeDomains": {"enabled": False}}}
    values = gpu_operator.chart_values(operator_of(settings_of(
        kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra", "extraValues": extra})))
    assert values["draDriver"] == extra["draDriver"]


def test_the_platform_s_device_classes_serve_the_gpu_resources_from_nvidia_s_driver():
    classes = {c["metadata"]["name"]: c["spec"]
               for c in gpu_operator.device_classes(operator_of(DRA))}
    gpu = classes[gpu_operator.GPU_DEVICE_CLASS]
    assert gpu["extendedResourceName"] == "nvidia.com/gpu"
    assert gpu["selectors"] == [{"cel": {"expression":
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]
    mig = classes[gpu_operator.mig_device_class("1g.10gb")]
    assert mig["extendedResourceName"] == "nvidia.com/mig-1g.10gb"
    assert "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'" in \
        mig["selectors"][0]["cel"]["expression"]
    assert gpu_operator.device_classes(operator_of(DEFAULT)) == []


def test_on_the_dra_path_kueue_counts_a_gpu_claim_against_the_gpu_quota():
    dra_teams = settings_of(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"},
                            teams=TEAMS)
    config = teams.kueue_configuration(harness.inputs_of(dra_teams).teams)
    assert config["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu",
         "deviceClassNames": [gpu_operator.GPU_DEVICE_CLASS, "gpu.nvidia.com"]}]
    plain = teams.kueue_configuration(harness.inputs_of(settings_of(teams=TEAMS)).teams)
    assert "deviceClassMappings" not in plain["resources"]


def test_on_the_dra_path_the_operator_s_quota_counts_the_dra_stack():
    # The kubelet plugin, the validator and the DCGM exporter on each GPU node.
    assert gpu_operator.critical_pods(operator_of(DRA)) < \
        gpu_operator.critical_pods(operator_of(DEFAULT))


def test_pods_joining_a_compute_domain_are_decided_by_the_api_server_on_the_dra_path_only():
    assert compute_domain_policy(admission_of(DEFAULT)) == []
    policy, binding = compute_domain_policy(admission_of(DRA))
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # The namespace's ComputeDomain claim templates are the parameters; other templates are not.
    assert binding["spec"]["paramRef"]["selector"] == {"matchExpressions": [
        {"key": COMPUTE_DOMAIN_LABEL, "operator": "Exists"}]}
    exempt = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
    assert exempt["operator"] == "NotIn" and "kube-system" in exempt["values"]
    audit = settings_of(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"},
                        admission={"mode": "audit", "failurePolicy": "Ignore"})
    assert compute_domain_policy(admission_of(audit))[1]["spec"]["validationActions"] == [
        "Warn", "Audit"]


def test_a_preemptible_class_on_the_dra_path_is_named_in_a_warning_on_every_run():
    [warning] = settings_of(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"}).warnings
    assert warning.startswith("gpu-platform: scheduler.preemptibleClass.enabled with "
                              "gpuOperator.gpuPath: dra: kube-scheduler 1.37.2 does not preempt "
                              "for DRA devices (KEP-5690")
    assert "waits for pods of gpu-preemptible to end" in warning
    assert "docs/concepts/preemptible-gpu-pods.md#on-the-dra-path" in warning
    [newer] = settings_of(kubernetesVersion="1.38.0", gpuOperator={"gpuPath": "dra"}).warnings
    assert "whether kube-scheduler 1.38.0 preempts for DRA devices was not checked (up to " \
           "1.37 it does not)" in newer
    assert settings_of(kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"},
                       scheduler={"preemptibleClass": {"enabled": False}}).warnings == []
    assert DEFAULT.warnings == []


def test_the_release_the_warning_names_is_the_one_the_integration_suite_shows():
    """tests/integration/test_dra.py shows the DRA path's scheduler not preempting for GPUs on
    this release; the warning holds up to its minor version."""
    assert NO_DRA_PREEMPTION_THROUGH == minor_release(tools.DRA_KUBERNETES_VERSION)
