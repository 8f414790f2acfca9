"""Quota: the cohort tree, the usage ledger, flavor assignment and admission order."""

from gangpreempt.quota.assignment import Assignment, FlavorAssigner, FlavorChoice, PodSetAssignment
from gangpreempt.quota.modes import Granular, Mode, Possibility, preferred, try_next_flavor
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import AdmittedWorkload, ClusterQueueState, Snapshot
from gangpreempt.quota.tree import FR, Node, Quantities

__all__ = [
    "FR",
    "AdmittedWorkload",
    "Assignment",
    "ClusterQueueState",
    "FlavorAssigner",
    "FlavorChoice",
    "Granular",
    "Mode",
    "Node",
    "PendingWorkload",
    "PodSetAssignment",
    "Possibility",
    "Quantities",
    "Snapshot",
    "preferred",
    "try_next_flavor",
]
