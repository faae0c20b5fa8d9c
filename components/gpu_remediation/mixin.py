"""Fault remediation's monitoring: a node out of service, a fault left in service (report mode,
or beyond the blast-radius limit), and remediation itself not running."""

from ..base import manifests
from ..base.gpu_faults import GPUS_OUT_OF_SERVICE, QUARANTINE_TAINT, quarantining
from ..base.mixin import AlertSettings, Mixin, Scrape, alert, deployment_unavailable
from .inputs import GpuRemediationInputs
from .manifests import COMPONENT, METRICS_PORT_NAME, REPAIRED_LABEL


def faulty_nodes(inputs: GpuRemediationInputs) -> str:
    """GPU nodes showing a fault that takes them out of service, by node, with the fault."""
    return " or ".join(fault.labelled(fault.node_expr(inputs.fatal_xid_codes))
                       for fault in quarantining())


def mixin(inputs: GpuRemediationInputs, alerts: AlertSettings,
          _component: object = None) -> Mixin:
    remediation = inputs.remediation
    if not remediation.enabled:
        return Mixin()
    unavailable = alert(
        "GpuRemediationUnavailable", deployment_unavailable(remediation.namespace,
                                                            remediation.name),
        alerts.unavailable_for, "critical", "GPU fault remediation not running",
        f"No pod of Deployment {remediation.namespace}/{remediation.name} has been available "
        f"for {alerts.unavailable_for}: GPU faults are alerted on but their nodes "
        + ("stay in service." if remediation.detector == "platform" else
           "keep their team workloads until NVSentinel's drain reaches them.")
        + " See the Deployment's pods and their log.")
    # Its counters: the work it moved and what the faults cost, by namespace.
    scrapes = [Scrape(kind="PodMonitor", name=remediation.name, namespace=remediation.namespace,
                      selector=manifests.selector_labels(remediation.name, COMPONENT),
                      endpoint={"port": METRICS_PORT_NAME})]
    if remediation.detector == "nvsentinel":
        # NVSentinel reports its quarantines in its own metrics.
        return Mixin(alerts=[unavailable], scrapes=scrapes)
    # Out of service: the node's taint; on the DRA path, where the failed devices are tainted
    # instead, the remediation pod's gauge.
    quarantined = (f"{GPUS_OUT_OF_SERVICE} > 0" if inputs.dra_driver else
                   f'kube_node_spec_taint{{key="{QUARANTINE_TAINT}"}}')
    return Mixin(alerts=[
        alert("GpuNodeQuarantined", f"max by (node, value) ({quarantined})", "0s", "warning",
              "GPU node out of service after a fault",
              "Node {{ $labels.node }} is out of service for {{ $labels.value }} "
              "(its annotations say since when and why): nothing new lands on it"
              + (" and its GPU pods were moved" if remediation.mode == "drain" else "")
              + f". Repair it (reset the GPU, reboot, or replace it), then `kubectl label node "
              f"{{{{ $labels.node }}}} {REPAIRED_LABEL}=true` to return it."),
        # Two passes and a scrape: a fault still in service then was left there.
        alert("GpuFaultNotQuarantined",
              f"max by (node, fault) ({faulty_nodes(inputs)}) unless on (node) {quarantined}",
              "2m", "critical", "GPU fault left in service",
              "Node {{ $labels.node }} shows {{ $labels.fault }} but is still in service: "
              + ("remediation.mode is report, so nothing is done; cordon and drain it by hand."
                 if remediation.mode == "report" else
                 f"as many GPU nodes as may be taken out of service within "
                 f"{remediation.window} were already (remediation.maxNodes "
                 f"{remediation.max_nodes}, maxShare {remediation.max_share:g}): it is taken "
                 f"out once the window has room; cordon and drain it by hand before.")),
        unavailable,
    ], scrapes=scrapes)
