"""NVIDIA GPU Operator: its namespace and the pinned Helm release."""

import pulumi

from ..base import charts, manifests
from ..base.component import Component, declare, declare_all
from ..base.model import to_snake
from ..base.validation import Subject
from .dra import DRA_ADMIN_ACCESS_LABEL, device_class_shapes, device_classes, served_resources
from .inputs import GpuOperatorInputs
from .values import CHART, COMPONENT, chart_values, check_chart_values
from .zz_generated_args import GpuOperatorArgs

# Facts of the pinned chart (v26.7.0): every pod it runs in the operator's namespace has the
# priority system-node-critical (operator.priorityClassName, daemonsets.priorityClassName for
# each operand DaemonSet in assets/state-*, node-feature-discovery's priorityClassName for its
# master, worker and garbage collector). On each GPU node: the validator, and the operand
# DaemonSets each switch turns on (sandboxWorkloads: the sandbox device plugin and validator).
OPERANDS_PER_SWITCH = {"driver": 1, "toolkit": 1, "devicePlugin": 1, "dcgmExporter": 1,
                       "gfd": 1, "migManager": 1, "sandboxWorkloads": 2, "vgpuManager": 1,
                       "vgpuDeviceManager": 1, "vfioManager": 1}
ALWAYS_ON_OPERANDS = 1          # nvidia-operator-validator
# The GPUCluster (DRA) stack (manifests/state-dra-driver, state-dra-validation): the DRA
# driver's kubelet plugin and validator on each GPU node, and the compute-domain controller.
DRA_OPERANDS = 2
DRA_DEPLOYMENTS = 1
NFD_PER_NODE = 1                # the NFD worker, on every node
NFD_DEPLOYMENTS = 2             # NFD master and garbage collector, one replica each
OPERATOR_REPLICAS = 1


def critical_pods(inputs: GpuOperatorInputs) -> int:
    """The operator namespace's pods of the critical priority classes, at most: each operand
    on each GPU node, an NFD worker on each node, the Deployments; and as many again of each
    DaemonSet and Deployment as a rolling update replaces at a time (one pod each), since a
    pod still terminating counts."""
    op = inputs.gpu_operator
    if op.gpu_path == "dra":
        # The GPUCluster stack: the DRA driver's kubelet plugin and validator on each GPU node,
        # the DCGM exporter and the driver when on; its compute-domain controller.
        operands = DRA_OPERANDS + sum(OPERANDS_PER_SWITCH[switch] for switch in
                                      ("driver", "dcgmExporter")
                                      if getattr(op, to_snake(switch)).enabled)
    else:
        operands = ALWAYS_ON_OPERANDS + sum(count for switch, count in OPERANDS_PER_SWITCH.items()
                                            if getattr(op, to_snake(switch)).enabled)
    names = inputs.gpu_nodes.names
    gpu_nodes = len(names) if names is not None else op.max_cluster_nodes
    nodes = max(op.max_cluster_nodes, gpu_nodes)
    nfd = op.nfd.enabled
    per_node_kinds = operands + (NFD_PER_NODE if nfd else 0)
    deployments = (OPERATOR_REPLICAS + (NFD_DEPLOYMENTS if nfd else 0)
                   + (DRA_DEPLOYMENTS if op.gpu_path == "dra" else 0))
    running = operands * gpu_nodes + (NFD_PER_NODE * nodes if nfd else 0) + deployments
    return running + per_node_kinds + deployments


def critical_pods_quota(inputs: GpuOperatorInputs) -> dict:
    return manifests.critical_pods_quota(
        inputs.gpu_operator.namespace, COMPONENT, critical_pods(inputs),
        (manifests.NODE_CRITICAL_PRIORITY, manifests.CRITICAL_PRIORITY))


def operator_namespace(inputs: GpuOperatorInputs) -> dict:
    # The operands (driver, toolkit, device plugin, DCGM exporter) run privileged on the nodes.
    namespace = manifests.namespace(inputs.gpu_operator.namespace, "privileged", COMPONENT)
    if inputs.gpu_operator.gpu_path == "dra":
        # The DCGM exporter claims every GPU with adminAccess (to read them all), which the API
        # server allows only in a namespace labelled so; the operator labels it, and the
        # program declares it so that the two agree.
        namespace["metadata"]["labels"][DRA_ADMIN_ACCESS_LABEL[0]] = DRA_ADMIN_ACCESS_LABEL[1]
    return namespace


class GpuOperator(Component[GpuOperatorInputs]):
    """NVIDIA's GPU Operator: its namespace, the namespace's quota of critical pods, and the
    pinned Helm release."""

    namespace: str
    "The operator's namespace, where the DCGM exporter Service is."
    mig_resources: list[str]
    ("The MIG resources GPU nodes advertise (`nvidia.com/mig-<profile>`, with the mixed "
     "strategy): the binpack scheduler packs them as GPUs.")
    gpu_path: str
    "How pods reach GPUs: `devicePlugin` or `dra`."
    served_resources: dict[str, list[str]]
    ("On the DRA path, each GPU resource and the DeviceClasses whose claims hold it (the "
     "platform's own first).")

    def __init__(self, name: str, args: GpuOperatorArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)

    def _check(self, inputs: GpuOperatorInputs, subject: Subject) -> None:
        check_chart_values(inputs, subject)

    def _declare(self, name: str, inputs: GpuOperatorInputs,
                 opts: pulumi.ResourceOptions | None) -> None:
        values = chart_values(inputs)
        self._register(name, opts)
        op = inputs.gpu_operator
        namespace = declare(operator_namespace(inputs), self)
        # The quota first: where critical-priority pods need one, they are refused without it.
        quota = declare(critical_pods_quota(inputs), self, [namespace])
        self.release = charts.release(
            op.release_name, chart=CHART, version=op.chart_version, repository=op.repository,
            namespace=op.namespace, values=charts.values_input(values, inputs.secret_values),
            parent=self, protection=op.protection, chart_path=op.chart_path,
            depends_on=[namespace, quota])
        declare_all(device_classes(inputs), self)
        self.namespace = op.namespace
        self.mig_resources = op.mig.resources
        self.gpu_path = op.gpu_path
        self.served_resources = served_resources(op)
        self.device_class_shapes = device_class_shapes() if op.gpu_path == "dra" else []
        self.register_outputs({"namespace": self.namespace, "migResources": self.mig_resources,
                               "gpuPath": self.gpu_path,
                               "servedResources": self.served_resources,
                               "deviceClassShapes": self.device_class_shapes})
