"""What one quota cycle decides for Kueue Workloads: the step the quota service and the
replay (``gangpreempt simulate``) share, so that the replay cannot drift from the
service."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gangpreempt.planning.cycle import admission_pass
from gangpreempt.planning.deciding import Evaluation
from gangpreempt.planning.decisions import ADMIT, PREEMPT, Decision
from gangpreempt.planning.nodeplan import NodePlanner, with_nodes
from gangpreempt.planning.nodeside import PlannerSide
from gangpreempt.planning.parking import Certificate, Parking
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
    parking: Parking | None = None,
) -> list[Decision]:
    """One admission pass on ``snapshot`` (the live ledger, with the plans in flight held
    in it, left as it was); the preemptors in ``waiting`` have a plan in flight: they keep
    their place and get no new decision; those in ``first`` have just seen their victims
    leave: they are processed first. With ``planner`` (the nodes, with the rooms of the
    plans in flight held), each Admit or Preempt of a Workload whose pods are known is
    composed with the nodes: placed, or preempting on the nodes too (never a Workload of
    another ClusterQueue within its nominal quota), or Pending.

    With ``parking`` (kept by the caller across cycles, fed every state change): the
    pass reads only the pending workloads, the parked ones are not evaluated (their
    standing decisions are returned in their place), and the heads Kueue parks are
    parked. The decisions are those of the pass without parking, the Admits and
    Preempts in the same order (a parked workload's message is that of its last
    evaluation; its Pending decision may fall elsewhere among its Kueue cycle's)."""
    if planner is not None:
        planner.borrowing_queues = borrowing_queues(snapshot)
        if planner.cost() is not None:
            snapshot.node_side = PlannerSide(planner)
    try:
        if parking is None:
            with snapshot.scratch():
                decisions = admission_pass(snapshot, waiting, first, observe)
        else:
            decisions = _parked_pass(snapshot, waiting, first, observe, parking)
    finally:
        snapshot.node_side = None
    return _with_nodes(planner, decisions) if planner is not None else decisions


def _with_nodes(planner: NodePlanner, decisions: list[Decision]) -> list[Decision]:
    """``with_nodes`` on the Admits and Preempts, in order; the others are left as they
    are (``compose`` returns them unchanged and they hold nothing)."""
    acting = [i for i, d in enumerate(decisions) if d.outcome in (ADMIT, PREEMPT)]
    if not acting:
        return decisions
    out = list(decisions)
    for i, d in zip(acting, with_nodes(planner, [decisions[i] for i in acting]), strict=True):
        out[i] = d
    return out


def _parked_pass(
    snapshot: Snapshot,
    waiting: frozenset[str],
    first: frozenset[str],
    observe: Callable[[Evaluation, Snapshot], None] | None,
    parking: Parking,
) -> list[Decision]:
    """The pass with the parked workloads as stand-ins; run again without those that
    might not have been Pending at their turn (``Parking.refuted``: on the state at their
    Kueue cycle, with what the pass admitted before and the victims it freed), until
    none is left in doubt (each run brings one back at least; on the Philly trace's
    week, 1.03 runs per cycle)."""
    skip = waiting | first
    stand_ins = parking.stand_ins(snapshot, skip)
    passes = 0
    while True:
        decisions = _pass_on(snapshot, parking, stand_ins, waiting, first, observe)
        passes += 1
        if not stand_ins:
            break
        # the earliest in doubt first (what they take may settle the others), then all
        back = parking.refuted(snapshot, decisions, stand_ins, first, earliest=passes == 1)
        if not back:
            break
        parking.unpark(back)
        stand_ins = {k: v for k, v in stand_ins.items() if k not in back}
    return parking.settle(decisions, stand_ins, skip)


def _pass_on(
    snapshot: Snapshot,
    parking: Parking,
    stand_ins: Mapping[str, Certificate],
    waiting: frozenset[str],
    first: frozenset[str],
    observe: Callable[[Evaluation, Snapshot], None] | None,
) -> list[Decision]:
    """The pass on the pending workloads (parked ones as stand-ins; those behind every
    other workload of their queue but the first left out, their decisions filled in:
    ``Parking.leave_out``), the snapshot's state put back afterwards."""
    state = snapshot.state
    left_out = parking.leave_out(snapshot, stand_ins)
    snapshot.state = parking.view(stand_ins, left_out)
    try:
        with snapshot.scratch():
            decisions = admission_pass(snapshot, waiting, first, observe)
    finally:
        snapshot.state = state
    return parking.fill(decisions, stand_ins, left_out, first)


__all__ = ["borrowing_queues", "cycle_decisions"]
