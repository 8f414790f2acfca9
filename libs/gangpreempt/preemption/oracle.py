"""The preemption oracle the flavor assigner consults: would preemption make room in
this flavor, and by reclaiming from other queues or by preempting in the own queue?"""

from __future__ import annotations

from gangpreempt.preemption.candidates import Request
from gangpreempt.preemption.classical import get_targets
from gangpreempt.quota.assignment import Oracle
from gangpreempt.quota.modes import Possibility
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import ClusterQueueState, Snapshot
from gangpreempt.quota.tree import FR, lowest_fitting_subtree


def oracle_for(snapshot: Snapshot) -> Oracle:
    def simulate(
        cq: ClusterQueueState, wl: PendingWorkload, fr: FR, quantity: int
    ) -> tuple[Possibility, int]:
        targets = get_targets(snapshot, Request(wl, cq, frozenset({fr}), {fr: quantity}))
        if not targets:
            return Possibility.NO_CANDIDATES, lowest_fitting_subtree(cq.node, fr, quantity)[0]
        for t in targets:
            snapshot.remove(t.aw)
        borrow_after = lowest_fitting_subtree(cq.node, fr, quantity)[0]
        for t in targets:
            snapshot.restore(t.aw)
        if any(t.aw.cq == cq.name for t in targets):
            return Possibility.PREEMPT, borrow_after
        return Possibility.RECLAIM, borrow_after

    return simulate


__all__ = ["oracle_for"]
