"""What the preemptible class can do on each GPU path. On the DRA path kube-scheduler's
DynamicResources plugin cannot tell, while it looks for victims, which devices their claims
would free (it has no PreFilterExtensions), so no GPU pod ever preempts for GPUs there; the
settings warn of it when a stack declares the class on that path."""

from __future__ import annotations

from ..base.model import minor_release
from .settings import PreemptibleClassSettings

# The newest minor release whose kube-scheduler was seen not to preempt for devices
# (tests/integration/test_dra.py, on tools.DRA_KUBERNETES_VERSION; a test keeps them equal).
NO_DRA_PREEMPTION_THROUGH = (1, 37)
DRA_PREEMPTION_KEP = "KEP-5690, https://github.com/kubernetes/enhancements/issues/5690"
PAGE = "docs/concepts/preemptible-gpu-pods.md#on-the-dra-path"


def dra_preemption_warning(preemptible: PreemptibleClassSettings, gpu_path: str,
                           kubernetes_version: str) -> str | None:
    """Why the class makes no room for GPU pods on this path and release (None: it does)."""
    if gpu_path != "dra" or not preemptible.enabled:
        return None
    if minor_release(kubernetes_version) <= NO_DRA_PREEMPTION_THROUGH:
        release = f"kube-scheduler {kubernetes_version} does not preempt for DRA devices"
    else:
        newest = ".".join(map(str, NO_DRA_PREEMPTION_THROUGH))
        release = (f"whether kube-scheduler {kubernetes_version} preempts for DRA devices was "
                   f"not checked (up to {newest} it does not)")
    return (f"scheduler.preemptibleClass.enabled with gpuOperator.gpuPath: dra: {release} "
            f"({DRA_PREEMPTION_KEP}), so a GPU pod that fits on no node waits for pods of "
            f"{preemptible.name} to end instead of preempting them; where whole-node jobs "
            f"must not wait behind small ones, keep gpuPath devicePlugin ({PAGE})")
