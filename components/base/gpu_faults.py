"""GPU faults, classified once: each health signal the DCGM exporter gives, what it means and
whether it takes a GPU node out of service (`quarantine`) or only warns (`watch`). The alerts,
the dashboard and the fault remediation all read this table, so that what pages an operator
and what the remediation acts on never differ.

A signal is a PromQL expression over the exporter's per-GPU series whose value is the evidence
(an XID code, a count of errors); a GPU with no such series has no fault, and a node whose
exporter is not scraped has no signal at all: missing data is never taken for a failure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# XID codes that mean the GPU needs draining and a reset (NVIDIA's XID catalogue): 48
# double-bit ECC error, 79 fallen off the bus, 94/95 contained/uncontained ECC error.
DEFAULT_FATAL_XID_CODES = (48, 79, 94, 95)
# prometheus-operator names a ServiceMonitor's job after the Service it scrapes.
DCGM_JOB = "nvidia-dcgm-exporter"
# The taint a GPU node out of service carries; its value names the fault.
QUARANTINE_TAINT = "gpu-platform.io/gpu-fault"
QUARANTINE_MEANING = ("the taint of a GPU node out of service after a GPU fault; only the node's "
                      "own DaemonSets tolerate it")
# PCIe replays per GPU within ten minutes above which the link is worth a look.
PCIE_REPLAYS_PER_10M = 100

# What fault remediation counts, as its pod serves them at /metrics (counters).
QUARANTINES = "gpu_platform_fault_quarantines_total"
PODS_MOVED = "gpu_platform_fault_pods_moved_total"
GPU_HOURS_LOST = "gpu_platform_fault_gpu_hours_lost_total"
METRICS = {
    QUARANTINES: "GPU nodes taken out of service, by fault.",
    PODS_MOVED: "GPU pods moved off nodes out of service, by namespace and how (evicted, or "
                "requeued with their Kueue workload).",
    GPU_HOURS_LOST: "GPU-hours the moved pods had run on the failed node since they started, "
                    "by namespace: the work lost where they do not checkpoint.",
}

# ...and the GPUs out of service now, by node and fault (`value`, as the node taint's), a gauge
# set at every pass: on the DRA path, where the failed devices are tainted and not the node,
# what says a node's GPUs are out.
GPUS_OUT_OF_SERVICE = "gpu_platform_fault_gpus_out_of_service"
GAUGES = {GPUS_OUT_OF_SERVICE: "GPUs out of service after a fault, by node and fault (value)."}

Action = Literal["quarantine", "watch"]


@dataclass(frozen=True)
class GpuFault:
    """One health signal: `name` is what the quarantine taint's value and the dashboard say,
    `alert` the alert that fires on it, `meaning` why it matters (one sentence, for the alert,
    the node's annotation and the docs), `default_counter` whether the pinned DCGM exporter
    serves the field with its default counters (else its counters must list it)."""

    name: str
    alert: str
    action: Action
    severity: str
    summary: str
    meaning: str
    metric: str
    condition: str
    default_counter: bool = True

    def expr(self, fatal_xid_codes: tuple[int, ...] | list[int]) -> str:
        """Per-GPU series with the evidence as value, where the GPU has this fault."""
        fatal = " or ".join(f"{self.metric} == {code}" for code in fatal_xid_codes)
        return self.condition.format(metric=self.metric, fatal=fatal)

    def labelled(self, expr: str) -> str:
        """`expr`'s series labelled with this fault (`fault`) and its `action`."""
        return (f'label_replace(label_replace({expr}, "fault", "{self.name}", "", ""), '
                f'"action", "{self.action}", "", "")')

    def node_expr(self, fatal_xid_codes: tuple[int, ...] | list[int],
                  by: str = "node") -> str:
        """Per node (`by`: per node and whatever else, as `node, UUID`) with a GPU showing the
        fault and an exporter scraped now: the evidence (the largest). A node whose exporter
        is down has no series here."""
        return (f"max by ({by}) (({self.expr(fatal_xid_codes)}) "
                f'and on (node) (up{{job="{DCGM_JOB}"}} == 1))')


FAULTS: tuple[GpuFault, ...] = (
    GpuFault("fatal-xid", "GpuFatalXidError", "quarantine", "critical",
             "GPU reported a fatal XID error",
             "the GPU reported an XID that needs the GPU drained and reset (the XID code is "
             "the value)", "DCGM_FI_DEV_XID_ERRORS", "{fatal}"),
    GpuFault("row-remap-failure", "GpuRowRemapFailure", "quarantine", "critical",
             "GPU memory row remapping failed",
             "the GPU could not remap a failing memory row: its memory is no longer reliable "
             "and it needs a reset, then replacing if it fails again",
             "DCGM_FI_DEV_ROW_REMAP_FAILURE", "{metric} > 0"),
    GpuFault("double-bit-ecc", "GpuDoubleBitEccErrors", "quarantine", "critical",
             "GPU reported uncorrectable ECC errors",
             "the GPU reported uncorrectable (double-bit) ECC errors in the last 10 minutes: "
             "the data of the work on it may be corrupt",
             "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "increase({metric}[10m]) > 0",
             default_counter=False),
    GpuFault("xid", "GpuXidError", "watch", "warning", "GPU reported an XID error",
             "the GPU reported an XID that is not fatal: the work on it may have failed (the "
             "XID code is the value)", "DCGM_FI_DEV_XID_ERRORS",
             "{metric} != 0 unless ({fatal})"),
    GpuFault("pcie-replays", "GpuPcieReplays", "watch", "warning",
             "GPU PCIe link retrying often",
             f"the GPU's PCIe link retried more than {PCIE_REPLAYS_PER_10M} times in 10 "
             "minutes: a failing link or riser, which slows transfers and may fail the GPU",
             "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
             f"increase({{metric}}[10m]) > {PCIE_REPLAYS_PER_10M}"),
    GpuFault("nvlink-errors", "GpuNvlinkErrors", "watch", "warning",
             "GPU NVLink reporting data errors",
             "the GPU's NVLink reported CRC data errors in the last 10 minutes: multi-GPU "
             "work on the node slows down or fails",
             "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "increase({metric}[10m]) > 0",
             default_counter=False),
)


def quarantining() -> tuple[GpuFault, ...]:
    """The faults that take a GPU node out of service."""
    return tuple(fault for fault in FAULTS if fault.action == "quarantine")


def by_name(name: str) -> GpuFault:
    return next(fault for fault in FAULTS if fault.name == name)
