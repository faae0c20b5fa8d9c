"""The program a stack runs: the settings read once, the cluster checked in previews before
anything is declared, the platform declared, and its outputs exported, with the identity a
pull-request preview of this stack runs as."""

from collections.abc import Collection, Mapping
from typing import Any

import pulumi

from .platform.component import PLATFORM_NAME, GpuPlatform
from .platform.config import check_secret_keys, load_settings, retired_settings
from .platform.inputs import platform_inputs
from .preview import access
from .preview.cluster import check_cluster
from .preview.conflicts import check_conflicts
from .preview.existing_stacks import check_existing_stacks
from .preview.framework_crds import report_framework_crds
from .preview.prices import check_prices


def deploy(config: Mapping[str, Any], secret_keys: Collection[str] = ()) -> GpuPlatform:
    """Read the settings (once), check the cluster (in previews), then declare the platform and
    export its outputs."""
    # A secret where values reach the cluster in plain text is named before anything else.
    check_secret_keys(secret_keys)
    settings = load_settings(config)
    for warning in retired_settings(config) + settings.warnings:
        pulumi.log.warn(warning)
    if pulumi.runtime.is_dry_run():
        check_cluster(settings)
        check_conflicts(settings)
        check_existing_stacks(settings)
        check_prices(settings)
        report_framework_crds(settings)
    platform = GpuPlatform.from_inputs(PLATFORM_NAME, platform_inputs(settings, secret_keys))
    for key, value in platform.outputs.items():
        pulumi.export(key, value)
    # What the pull-request preview identity of this stack needs, for `kubectl apply`.
    pulumi.export("previewAccess", access.preview_access_yaml(platform.declarations, settings))
    return platform
