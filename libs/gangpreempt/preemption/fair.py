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
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from gangpreempt.model.queues import LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LOWER_PRIORITY, NEVER
from gangpreempt.preemption.candidates import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAMATION,
    Classifier,
    Request,
)
from gangpreempt.preemption.classical import Target
from gangpreempt.quota.fairshare import DRS, NEGATIVE, compare, dominant_resource_share
from gangpreempt.quota.snapshot import AdmittedWorkload, ClusterQueueState, Snapshot
from gangpreempt.quota.tree import FR, Node, cq_available

IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


def _candidate_order(aw: AdmittedWorkload, own: str) -> tuple[bool, bool, int, float, str]:
    """Kueue's candidate order: evicting first, other queues before the own, lower
    priority, most recently admitted, uid."""
    return (not aw.evicting, aw.cq == own, aw.priority, -aw.reserved_ts, aw.uid)


OrderKey = tuple[bool, bool, int, float, str]


class _Stream:
    """A queue's candidates in Kueue's order, read lazily (not even the first until
    asked: the indexes do not change during a search), with one to peek at and its order
    key, for ties between queues."""

    __slots__ = ("_head", "_it", "_key", "_own", "_read")

    def __init__(self, items: Iterator[AdmittedWorkload], own: str) -> None:
        self._it = items
        self._own = own
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
            key = self._key = _candidate_order(head, self._own)
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

    def __init__(self, fair: FairSearch, candidates: dict[str, _Stream]) -> None:
        self.fair = fair
        self.remaining = dict(candidates)  # empty streams are pruned when met
        self.pruned: set[int] = set()
        self._heaps: dict[int, list[_Entry]] = {}
        self._version: dict[int, int] = {}  # queue -> the version of its live entry
        self._dirty: dict[int, Node] = {}  # queues popped from since their entry

    def pop(self, cq: Node) -> AdmittedWorkload:
        self._dirty[id(cq)] = cq
        return self.remaining[cq.name].pop()

    def has(self, cq: Node) -> bool:
        stream = self.remaining.get(cq.name)
        return stream is not None and bool(stream)

    def first(self, cq: Node) -> AdmittedWorkload:
        return self.remaining[cq.name].first()

    def drop(self, cq: Node) -> None:
        self.pruned.add(id(cq))

    def drain(self, cq: Node) -> AdmittedWorkload | None:
        """Take the queue out of this pass; its first remaining candidate, if any."""
        self._dirty[id(cq)] = cq
        stream = self.remaining.pop(cq.name, None)
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
        version = self._version.get(id(child), 0) + 1
        self._version[id(child)] = version
        k0, k1 = drs.key
        return (-k0, -k1, (), child.name, version, child)

    def _heap(self, cohort: Node) -> list[_Entry]:
        heap = self._heaps.get(id(cohort))
        if heap is None:
            heap = []
            for child in cohort.child_cqs:
                if child.name in self.remaining:
                    entry = self._entry(child)
                    if entry is not None:
                        heap.append(entry)
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

    def _live_top(self, heap: list[_Entry]) -> _Entry | None:
        """Pop what is stale, pruned or out of candidates; the top entry after that."""
        while heap:
            entry = heap[0]
            child = entry[5]
            if entry[4] != self._version[id(child)] or id(child) in self.pruned:
                heapq.heappop(heap)
                continue
            if not self.has(child):  # no candidates (left)
                self.pruned.add(id(child))
                heapq.heappop(heap)
                continue
            return entry
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
            heapq.heappop(heap)
            after = self._live_top(heap)
            if after is None or after[0] != k0 or after[1] != k1:
                heapq.heappush(heap, top)  # alone at the top: its head does not matter
                return child, (-k0, -k1)
            head_key = self.remaining[name].head_key
            assert head_key is not None
            heapq.heappush(heap, (k0, k1, head_key, name, version, child))

    def _next(self, cohort: Node) -> Node | None:
        fair = self.fair
        best_cq, best_cq_key = self._best_cq(cohort)
        best_cohort: Node | None = None
        best_cohort_key = NEGATIVE.key
        for child in fair.children(cohort)[1]:
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

    def candidates(self) -> dict[str, _Stream]:
        """The candidate streams: the own queue's (if ``withinClusterQueue`` allows) and
        those of the queues of the tree borrowing a needed flavor-resource; a stream may
        turn out empty (it is read lazily)."""
        req = self.req
        policy = req.cq.spec.preemption
        out: dict[str, _Stream] = {}
        if policy.within_cluster_queue != NEVER:
            out[req.cq.name] = _Stream(
                self._stream(req.cq, policy.within_cluster_queue), req.cq.name
            )
        if self.own.parent is not None and policy.reclaim_within_cohort != NEVER:
            frs, rule, own = req.frs, policy.reclaim_within_cohort, req.cq.name
            for cq in self.snapshot.tree_cluster_queues(self.own.root()):
                if cq is req.cq:
                    continue
                usage, quota = cq.node.usage, cq.node.subtree_quota
                for fr in frs:
                    if usage.get(fr, 0) > quota.get(fr, 0):  # it borrows what is needed
                        out[cq.name] = _Stream(self._stream(cq, rule), own)
                        break
        return out

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
            for aw in merged:
                if rule == LOWER_PRIORITY and aw.priority >= bound:
                    break  # sorted by priority: nothing further is lower
                if classify.satisfies_policy(aw, rule):
                    yield aw

    def fits(self) -> bool:
        """Does the incoming workload fit (its own simulated usage set aside)?"""
        snap, node, usage = self.snapshot, self.own, self.req.usage
        snap.withdraw(node, usage)
        ok = all(v <= cq_available(node, fr) for fr, v in usage.items())
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

    def _first_pass(self, candidates: dict[str, _Stream]) -> bool:
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
            refused: set[tuple[tuple[FR, int], ...]] = set()
            shapes = self.snapshot.cqs[target.name].shapes()
            while ordering.has(target):
                aw = ordering.pop(target)
                # Workloads of one shape pass or fail alike while the shares stand.
                shape = aw.shape()
                if shape in refused:
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
                refused.add(shape)
                retry.setdefault(target.name, aw)
                if first != LESS_THAN_OR_EQUAL_TO_FINAL_SHARE or refused.issuperset(shapes):
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
        ordering = _Ordering(self, {cq: _Stream(iter([aw]), own) for cq, aw in retry.items()})
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
        node = self.own
        return all(v <= cq_available(node, fr) for fr, v in self.req.usage.items())


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
