"""The order of a cycle's heads under Kueue's fair sharing: at each step, a tournament in
one cohort tree, from the leaves up. At each cohort the competitors are its child
cohorts' winners, then the heads of its own ClusterQueues; one beats another when, with
its own usage counted, its node just below that cohort

1. does not borrow any flavor-resource it asks for while the other's does,
2. has the lower dominant resource share,
3. (else) it has the higher priority,
4. (else) it is older in its queue.

Shares are computed again at each step, so every admission or preemption before counts.
Trees do not share quota: their order between them does not matter (by name here)."""

from __future__ import annotations

from collections.abc import Iterator

from gangpreempt.planning.deciding import Evaluation
from gangpreempt.quota.fairshare import DRS, compare, dominant_resource_share
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import Node


class _Round:
    """One pop: every head's share at every level of its tree, with its usage in."""

    def __init__(self, snapshot: Snapshot, entries: list[Evaluation]) -> None:
        self.snapshot = snapshot
        self.by_cq = {ev.cq.name: ev for ev in entries}
        self.shares: dict[tuple[int, str], DRS] = {}
        self._lendable: dict[int, dict[str, int]] = {}
        for ev in entries:
            node = ev.cq.node
            usage = ev.assignment.usage
            snapshot.put_back(node, usage)
            try:
                child = node
                for ancestor in node.path_to_root():
                    self.shares[(id(ancestor), ev.pending.key)] = dominant_resource_share(
                        child, self._lendable
                    )
                    child = ancestor
            finally:
                snapshot.withdraw(node, usage)

    def winner(self, cohort: Node) -> Evaluation | None:
        competitors: list[Evaluation] = []
        for child in sorted(cohort.child_cohorts, key=lambda n: n.name):
            best = self.winner(child)
            if best is not None:
                competitors.append(best)
        for child in sorted(cohort.child_cqs, key=lambda n: n.name):
            ev = self.by_cq.get(child.name)
            if ev is not None:
                competitors.append(ev)
        if not competitors:
            return None
        best = competitors[0]
        for ev in competitors[1:]:
            if self._less(cohort, ev, best):
                best = ev
        return best

    def _less(self, cohort: Node, a: Evaluation, b: Evaluation) -> bool:
        da = self.shares[(id(cohort), a.pending.key)]
        db = self.shares[(id(cohort), b.pending.key)]
        a_borrows = da.borrowing_on(a.assignment.usage)
        b_borrows = db.borrowing_on(b.assignment.usage)
        if a_borrows != b_borrows:
            return not a_borrows
        c = compare(da, db)
        if c != 0:
            return c < 0
        if a.pending.priority != b.pending.priority:
            return a.pending.priority > b.pending.priority
        return a.pending.queue_order_ts < b.pending.queue_order_ts


def _tree(ev: Evaluation) -> str:
    node = ev.cq.node
    return node.root().name if node.parent is not None else f"\0{node.name}"


def fair_order(snapshot: Snapshot, entries: list[Evaluation]) -> Iterator[Evaluation]:
    """The heads, one at a time, each chosen once the ones before were processed."""
    remaining = list(entries)
    while remaining:
        tree = min(_tree(ev) for ev in remaining)
        members = [ev for ev in remaining if _tree(ev) == tree]
        node = members[0].cq.node
        if node.parent is None:
            chosen: Evaluation | None = members[0]
        else:
            chosen = _Round(snapshot, members).winner(node.root())
        assert chosen is not None
        remaining.remove(chosen)
        yield chosen


__all__ = ["fair_order"]
