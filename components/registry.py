"""The component packages, one registration line each, in the order of the design's
dependencies: what the package Pulumi serves, the air-gapped lists, the layout test and the
architecture page read, so that none of them keeps a list of its own."""

from .base.descriptor import Descriptor
from .binpack_scheduler.descriptor import DESCRIPTOR as binpack_scheduler
from .gpu_compaction.descriptor import DESCRIPTOR as gpu_compaction
from .gpu_nodes.descriptor import DESCRIPTOR as gpu_nodes
from .gpu_operator.descriptor import DESCRIPTOR as gpu_operator
from .gpu_reclaim.descriptor import DESCRIPTOR as gpu_reclaim
from .gpu_remediation.descriptor import DESCRIPTOR as gpu_remediation
from .gpu_reservation.descriptor import DESCRIPTOR as gpu_reservation
from .monitoring.descriptor import DESCRIPTOR as monitoring
from .opa_admission.descriptor import DESCRIPTOR as opa_admission
from .teams.descriptor import DESCRIPTOR as teams

DESCRIPTORS: list[Descriptor] = [
    gpu_nodes,
    gpu_operator,
    binpack_scheduler,
    opa_admission,
    monitoring,
    gpu_compaction,
    teams,
    gpu_reclaim,
    gpu_reservation,
    gpu_remediation,
]
