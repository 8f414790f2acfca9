"""The order of a cycle's heads under Kueue's fair sharing: at each step, a tournament in
one cohort tree, from the leaves up. At each cohort the competitors are its child
cohorts' winners, then the heads of its own ClusterQueues; one beats another when, with
its own usage counted, its node just below that cohort

1. does not borrow any flavor-resource it asks for while the other's does,
2. has the lower dominant resource share,
3. (else) it has the higher priority,
4. (else) it is older in its queue.

Shares are computed again at each step, so every admission or preemption before counts.
Trees do not share quota: their order between them does not matter (by name here).

What is kept between steps: a head's shares are a function of the usage of the nodes
from its ClusterQueue up to the node just below the root (its own usage bubbles up
through them; the root has no share), of the quotas and of the weights. The quotas and
weights are fixed once the tree is accumulated; the usage is compared, node by node, with
a copy taken when the shares were last computed, and only the heads with a node whose
usage differs get theirs computed again. The order is the one a fresh tournament over
every head's fresh shares at every step gives."""

from __future__ import annotations

from collections.abc import Iterator

from gangpreempt.planning.deciding import Evaluation
from gangpreempt.quota.fairshare import DRS, compare, dominant_resource_share
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import Node, Quantities

# How a head ranks among its competitors at one cohort, least first: it borrows a
# flavor-resource it asks for there, its share there (``DRS.key``), minus its priority,
# its time in its queue. Comparing these tuples is ``_Round._less``.
_Rank = tuple[bool, tuple[int, float], int, float]


class _Round:
    """One pop: every head's share at every level of its tree, with its usage in (kept
    for trees whose heads do not have distinct ClusterQueues and keys)."""

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


class _Head:
    """One head of a cohort tree and its rank at every cohort above it, as of the usage
    last seen on ``path`` (its ClusterQueue up to the node just below the root)."""

    __slots__ = ("ev", "path", "ranks")

    def __init__(self, ev: Evaluation) -> None:
        self.ev = ev
        node = ev.cq.node
        path = [node]
        path += node.path_to_root()
        self.path: list[Node] = path[:-1]  # the root has no share
        self.ranks: dict[int, _Rank] = {}

    def rank(self) -> None:
        """Compute the ranks again from the snapshot's usage now, with the head's own
        usage counted (the snapshot's usage is left as found, in values: a usage put back
        then withdrawn may leave zeros where nothing was)."""
        ev = self.ev
        node = ev.cq.node
        usage = ev.assignment.usage
        pending = ev.pending
        tail = (-pending.priority, pending.queue_order_ts)
        parent = node.parent
        assert parent is not None
        if parent.parent is None:
            # Right under the root: one share, of the ClusterQueue's own usage plus the
            # head's (what putting it back would make it), without touching the tree.
            drs = dominant_resource_share(node, minus={fr: -v for fr, v in usage.items()})
            self.ranks = {id(parent): (drs.borrowing_on(usage), drs.key, *tail)}
            return
        ranks: dict[int, _Rank] = {}
        Snapshot.put_back(node, usage)
        try:
            child = node
            for ancestor in node.path_to_root():
                drs = dominant_resource_share(child)
                ranks[id(ancestor)] = (drs.borrowing_on(usage), drs.key, *tail)
                child = ancestor
        finally:
            Snapshot.withdraw(node, usage)
        self.ranks = ranks


class _Tree:
    """The tournament of one cohort tree over its heads, kept from one pop to the next.

    Heads must have distinct ClusterQueues. Every head's ranks are computed when the
    tree is made (so it must be made when its first pop is due)."""

    def __init__(self, root: Node, entries: list[Evaluation]) -> None:
        self.root = root
        heads = {ev.cq.name: _Head(ev) for ev in entries}
        # The tree's structure, as the tournament visits it: per cohort, its child
        # cohorts by name, then the heads of its own ClusterQueues by name (heads only
        # ever leave).
        self.cohorts: dict[int, list[Node]] = {}
        self.heads: dict[int, list[_Head]] = {}
        self._visit(root, heads)
        # Per node on the path of a head left: those heads, and the node's usage as
        # their ranks were last computed on.
        self.users: dict[int, dict[int, _Head]] = {}
        self.seen: dict[int, tuple[Node, Quantities]] = {}
        for head in heads.values():
            head.rank()
            for node in head.path:
                self.users.setdefault(id(node), {})[id(head)] = head
        for head in heads.values():
            for node in head.path:
                self.seen[id(node)] = (node, dict(node.usage))

    def _visit(self, cohort: Node, heads: dict[str, _Head]) -> None:
        children = sorted(cohort.child_cohorts, key=lambda n: n.name)
        self.cohorts[id(cohort)] = children
        names = sorted(n.name for n in cohort.child_cqs)
        self.heads[id(cohort)] = [heads[n] for n in names if n in heads]
        for child in children:
            self._visit(child, heads)

    def pop(self) -> Evaluation:
        """The winner over the heads left, with their shares now; it leaves the tree."""
        seen = self.seen
        changed = [key for key, (node, usage) in seen.items() if node.usage != usage]
        if changed:
            stale: dict[int, _Head] = {}
            for key in changed:
                stale.update(self.users[key])
            refresh = set(changed)
            for head in stale.values():
                head.rank()
                refresh.update(id(node) for node in head.path)
            # Putting a usage back, then withdrawing it, may leave zeros where there was
            # nothing: the copies are taken once every rank is computed again.
            for key in refresh:
                node = seen[key][0]
                seen[key] = (node, dict(node.usage))
        best = self._winner(self.root)
        assert best is not None
        node = best.ev.cq.node
        assert node.parent is not None
        self.heads[id(node.parent)].remove(best)
        for node in best.path:
            users = self.users[id(node)]
            del users[id(best)]
            if not users:
                del self.users[id(node)]
                del seen[id(node)]
        return best.ev

    def _winner(self, cohort: Node) -> _Head | None:
        key = id(cohort)
        competitors: list[_Head] = []
        for child in self.cohorts[key]:
            best = self._winner(child)
            if best is not None:
                competitors.append(best)
        competitors += self.heads[key]
        if not competitors:
            return None
        # ``min`` keeps the first of equal ranks, as the tournament does.
        return min(competitors, key=lambda h: h.ranks[key])


def _tree(ev: Evaluation) -> str:
    node = ev.cq.node
    return node.root().name if node.parent is not None else f"\0{node.name}"


def _reference(snapshot: Snapshot, members: list[Evaluation]) -> Iterator[Evaluation]:
    """One cohort tree's heads, with every share computed again at every pop."""
    remaining = list(members)
    root = members[0].cq.node.root()
    while remaining:
        chosen = _Round(snapshot, remaining).winner(root)
        assert chosen is not None
        remaining.remove(chosen)
        yield chosen


def fair_order(snapshot: Snapshot, entries: list[Evaluation]) -> Iterator[Evaluation]:
    """The heads, one at a time, each chosen once the ones before were processed (the
    caller may change any usage in between; not the quotas, weights or tree). Trees in
    order of their root's name, every ClusterQueue outside any cohort before them (its
    heads in the order given)."""
    trees: dict[str, list[Evaluation]] = {}
    for ev in entries:
        trees.setdefault(_tree(ev), []).append(ev)
    for name in sorted(trees):
        members = trees[name]
        node = members[0].cq.node
        if node.parent is None:
            yield from members
            continue
        distinct = len({ev.cq.name for ev in members}) == len(members) and len(
            {ev.pending.key for ev in members}
        ) == len(members)
        if not distinct:
            yield from _reference(snapshot, members)
            continue
        tree = _Tree(node.root(), members)
        for _ in range(len(members)):
            yield tree.pop()


__all__ = ["fair_order"]
