"""What one quota cycle decides for Kueue Workloads: the step the quota service and the
replay (``gangpreempt simulate``) share, so that the replay cannot drift from the
service."""

from __future__ import annotations

from collections.abc import Callable

from gangpreempt.planning.cycle import admission_pass
from gangpreempt.planning.deciding import Evaluation
from gangpreempt.planning.decisions import Decision
from gangpreempt.planning.nodeplan import NodePlanner, with_nodes
from gangpreempt.quota.snapshot import Snapshot


def borrowing_queues(snapshot: Snapshot) -> frozenset[str]:
    """The ClusterQueues using more than their nominal quota of some resource."""
    return frozenset(
        name
        for name, cq in snapshot.cqs.items()
        if any(cq.node.borrowing(fr) for fr in cq.node.usage)
    )


def cycle_decisions(
    snapshot: Snapshot,
    waiting: frozenset[str],
    planner: NodePlanner | None,
    first: frozenset[str] = frozenset(),
    observe: Callable[[Evaluation, Snapshot], None] | None = None,
) -> list[Decision]:
    """One admission pass on ``snapshot`` (the live ledger, with the plans in flight held
    in it, left as it was); the preemptors in ``waiting`` have a plan in flight: they keep
    their place and get no new decision; those in ``first`` have just seen their victims
    leave: they are processed first. With ``planner`` (the nodes, with the rooms of the
    plans in flight held), each Admit or Preempt of a Workload whose pods are known is
    composed with the nodes: placed, or preempting on the nodes too (never a Workload of
    another ClusterQueue within its nominal quota), or Pending."""
    if planner is not None:
        planner.borrowing_queues = borrowing_queues(snapshot)
    with snapshot.scratch():
        decisions = admission_pass(snapshot, waiting, first, observe)
    return with_nodes(planner, decisions) if planner is not None else decisions


__all__ = ["cycle_decisions"]
