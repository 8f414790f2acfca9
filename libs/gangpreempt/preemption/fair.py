"""Victims under Kueue's fair sharing (KEP-1714 as Kueue's ``fairPreemptions`` does it).

Candidates: the preemptor's own ClusterQueue (``withinClusterQueue``), and every other
ClusterQueue of the cohort tree that borrows a flavor-resource the preemptor needs
(``reclaimWithinCohort``; ``borrowWithinCohort`` plays no part). With the incoming
workload's usage counted, the target queue is found by descending the tree towards the
highest dominant resource share; one victim is taken from it at a time, and shares are
computed again:

- from the own queue, always (``InClusterQueue``);
- while the preemptor stays within its nominal quota, without a share test
  (``InCohortReclamation``);
- otherwise by the first strategy (``InCohortFairSharing``):
  ``LessThanOrEqualToFinalShare`` (the preemptor's share with the workload is at most
  the target's without the victim) or ``LessThanInitialShare`` (strictly below the
  target's before); shares are those of the two nodes just below the lowest common
  cohort. Candidates the first strategy refused get a second pass under
  ``LessThanInitialShare``, one per queue, when it is configured second.

Once the workload fits, victims are put back from the second-to-last down to the first
while it still fits. Nothing fits: no victims.

Under ``--victim-cost lost-gpu-hours`` fair sharing's rules are kept whole (which queue
gives up a victim, every share test); within a queue, candidates of one priority are
taken least lost work first, and ties between queues go the same way.
"""

from __future__ import annotations

import bisect
import heapq
import weakref
from collections.abc import Iterator
from itertools import compress
from operator import attrgetter, ne

from gangpreempt.model.queues import LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LOWER_PRIORITY, NEVER
from gangpreempt.preemption.candidates import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAMATION,
    LOST_GPU_HOURS,
    Classifier,
    Request,
)
from gangpreempt.preemption.classical import Target
from gangpreempt.quota.fairshare import DRS, NEGATIVE, compare, dominant_resource_share
from gangpreempt.quota.snapshot import AdmittedWorkload, ClusterQueueState, Snapshot
from gangpreempt.quota.tree import FR, Node, Quantities, cq_available

IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


def _candidate_order(
    aw: AdmittedWorkload, own: str, cost_at: float | None = None
) -> tuple[bool, bool, int, float, str]:
    """Kueue's candidate order: evicting first, other queues before the own, lower
    priority, most recently admitted (with ``cost_at``: least lost work then), uid."""
    last = -aw.reserved_ts if cost_at is None else aw.lost_work(cost_at)
    return (not aw.evicting, aw.cq == own, aw.priority, last, aw.uid)


def _least_lost_first(
    items: Iterator[AdmittedWorkload], now_ts: float
) -> Iterator[AdmittedWorkload]:
    """``items`` (in priority order) with each run of one priority least lost work first
    (stable: Kueue's order between equals); reads one run ahead."""
    run: list[AdmittedWorkload] = []
    for aw in items:
        if run and aw.priority != run[0].priority:
            yield from sorted(run, key=lambda a: a.lost_work(now_ts))
            run = []
        run.append(aw)
    yield from sorted(run, key=lambda a: a.lost_work(now_ts))


OrderKey = tuple[bool, bool, int, float, str]


class _Stream:
    """A queue's candidates in Kueue's order, read lazily (not even the first until
    asked: the indexes do not change during a search), with one to peek at and its order
    key, for ties between queues."""

    __slots__ = ("_cost_at", "_head", "_it", "_key", "_own", "_read")

    def __init__(
        self, items: Iterator[AdmittedWorkload], own: str, cost_at: float | None = None
    ) -> None:
        self._it = items
        self._own = own
        self._cost_at = cost_at
        self._head: AdmittedWorkload | None = None
        self._read = False  # whether ``_head`` is read
        self._key: OrderKey | None = None

    def _peek(self) -> AdmittedWorkload | None:
        if not self._read:
            self._head = next(self._it, None)
            self._read = True
        return self._head

    def __bool__(self) -> bool:
        return self._peek() is not None

    @property
    def head_key(self) -> OrderKey | None:
        head = self._peek()
        if head is None:
            return None
        key = self._key
        if key is None:
            key = self._key = _candidate_order(head, self._own, self._cost_at)
        return key

    def first(self) -> AdmittedWorkload:
        head = self._peek()
        assert head is not None
        return head

    def pop(self) -> AdmittedWorkload:
        head = self.first()
        self._head, self._read, self._key = None, False, None
        return head


# A child queue's place in its cohort's heap: the negated share key (highest share
# first); between queues of one share, the order key of its head (``()`` until a tie asks
# for it: it then comes first, so that a tie is always settled on every member's head);
# its name; a version (the entry is stale once the queue has a newer one); the queue.
_Entry = tuple[int, float, OrderKey | tuple[()], str, int, Node]


class _Ordering:
    """Target queues by share, descending the cohort tree from the root each time.

    At each cohort the child queues wait in a heap by share: only a queue whose
    candidates were popped since can have changed (its share and head), so only it is
    placed again; among the queues of the highest share the one with the smallest head
    (then name) wins, which is what a scan of every child would pick. A queue's
    candidates are read only once it is at the top. Child cohorts are scanned (their
    shares change with any queue below)."""

    def __init__(self, fair: FairSearch, candidates: dict[str, _Stream | None]) -> None:
        self.fair = fair
        # The first entries of the candidates other than the own queue (from
        # ``_TreeCache``), set when ``candidates`` are the kept borrowers (and the own
        # queue) and no queue has lost a victim yet (see ``_first_heap``).
        self.kept: _Kept | None = None
        # Empty streams are pruned when met; None: a stream not opened yet (most never
        # are: only queues that reach the top of their heap are read).
        self.remaining = dict(candidates)
        self.pruned: set[int] = set()
        self._heaps: dict[int, list[_Entry]] = {}
        # queue -> the version of its live entry (absent: 1, that of a first entry)
        self._version: dict[int, int] = {}
        self._dirty: dict[int, Node] = {}  # queues popped from since their entry

    def _open(self, name: str) -> _Stream:
        stream = self.remaining[name]
        if stream is None:
            stream = self.remaining[name] = self.fair.open_stream(name)
        return stream

    def pop(self, cq: Node) -> AdmittedWorkload:
        self._dirty[id(cq)] = cq
        return self._open(cq.name).pop()

    def has(self, cq: Node) -> bool:
        return cq.name in self.remaining and bool(self._open(cq.name))

    def first(self, cq: Node) -> AdmittedWorkload:
        return self._open(cq.name).first()

    def drop(self, cq: Node) -> None:
        self.pruned.add(id(cq))

    def drain(self, cq: Node) -> AdmittedWorkload | None:
        """Take the queue out of this pass; its first remaining candidate, if any."""
        self._dirty[id(cq)] = cq
        if cq.name not in self.remaining:
            return None
        stream = self._open(cq.name)
        del self.remaining[cq.name]
        return stream.first() if stream else None

    def __iter__(self) -> Iterator[Node]:
        own = self.fair.own
        if own.parent is None:
            while self.has(own):
                yield own
            return
        root = own.root()
        while id(root) not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def _entry(self, child: Node) -> _Entry | None:
        """A child queue's new entry, or None when it is pruned: no longer a candidate
        queue or, unless it is the preemptor's, without a share."""
        if id(child) in self.pruned:
            return None
        if child.name not in self.remaining:
            self.pruned.add(id(child))
            return None
        drs = self.fair.share(child)
        if drs.is_zero and child is not self.fair.own:
            self.pruned.add(id(child))
            return None
        version = self._version.get(id(child), 1) + 1
        self._version[id(child)] = version
        k0, k1 = drs.key
        return (-k0, -k1, (), child.name, version, child)

    def _heap(self, cohort: Node) -> list[_Entry]:
        heap = self._heaps.get(id(cohort))
        if heap is None:
            if self.kept is not None:
                heap = self._first_heap(cohort, self.kept)
            else:
                # ``_entry`` of every child queue still a candidate, inlined (the hot loop
                # of a search: it visits every child queue of the cohort).
                heap = []
                remaining, pruned = self.remaining, self.pruned
                share, own = self.fair.share, self.fair.own
                for child in cohort.child_cqs:
                    name = child.name
                    if name not in remaining:
                        continue
                    key = id(child)
                    if key in pruned:
                        continue
                    drs = share(child)
                    if drs.ratio == 0 and child is not own:
                        pruned.add(key)
                        continue
                    k0, k1 = drs.key
                    heap.append((-k0, -k1, (), name, 1, child))
                heapq.heapify(heap)
            self._heaps[id(cohort)] = heap
        elif self._dirty:
            for key, child in list(self._dirty.items()):
                if child.parent is cohort:
                    del self._dirty[key]
                    entry = self._entry(child)
                    if entry is not None:
                        heapq.heappush(heap, entry)
        return heap

    def _first_heap(self, cohort: Node, kept: _Kept) -> list[_Entry]:
        """The heap the loop of ``_heap`` makes, from the entries kept for the tree: no
        queue of ``cohort`` has lost a victim in this ordering (a queue is a target only
        once its cohort's heap is made), so every child queue but the own has the share
        it had before the search. A child queue without a share has no kept entry: it is
        never a target, so it need not be in ``pruned``."""
        own = self.fair.own
        found = kept.entries.get(id(cohort))
        if found is None:
            heap: list[_Entry] = []
        elif id(own) in kept.where:  # kept for every search: not the own queue's here
            heap = [entry for entry in found if entry[5] is not own]
        else:
            heap = list(found)  # sorted: a heap
        if own.parent is cohort and own.name in self.remaining and id(own) not in self.pruned:
            k0, k1 = self.fair.share(own).key
            heapq.heappush(heap, (-k0, -k1, (), own.name, 1, own))
        return heap

    def _live_top(self, heap: list[_Entry]) -> _Entry | None:
        """Pop what is stale, pruned or out of candidates; the top entry after that."""
        versions, pruned, remaining = self._version, self.pruned, self.remaining
        while heap:
            entry = heap[0]
            key = id(entry[5])
            if entry[4] != versions.get(key, 1) or key in pruned:
                heapq.heappop(heap)
                continue
            name = entry[3]  # ``has``, inlined
            if name in remaining and self._open(name)._peek() is not None:
                return entry
            pruned.add(key)  # no candidates (left)
            heapq.heappop(heap)
        return None

    def _best_cq(self, cohort: Node) -> tuple[Node | None, tuple[int, float]]:
        """The child queue of the highest share; of several, the one with the smallest
        head, then name. Heads are read only for queues tied at the top."""
        heap = self._heap(cohort)
        while True:
            top = self._live_top(heap)
            if top is None:
                return None, NEGATIVE.key
            k0, k1, tie, name, version, child = top
            if tie:
                # Settled: the members of its share still unsettled would come first.
                return child, (-k0, -k1)
            # Alone at its share when neither child of the top has it (every entry below
            # a child has at least the child's share): no entry to pop and push back.
            n = len(heap)
            if (n < 2 or heap[1][0] != k0 or heap[1][1] != k1) and (
                n < 3 or heap[2][0] != k0 or heap[2][1] != k1
            ):
                return child, (-k0, -k1)
            heapq.heappop(heap)
            after = self._live_top(heap)
            if after is None or after[0] != k0 or after[1] != k1:
                heapq.heappush(heap, top)  # alone at the top: its head does not matter
                return child, (-k0, -k1)
            head_key = self._open(name).head_key
            assert head_key is not None
            heapq.heappush(heap, (k0, k1, head_key, name, version, child))

    def _next(self, cohort: Node) -> Node | None:
        fair = self.fair
        best_cq, best_cq_key = self._best_cq(cohort)
        best_cohort: Node | None = None
        best_cohort_key = NEGATIVE.key
        for child in fair.children(cohort)[1] if cohort.child_cohorts else ():
            if id(child) in self.pruned:
                continue
            drs = fair.share(child)
            if drs.is_zero and id(child) not in fair.own_path:
                self.pruned.add(id(child))
                continue
            if drs.key >= best_cohort_key:
                best_cohort, best_cohort_key = child, drs.key
        if best_cq is None and best_cohort is None:
            self.pruned.add(id(cohort))
            return None
        if best_cohort is not None and (best_cq is None or best_cohort_key >= best_cq_key):
            return self._next(best_cohort)
        return best_cq


class _Kept:
    """The queues of a tree borrowing some of a set of flavor-resources (``names``, a
    dict: name -> None), and per cohort the first heap entries of those of them with a
    share, sorted (a heap), as the usage in the tree stands before a search."""

    __slots__ = ("entries", "frs", "names", "where")

    def __init__(self, frs: frozenset[FR], queues: list[ClusterQueueState]) -> None:
        self.frs = frs
        self.names: dict[str, None] = {}
        self.entries: dict[int, list[_Entry]] = {}  # cohort -> its entries
        self.where: dict[int, _Entry] = {}  # queue -> its entry
        for cq in queues:
            self._place(cq)
        for heap in self.entries.values():
            heap.sort()

    def _place(self, cq: ClusterQueueState) -> None:
        """Count ``cq`` in if it borrows what is needed (its entry appended, not sorted in:
        ``__init__`` sorts)."""
        node = cq.node
        usage, quota = node.usage, node.subtree_quota
        for fr in self.frs:
            if usage.get(fr, 0) > quota.get(fr, 0):  # it borrows what is needed
                self.names[cq.name] = None
                drs = dominant_resource_share(node)
                if drs.ratio != 0:
                    assert node.parent is not None
                    k0, k1 = drs.key
                    entry = self.where[id(node)] = (-k0, -k1, (), node.name, 1, node)
                    self.entries.setdefault(id(node.parent), []).append(entry)
                return

    def update(self, cq: ClusterQueueState) -> None:
        """``cq``'s usage changed: place it again."""
        node = cq.node
        self.names.pop(cq.name, None)
        old = self.where.pop(id(node), None)
        if old is not None:
            assert node.parent is not None
            self.entries[id(node.parent)].remove(old)
        self._place(cq)
        new = self.where.get(id(node))
        if new is not None:
            assert node.parent is not None
            heap = self.entries[id(node.parent)]
            last = heap.pop()  # appended by ``_place``
            assert last is new
            bisect.insort(heap, new)


class _TreeCache:
    """What every search in one cohort tree of a snapshot starts from, kept while the
    usage of the tree's queues stands: per set of needed flavor-resources, the queues
    borrowing some and their shares as first heap entries (``_Kept``). Before every
    search, each queue's usage is compared with a copy taken when it was last placed (a
    search leaves the usage as it found it; an admission or a release between searches
    changes it, and the queues it changed are placed again)."""

    __slots__ = ("_kept", "nodes", "queues", "usages")

    def __init__(self, snapshot: Snapshot, root: Node) -> None:
        self.queues = snapshot.tree_cluster_queues(root)
        self.nodes = [cq.node for cq in self.queues]
        self.usages: list[Quantities] = [dict(node.usage) for node in self.nodes]
        self._kept: dict[frozenset[FR], _Kept] = {}

    @classmethod
    def of(cls, snapshot: Snapshot, root: Node) -> _TreeCache:
        """The tree's cache, brought up to the usage now."""
        trees = _TREES.get(snapshot)
        if trees is None:
            trees = _TREES[snapshot] = {}
        cache = trees.get(root.name)
        if cache is None:
            cache = trees[root.name] = cls(snapshot, root)
            return cache
        usages = cache.usages
        # The queues whose usage differs from the copy, by value (zeros left by a search
        # are no change); compared without a Python loop.
        changed = compress(range(len(usages)), map(ne, map(_usage, cache.nodes), usages))
        for i in changed:
            usages[i] = dict(cache.nodes[i].usage)
            cq = cache.queues[i]
            for found in cache._kept.values():
                found.update(cq)
        return cache

    def borrowers(self, frs: frozenset[FR]) -> _Kept:
        found = self._kept.get(frs)
        if found is None:
            if len(self._kept) >= _KEPT_LIMIT:
                self._kept.clear()
            found = self._kept[frs] = _Kept(frs, self.queues)
        return found


_KEPT_LIMIT = 64  # sets of flavor-resources kept per tree

# snapshot -> root cohort name -> its cache (gone with the snapshot)
_TREES: weakref.WeakKeyDictionary[Snapshot, dict[str, _TreeCache]] = weakref.WeakKeyDictionary()


class FairSearch:
    """One fair-sharing victim search on a snapshot, which it leaves as it found it."""

    def __init__(self, snapshot: Snapshot, req: Request) -> None:
        self.snapshot = snapshot
        self.req = req
        self.own = req.cq.node
        self.own_path = {id(n) for n in self.own.path_to_root()}
        self.classifier = Classifier(req)
        self._lendable: dict[int, dict[str, int]] = {}
        self._shares: dict[int, DRS] = {}  # per node, until its usage changes
        self.targets: list[Target] = []
        self._kept: _Kept | None = None  # set by ``candidates``, for the first pass
        # ``--victim-cost lost-gpu-hours``: the time lost work is counted at
        cost = snapshot.victim_cost == LOST_GPU_HOURS
        self.cost_at = snapshot.now.timestamp() if cost else None

    # -- shares ----------------------------------------------------------------------------

    def share(self, node: Node) -> DRS:
        found = self._shares.get(id(node))
        if found is None:
            found = self._shares[id(node)] = dominant_resource_share(node, self._lendable)
        return found

    def share_now(self, node: Node) -> DRS:
        """Not cached: the usage is about to change back."""
        return dominant_resource_share(node, self._lendable)

    def changed(self, node: Node) -> None:
        """``node``'s usage changed, and so did its ancestors'."""
        self._shares.pop(id(node), None)
        for ancestor in node.path_to_root():
            self._shares.pop(id(ancestor), None)

    def children(self, cohort: Node) -> tuple[list[Node], list[Node]]:
        return self.snapshot.children_by_name(cohort)

    def _below_lca(self, target: Node) -> tuple[Node, Node]:
        """The two nodes just below the lowest common cohort of the preemptor's queue and
        ``target``: (the preemptor's side, the target's side)."""
        lca = target.parent
        while lca is not None and id(lca) not in self.own_path:
            lca = lca.parent
        return _child_toward(self.own, lca), _child_toward(target, lca)

    # -- the search ------------------------------------------------------------------------

    def candidates(self) -> dict[str, _Stream | None]:
        """The candidate queues: the own (if ``withinClusterQueue`` allows) and the queues
        of the tree borrowing a needed flavor-resource; each with its stream, None until
        ``open_stream`` (a stream may turn out empty: it is read lazily)."""
        req = self.req
        policy = req.cq.spec.preemption
        out: dict[str, _Stream | None] = {}
        own = req.cq.name
        if policy.within_cluster_queue != NEVER:
            out[own] = None
        if self.own.parent is not None and policy.reclaim_within_cohort != NEVER:
            kept = self._kept = _TreeCache.of(self.snapshot, self.own.root()).borrowers(req.frs)
            names = kept.names
            out.update(names)
            if own in names and policy.within_cluster_queue == NEVER:
                del out[own]  # the own queue is a candidate by ``withinClusterQueue`` only
        return out

    def open_stream(self, name: str) -> _Stream:
        """The stream of candidate queue ``name`` (see ``candidates``)."""
        req = self.req
        policy = req.cq.spec.preemption
        own = req.cq.name
        at = self.cost_at
        if name == own:
            return _Stream(self._stream(req.cq, policy.within_cluster_queue), own, at)
        queue = self.snapshot.cqs[name]
        return _Stream(self._stream(queue, policy.reclaim_within_cohort), own, at)

    def _stream(self, cq: ClusterQueueState, rule: str) -> Iterator[AdmittedWorkload]:
        """The workloads of ``cq`` that use a needed flavor-resource and the policy allows,
        evicting first, each group in the queue's index order (lower priority, most
        recently admitted, uid): read from the sorted indexes, as far as asked."""
        classify = self.classifier
        bound = self.req.preemptor.priority
        for evicting in (True, False):
            lists = cq.using(self.req.frs, evicting)
            if not lists:
                continue
            merged: Iterator[AdmittedWorkload] = (
                iter(lists[0]) if len(lists) == 1 else _unique(heapq.merge(*lists, key=_index))
            )
            if self.cost_at is not None:
                merged = _least_lost_first(merged, self.cost_at)
            for aw in merged:
                if rule == LOWER_PRIORITY and aw.priority >= bound:
                    break  # sorted by priority: nothing further is lower
                if classify.satisfies_policy(aw, rule):
                    yield aw

    def fits(self) -> bool:
        """Does the incoming workload fit (its own simulated usage set aside)?"""
        snap, node, usage = self.snapshot, self.own, self.req.usage
        snap.withdraw(node, usage)
        ok = _fits_now(node, usage)
        snap.put_back(node, usage)
        return ok

    def take(self, aw: AdmittedWorkload, reason: str) -> None:
        self.snapshot.remove(aw)
        self.changed(self.snapshot.cqs[aw.cq].node)
        self.targets.append(Target(aw, reason))

    def run(self) -> list[Target]:
        candidates = self.candidates()
        if not candidates:
            return []
        snap, usage = self.snapshot, self.req.usage
        snap.put_back(self.own, usage)  # every share counts the incoming workload
        self.changed(self.own)
        try:
            done = self._first_pass(candidates)
        finally:
            snap.withdraw(self.own, usage)
        if not done:
            for t in self.targets:
                snap.restore(t.aw)
            return []
        kept = self._fill_back()
        for t in kept:
            snap.restore(t.aw)
        return kept

    def _first_pass(self, candidates: dict[str, _Stream | None]) -> bool:
        node = self.own
        within_nominal = all(
            node.usage.get(fr, 0) <= node.subtree_quota.get(fr, 0) for fr in self.req.frs
        )
        strategies = self.snapshot.fair_strategies
        first = strategies[0] if strategies else LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
        # What the first strategy refused, per queue, in candidate order: only the first
        # of each queue can matter to the second pass (it takes one per queue).
        retry: dict[str, AdmittedWorkload] = {}
        ordering = _Ordering(self, candidates)
        ordering.kept = self._kept  # before any victim is taken
        for target in ordering:
            if target is self.own:
                self.take(ordering.pop(target), IN_CLUSTER_QUEUE)
                if self.fits():
                    return True
                continue
            if within_nominal:
                self.take(ordering.pop(target), IN_COHORT_RECLAMATION)
                if self.fits():
                    return True
                continue
            mine, theirs = self._below_lca(target)
            p_new, t_old = self.share(mine), self.share(theirs)
            if (p_new.zero_weight_borrows and not t_old.zero_weight_borrows) or compare(
                p_new, t_old
            ) > (0 if first == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE else -1):
                # No victim of this queue can pass: a victim leaving only lowers the
                # target's share, and the preemptor is already above it (or, for
                # LessThanInitialShare, not below it). All go to the second pass.
                drained = ordering.drain(target)
                if drained is not None:
                    retry.setdefault(target.name, drained)
                continue
            # The usages refused: workloads of one usage (one shape) pass or fail alike
            # while the shares stand.
            refused: list[Quantities] = []
            while ordering.has(target):
                aw = ordering.pop(target)
                if refused and aw.usage in refused:
                    retry.setdefault(target.name, aw)
                    continue
                if first != LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
                    ok = compare(p_new, t_old) < 0
                else:
                    if theirs is target:  # its usage is its own: the tree stays as it is
                        t_new = dominant_resource_share(theirs, self._lendable, aw.usage)
                    else:
                        self.snapshot.remove(aw)
                        t_new = self.share_now(theirs)
                        self.snapshot.restore(aw)
                    ok = compare(p_new, t_new) <= 0
                if ok:
                    self.take(aw, IN_COHORT_FAIR_SHARING)
                    if self.fits():
                        return True
                    break  # shares changed: back to the ordering
                refused.append(aw.usage)
                retry.setdefault(target.name, aw)
                if first != LESS_THAN_OR_EQUAL_TO_FINAL_SHARE or _all_refused(
                    self.snapshot, self.snapshot.cqs[target.name], refused
                ):
                    # Every candidate left would be refused too (the test does not look
                    # at the victim, or every shape of the queue is refused): the queue
                    # is done, as if each had been tried.
                    ordering.drain(target)
                    break
        if len(strategies) < 2 or not retry:
            return False
        return self._second_pass(retry)

    def _second_pass(self, retry: dict[str, AdmittedWorkload]) -> bool:
        """``LessThanInitialShare`` over what the first strategy refused, at most one
        victim per queue (its first refused candidate)."""
        own = self.req.cq.name
        ordering = _Ordering(
            self, {cq: _Stream(iter([aw]), own, self.cost_at) for cq, aw in retry.items()}
        )
        for target in ordering:
            mine, theirs = self._below_lca(target)
            p_new, t_old = self.share(mine), self.share(theirs)
            aw = ordering.pop(target)
            if compare(p_new, t_old) < 0:
                self.take(aw, IN_COHORT_FAIR_SHARING)
                if self.fits():
                    return True
            ordering.drop(target)
        return False

    def _fill_back(self) -> list[Target]:
        """Victims put back from the second-to-last down to the first while the workload
        still fits (the last one taken stays); what is left is removed from the
        snapshot on return."""
        snap, targets = self.snapshot, list(self.targets)
        for i in range(len(targets) - 2, -1, -1):
            snap.restore(targets[i].aw)
            if self.fits_now():
                targets[i] = targets[-1]
                targets.pop()
            else:
                snap.remove(targets[i].aw)
        return targets

    def fits_now(self) -> bool:
        """``fits`` once the incoming workload's simulated usage is gone."""
        return _fits_now(self.own, self.req.usage)


def _fits_now(node: Node, usage: Quantities) -> bool:
    """Whether ``usage`` fits in what the ClusterQueue ``node`` can admit now."""
    for fr, v in usage.items():  # noqa: SIM110 - a loop: no generator to make
        if v > cq_available(node, fr):
            return False
    return True


_SCAN_LIMIT = 1024  # a queue holding more workloads is asked its shapes (kept)
_DISTINCT_LIMIT = 16  # a queue of more usages than this is asked its shapes (kept)


def _all_refused(snapshot: Snapshot, cq: ClusterQueueState, refused: list[Quantities]) -> bool:
    """Whether every workload holding quota in ``cq`` (pinned ones too) has a usage in
    ``refused``, that is, ``cq.shapes()`` are all shapes of ``refused``: asked of the
    queue's distinct usages (``_usages``; no shape made), or, for a queue of many
    workloads or usages, of its shapes (counted once, then kept with its membership)."""
    usages = _usages(snapshot, cq)
    if usages is None:
        shapes = {tuple(sorted(usage.items())) for usage in refused}
        return shapes.issuperset(cq.shapes())
    return all(map(refused.__contains__, usages))


def _usages(snapshot: Snapshot, cq: ClusterQueueState) -> list[Quantities] | None:
    """The distinct usages of the workloads holding quota in ``cq`` (None: more than
    ``_SCAN_LIMIT`` workloads or ``_DISTINCT_LIMIT`` usages), kept per snapshot while the
    queue holds the very same workloads (an admitted workload's usage never changes)."""
    workloads = cq.workloads
    if len(workloads) > _SCAN_LIMIT:
        return None
    kept = _USAGES.get(snapshot)
    if kept is None:
        kept = _USAGES[snapshot] = {}
    members = list(workloads.values())
    found = kept.get(cq.name)
    if found is not None and found[0] == members:  # by identity: the same workloads
        return found[1]
    distinct: list[Quantities] = []
    for aw in members:
        usage = aw.usage
        if usage not in distinct:
            if len(distinct) >= _DISTINCT_LIMIT:
                kept[cq.name] = (members, None)
                return None
            distinct.append(usage)
    kept[cq.name] = (members, distinct)
    return distinct


# snapshot -> queue -> (its workloads, their distinct usages) (gone with the snapshot)
_USAGES: weakref.WeakKeyDictionary[
    Snapshot, dict[str, tuple[list[AdmittedWorkload], list[Quantities] | None]]
] = weakref.WeakKeyDictionary()


_usage = attrgetter("usage")


def _index(aw: AdmittedWorkload) -> tuple[int, float, str]:
    return aw.order_key


def _unique(items: Iterator[AdmittedWorkload]) -> Iterator[AdmittedWorkload]:
    """A workload using several needed flavor-resources is in several indexes: once."""
    seen: set[str] = set()
    for aw in items:
        if aw.key not in seen:
            seen.add(aw.key)
            yield aw


def _child_toward(node: Node, ancestor: Node | None) -> Node:
    """``node``, or its ancestor whose parent is ``ancestor``."""
    while node.parent is not None and node.parent is not ancestor:
        node = node.parent
    return node


__all__ = ["IN_COHORT_FAIR_SHARING", "FairSearch"]
