"""The preview says which of `teams.frameworks` the cluster lacks, and which served framework the
teams' queues leave out."""

from components.preview import framework_crds
from components.preview.cluster import ClusterReader, NotAllowed
from tests.unit.test_cluster_survey import stack

RAY = ("rayjobs.ray.io", "rayclusters.ray.io")


def served(monkeypatch, names: tuple[str, ...], refused: bool = False) -> list[str]:
    asked: list[str] = []

    def get(self, path: str, **params: str) -> dict | None:
        asked.append(path)
        if refused:
            raise NotAllowed(f"GET {path}: HTTP 403 for the context's user")
        name = path.rpartition("/")[2]
        return {"metadata": {"name": name}} if name in names else None
    monkeypatch.setattr(ClusterReader, "get", get)
    return asked


def test_a_listed_framework_the_cluster_lacks_is_named_with_what_to_install(monkeypatch, logged):
    asked = served(monkeypatch, RAY)
    framework_crds.report_framework_crds(stack())
    assert logged["warn"] == []
    lacking = "\n".join(logged["info"])
    # The example stack lists every framework; the cluster serves KubeRay's alone.
    assert "ray.io" not in lacking
    assert ("teams.frameworks: trainer.kubeflow.org/trainjob: the cluster serves no TrainJob "
            "(CRD trainjobs.trainer.kubeflow.org)") in lacking
    assert "Install Kubeflow Trainer v2.2.1" in lacking and "JobSet v0.12.0" in lacking
    assert len(asked) == 6


def test_a_served_framework_left_out_is_a_warning_naming_the_setting(monkeypatch, logged):
    served(monkeypatch, RAY)
    framework_crds.report_framework_crds(stack(teams={"frameworks": ["ray.io/rayjob"]}))
    [warning] = logged["warn"]
    assert ("teams.frameworks leaves out ray.io/raycluster, but the cluster serves RayClusters "
            "(CRD rayclusters.ray.io)") in warning
    assert "add ray.io/raycluster to teams.frameworks" in warning


def test_without_the_right_to_read_crds_it_says_what_it_did_not_check(monkeypatch, logged):
    served(monkeypatch, (), refused=True)
    framework_crds.report_framework_crds(stack())
    [warning] = logged["warn"]
    assert "not checked: which of teams.frameworks the cluster serves" in warning
    assert "get customresourcedefinitions (apiextensions.k8s.io)" in warning


def test_without_teams_nothing_is_read(monkeypatch, logged):
    asked = served(monkeypatch, RAY)
    framework_crds.report_framework_crds(stack(teams={"enabled": False}))
    assert asked == [] and logged == {"warn": [], "info": []}
