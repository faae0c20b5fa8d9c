"""In a preview, with `teams.kueue.mode: existing`: the Kueue the cluster runs, read as the
context's user (its API, its Deployment's image, the Configuration it mounts, the team
namespaces' labels) and checked by components/teams/existing_kueue.py; existing_stacks.py
reports what it finds before anything is declared."""

from __future__ import annotations

import yaml

from ..base.facts import KUEUE_API
from ..base.model import ClusterReads
from ..teams.existing_kueue import (
    CONFIGURATION_KEY,
    MANAGER_CONTAINER,
    Findings,
    FoundKueue,
    findings,
)
from .settings import StackSettings
from .stack_cluster import ClusterError, ClusterReader, ClusterUnreachable, NotAllowed
from .wiring import component_inputs


def _manager_image(deployment: dict) -> str | None:
    containers = deployment["spec"]["template"]["spec"].get("containers") or []
    manager = next((c for c in containers if c.get("name") == MANAGER_CONTAINER),
                   containers[0] if containers else {})
    return manager.get("image")


def read_kueue(reader: ClusterReads, namespace: str, service_account: str,
               team_namespaces: list[str]) -> FoundKueue:
    """What the cluster shows of the Kueue in `namespace` that runs as `service_account`."""
    unread: list[str] = []
    try:
        api_served: bool | None = reader.get(f"/apis/{KUEUE_API}") is not None
    except NotAllowed as refused:
        api_served = None
        unread.append(f"whether the cluster serves {KUEUE_API} was not checked ({refused})")
    labels: dict[str, dict[str, str]] = {}
    try:
        for name in team_namespaces:
            found = reader.get(f"/api/v1/namespaces/{name}")
            if found is not None:
                labels[name] = found["metadata"].get("labels") or {}
    except NotAllowed as refused:
        unread.append(f"the team namespaces' labels were not read ({refused}): "
                      f"managedJobsNamespaceSelector was matched against the labels the "
                      f"program gives them only")
    try:
        deployments = reader.items(f"/apis/apps/v1/namespaces/{namespace}/deployments")
    except NotAllowed as refused:
        unread.append(f"Kueue's Deployment was not read ({refused}): its version and "
                      f"Configuration were not checked; the preview's identity needs to list "
                      f"deployments and get configmaps in {namespace}")
        return FoundKueue(api_served, deployments_read=False, namespace_labels=labels,
                          unread=unread)
    kueue = next((d for d in deployments if service_account in (
        d["spec"]["template"]["spec"].get("serviceAccountName"),
        d["spec"]["template"]["spec"].get("serviceAccount"))), None)
    if kueue is None:
        return FoundKueue(api_served, namespace_labels=labels, unread=unread)
    deployment = f"Deployment {namespace}/{kueue['metadata']['name']}"
    # Its Configuration: the ConfigMap it mounts that holds Kueue's file, or none (defaults).
    configuration: dict | None = {}
    source = f"{deployment} mounts none: Kueue's defaults"
    for volume in kueue["spec"]["template"]["spec"].get("volumes") or []:
        name = (volume.get("configMap") or {}).get("name")
        if not name:
            continue
        try:
            config_map = reader.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except NotAllowed as refused:
            unread.append(f"Kueue's Configuration (ConfigMap {namespace}/{name}) was not read "
                          f"({refused}): none of what the teams need of it was checked; the "
                          f"preview's identity needs to get configmaps in {namespace}")
            configuration = None
            break
        text = ((config_map or {}).get("data") or {}).get(CONFIGURATION_KEY)
        if text is not None:
            configuration = yaml.safe_load(text) or {}
            source = f"ConfigMap {namespace}/{name}, {CONFIGURATION_KEY}"
            break
    return FoundKueue(api_served, deployment=deployment, image=_manager_image(kueue),
                      configuration=configuration, configuration_source=source,
                      namespace_labels=labels, unread=unread)


def existing_kueue_findings(settings: StackSettings) -> Findings:
    """What the preview says of the cluster's Kueue (nothing unless teams use an existing
    one). An unreachable cluster raises ClusterError."""
    teams = settings.teams
    if not teams.enabled or teams.kueue.installs_chart:
        return Findings()
    try:
        with ClusterReader(settings.cluster) as reader:
            found = read_kueue(reader, teams.kueue.namespace,
                               teams.kueue.existing.service_account,
                               list(teams.team_namespaces))
    except ClusterUnreachable as error:
        raise ClusterError(str(error)) from None
    return findings(component_inputs(settings).teams, found)
