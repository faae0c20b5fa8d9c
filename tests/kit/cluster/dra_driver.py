"""What the GPU Operator does on the DRA path before any GPU pod runs, as its v26.7.0
manifests (state-dra-driver) do: the rights it gives itself and its DRA driver's kubelet plugin,
and the DeviceClass of whole GPUs it creates. Shared by the DRA suite and the playground."""

from collections.abc import Callable

from components.gpu_operator.dra import NVIDIA_DRA_DRIVER, NVIDIA_DRA_KUBELET_PLUGIN
from components.platform.settings import StackSettings
from tests.kit.cluster.controlplane import ControlPlane, Kube
from tests.kit.cluster.declared_objects import TEST_MANAGER


def driver_user(settings: StackSettings) -> str:
    return f"system:serviceaccount:{settings.gpu_operator.namespace}:{NVIDIA_DRA_KUBELET_PLUGIN}"


def operator_grants(cp: ControlPlane) -> Callable[[StackSettings], None]:
    """What the GPU Operator grants itself and its DRA driver's kubelet plugin, and the
    DeviceClass of whole GPUs it creates (manifests/state-dra-driver of v26.7.0)."""
    def grant_and_create(settings: StackSettings) -> None:
        operator_user = f"system:serviceaccount:{settings.gpu_operator.namespace}:gpu-operator"
        for user, resource in ((driver_user(settings), "resourceslices"),
                               (operator_user, "deviceclasses")):
            grant(cp.admin, user, resource)
        cp.impersonating(operator_user).create({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": NVIDIA_DRA_DRIVER},
            "spec": {"selectors": [{"cel": {"expression":
                f"device.driver == '{NVIDIA_DRA_DRIVER}' && "
                f"device.attributes['{NVIDIA_DRA_DRIVER}'].type == 'gpu'"}}]}})
    return grant_and_create


def grant(kube: Kube, user: str, resource: str) -> None:
    """`user` may write `resource` (of resource.k8s.io) cluster-wide."""
    name = f"{resource}-writer-{user.rsplit(':', 1)[1]}"
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name}, "rules": [
                    {"apiGroups": ["resource.k8s.io"], "resources": [resource],
                     "verbs": ["get", "list", "watch", "create", "update", "delete"]}]},
               TEST_MANAGER)
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": name},
                "subjects": [{"kind": "User", "name": user}]}, TEST_MANAGER)
