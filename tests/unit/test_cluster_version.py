"""What a preview says about the stack's cluster: a clear error when it cannot be found or
reached, and a warning when its Kubernetes version and kubernetesVersion break or strain the
version skew policy (against the real API server: tests/integration/test_controlplane.py)."""

import os
import socket

import pytest
import yaml

from components.platform.settings import ClusterSettings
from components.preview import cluster as stack_cluster
from components.preview.cluster import ClusterError, check_cluster
from tests.kit import harness
from tests.kit.stacks import KUBECONFIG


def settings_for(kubeconfig, context: str = "gpu-cluster", version: str = "1.36.4"):
    return harness.example_settings().model_copy(update={
        "cluster": ClusterSettings(context=context, kubeconfig=str(kubeconfig)),
        "kubernetes_version": version})


@pytest.mark.parametrize("server, says", [
    ("v1.36.4", None),
    ("v1.36.4-gke.1200", None),
    ("v1.36.7-eks-1b2c3d", "runs that patch release"),
    ("v1.37.1", "one minor version ahead"),
    ("v1.38.0", "outside the supported version skew"),
    ("v1.35.9", "must not be newer than the API server"),
])
def test_version_skew_between_the_cluster_and_the_setting(server, says):
    warnings = stack_cluster.skew_warnings("1.36.4", server)
    if says is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and says in warnings[0], warnings
        assert server in warnings[0] and "kubernetesVersion" in warnings[0]


def test_a_context_no_kubeconfig_defines_is_named_with_those_that_exist(tmp_path):
    config = yaml.safe_load(KUBECONFIG.read_text())
    config["contexts"].append({"name": "orphan", "context": {"cluster": "gone", "user": "x"}})
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(stack_cluster.ClusterUnreachable, match="names cluster 'gone'"):
        stack_cluster.endpoint(ClusterSettings(context="orphan", kubeconfig=str(path)))


def test_kubeconfig_files_are_found_as_kubectl_finds_them(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{KUBECONFIG}")
    server, _, _ = stack_cluster.endpoint(ClusterSettings(context="staging"))
    assert server == "https://staging.example:6443"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(stack_cluster.ClusterUnreachable) as missing:
        stack_cluster.endpoint(ClusterSettings(context="staging"))
    assert str(tmp_path / ".kube" / "config") in str(missing.value)


def test_an_unreachable_cluster_stops_the_preview_naming_context_kubeconfig_and_server(tmp_path):
    with socket.socket() as closed:        # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = yaml.safe_load(KUBECONFIG.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ClusterError) as unreachable:
        check_cluster(settings_for(path))
    message = str(unreachable.value)
    assert "nothing was deployed" in message
    assert "'gpu-cluster'" in message and str(path) in message
    assert f"cannot reach the API server https://127.0.0.1:{port}" in message


def test_an_inline_ca_is_used_from_a_file_that_does_not_outlive_the_check(tmp_path, monkeypatch):
    config = yaml.safe_load(KUBECONFIG.read_text())
    config["clusters"][0]["cluster"]["certificate-authority-data"] = "LS0tLS1CRUdJTg=="
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    made = []

    def get(url, **options):
        made.append(options["verify"])
        assert open(options["verify"]).read() == "-----BEGIN"
        raise stack_cluster.requests.ConnectionError("refused")
    monkeypatch.setattr(stack_cluster.requests, "get", get)
    with pytest.raises(stack_cluster.ClusterUnreachable):
        stack_cluster.server_version(ClusterSettings(context="gpu-cluster",
                                                       kubeconfig=str(path)))
    assert made and not os.path.exists(made[0])
