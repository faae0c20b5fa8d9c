"""Fault remediation: a Deployment that takes GPU nodes showing a fault out of service and, on
`drain`, moves their GPU pods away, with the ClusterRole it needs (faulty nodes and the pods on
them may be anywhere)."""

import pulumi

from ..base.component import Component, declare, declare_all
from .inputs import GpuRemediationInputs
from .manifests import REPAIRED_LABEL, TAINT_KEY, remediation_objects
from .zz_generated_args import GpuRemediationArgs


class GpuRemediation(Component[GpuRemediationInputs]):
    """Fault remediation: quarantines GPU nodes whose GPUs show a fault that takes them out of
    service, drains them on `drain`, and returns them once labelled repaired."""

    namespace: str
    "The Deployment's namespace."
    mode: str
    "What a fault does to its node (report, quarantine, drain)."
    taint_key: str
    "The taint a node out of service carries (its value: the fault)."
    repaired_label: str
    "The label that returns a node to service (value `true`)."

    def __init__(self, name: str, args: GpuRemediationArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _declare(self, name: str, inputs: GpuRemediationInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        self._register(name, opts)
        objects = remediation_objects(inputs)
        namespace = declare(objects[0], self)
        self.resources = declare_all(objects[1:], self, depends_on=[namespace])
        self.namespace = inputs.remediation.namespace
        self.mode = inputs.remediation.mode
        self.taint_key = TAINT_KEY
        self.repaired_label = REPAIRED_LABEL
        self.register_outputs({"namespace": self.namespace, "mode": self.mode,
                               "taintKey": self.taint_key, "repairedLabel": self.repaired_label})
