"""What the GpuPlatform component takes: every section of the stack settings."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import Field

from .settings import StackSettings


class GpuPlatformInputs(StackSettings):
    """The whole platform: every section of the stack settings, and which hold a secret."""

    secret_sections: list[Literal["gpuOperator", "monitoring"]] = Field(
        default_factory=list,
        description="Sections that hold a secret (a credential in extra chart values, the "
                    "Grafana password): their Helm release's values are stored as a secret.")


def platform_inputs(settings: StackSettings, secret_keys: Collection[str] = ()
                    ) -> GpuPlatformInputs:
    """The platform's inputs from a stack's settings (valid already: not validated again) and
    the sections stored as secrets."""
    return GpuPlatformInputs.model_construct(**dict(settings),
                                             secret_sections=sorted(secret_keys))
