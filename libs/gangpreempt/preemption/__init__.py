"""Victim search: quota-level (Kueue classical preemption) today; node-level gang
placement arrives with the node-level work."""

from gangpreempt.preemption.candidates import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    Candidate,
    Candidates,
    Request,
    Variant,
)
from gangpreempt.preemption.classical import Target, fits, get_targets
from gangpreempt.preemption.oracle import oracle_for

__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "Candidate",
    "Candidates",
    "Request",
    "Target",
    "Variant",
    "fits",
    "get_targets",
    "oracle_for",
]
