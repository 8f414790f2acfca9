"""The preemption oracle the flavor assigner consults: would preemption make room in
this flavor, and by reclaiming from other queues or by preempting in the own queue?"""

from __future__ import annotations

from gangpreempt.preemption.candidates import Request
from gangpreempt.preemption.classical import Search, search
from gangpreempt.quota.assignment import Oracle
from gangpreempt.quota.modes import Possibility
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import ClusterQueueState, Snapshot
from gangpreempt.quota.tree import FR, lowest_fitting_subtree


class Searches:
    """Victim searches for one preemptor on an unchanged snapshot, each computed once:
    the oracle's per-flavor search and the final search are often the same question."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._done: dict[
            tuple[str, str, frozenset[FR], tuple[tuple[FR, int], ...], bool], Search
        ] = {}

    def __call__(self, req: Request) -> Search:
        usage = tuple(sorted(req.usage.items()))
        key = (req.preemptor.key, req.cq.name, req.frs, usage, req.topology is not None)
        found = self._done.get(key)
        if found is None:
            found = self._done[key] = search(self.snapshot, req)
        return found


def oracle_for(snapshot: Snapshot, searches: Searches | None = None) -> Oracle:
    run = searches or Searches(snapshot)

    def simulate(
        cq: ClusterQueueState, wl: PendingWorkload, fr: FR, quantity: int
    ) -> tuple[Possibility, int]:
        targets = run(Request(wl, cq, frozenset({fr}), {fr: quantity})).targets
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


__all__ = ["Searches", "oracle_for"]
