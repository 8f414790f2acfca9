"""The data model: msgspec Structs for quantities, queues, workloads and the cluster."""

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.quantity import QuantityError, format_amount, parse_exact, to_amount
from gangpreempt.model.queues import (
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    LocalQueue,
    Preemption,
    PriorityClass,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    WorkloadPriorityClass,
)
from gangpreempt.model.scheduling import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SchedulingConstraints,
    Taint,
    Toleration,
)
from gangpreempt.model.workloads import (
    Admission,
    Condition,
    PodSet,
    PodSetAssignment,
    PriorityClassRef,
    Workload,
)

__all__ = [
    "Admission",
    "ClusterQueue",
    "ClusterState",
    "Cohort",
    "Condition",
    "FlavorFungibility",
    "FlavorQuotas",
    "LocalQueue",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodSet",
    "PodSetAssignment",
    "Preemption",
    "PriorityClass",
    "PriorityClassRef",
    "QuantityError",
    "ResourceFlavor",
    "ResourceGroup",
    "ResourceQuota",
    "SchedulingConstraints",
    "Taint",
    "Toleration",
    "Workload",
    "WorkloadPriorityClass",
    "format_amount",
    "parse_exact",
    "to_amount",
]
