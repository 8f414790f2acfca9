"""Preemption candidates at quota level (Kueue's classical preemption, KEP-83), with
hierarchical cohorts.

Three kinds of candidates, each kept in Kueue's victim order (lower priority first, then
most recently admitted, then uid):

- **hierarchy** candidates: in ClusterQueues outside the smallest subtree whose quota holds
  the request; the preemptor has a hierarchical advantage over them;
- **priority** candidates: other borrowing ClusterQueues, preemptible by policy and
  priority (``reclaimWithinCohort``, ``borrowWithinCohort``);
- **same-queue** candidates: the preemptor's own ClusterQueue (``withinClusterQueue``).

The sequence is: already-evicting hierarchy, priority, same-queue; then the running ones
in the same group order. Streams are lazy: a search that needs two victims out of fifty
thousand admitted workloads looks at a handful.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from enum import IntEnum

from gangpreempt.model.queues import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import AdmittedWorkload, ClusterQueueState, Snapshot
from gangpreempt.quota.toleration import tolerates
from gangpreempt.quota.tree import (
    FR,
    Node,
    Quantities,
    quantities_fit_in_quota,
    remove_amounts,
    remove_usages,
    restore_usages,
)

_NOTHING = -(2**63)  # a priority bound nothing is below

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
# A workload re-admitted after a preemption (its ``Preempted`` condition changed) less than
# this long ago is no candidate: evicted, re-admitted and evicted again within the hour is
# thrashing. One still being evicted stays a candidate: taking it evicts nothing again.
REPREEMPTION_GUARD_S = 3600.0
LOST_GPU_HOURS = "lost-gpu-hours"  # the victim cost of ``--victim-cost``
VICTIM_COSTS = ("", LOST_GPU_HOURS)
KUEUE_ORDER = "kueue-order"  # the users' name of the core's "" (``--victim-cost``)


def core_victim_cost(choice: str) -> str:
    """A victim cost as users name it (``--victim-cost``, ``GANGPREEMPT_VICTIM_COST``) as
    the core names it ("" for Kueue's order)."""
    return "" if choice == KUEUE_ORDER else choice


def victim_cost_name(cost: str) -> str:
    """The core's victim cost as users name it."""
    return cost or KUEUE_ORDER


def recently_preempted(preempted_ts: float, now_ts: float) -> bool:
    """Was the workload preempted (or re-admitted after a preemption) within the guard?"""
    return now_ts - preempted_ts <= REPREEMPTION_GUARD_S


class Variant(IntEnum):
    NEVER = 0
    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4

    @property
    def reason(self) -> str:
        if self is Variant.WITHIN_CQ:
            return IN_CLUSTER_QUEUE
        if self is Variant.RECLAIM_WHILE_BORROWING:
            return IN_COHORT_RECLAIM_WHILE_BORROWING
        return IN_COHORT_RECLAMATION


class Candidate:
    __slots__ = ("aw", "lca", "variant")

    def __init__(self, aw: AdmittedWorkload, lca: Node | None, variant: Variant) -> None:
        self.aw = aw
        self.lca = lca
        self.variant = variant

    def __repr__(self) -> str:
        return f"<Candidate {self.aw.ref} {self.variant.name}>"


class Request:
    """What the search must make room for: the preemptor, its queue, its quota needs."""

    __slots__ = ("cq", "frs", "preemptor", "topology", "usage")

    def __init__(
        self,
        preemptor: PendingWorkload,
        cq: ClusterQueueState,
        frs: frozenset[FR],
        usage: Quantities,
        topology: Callable[[], bool] | None = None,
    ) -> None:
        self.preemptor = preemptor
        self.cq = cq
        self.frs = frs
        self.usage = usage
        # Kueue's topology-aware scheduling: whether the pod sets that ask for a topology
        # have an assignment on the snapshot as it stands (None: none asks)
        self.topology = topology


def borrow_within_cohort(cq: ClusterQueueState) -> tuple[bool, int | None]:
    """(is borrowing while reclaiming allowed, its maxPriorityThreshold)."""
    p = cq.spec.preemption
    if p.borrow_within_cohort == NEVER:
        return False, None
    return True, p.max_priority_threshold


class Classifier:
    """Kueue's classifyPreemptionVariant for one request."""

    def __init__(self, req: Request) -> None:
        self.req = req
        policy = req.cq.spec.preemption
        self.within_policy = policy.within_cluster_queue
        self.cohort_policy = policy.reclaim_within_cohort
        self.priority = req.preemptor.priority
        self.ts = req.preemptor.queue_order_ts
        self.borrow_allowed, self.threshold = borrow_within_cohort(req.cq)
        self.now_ts = req.preemptor.now_ts
        # preempted at or after this instant: within the re-preemption guard
        self.guard_from = self.now_ts - REPREEMPTION_GUARD_S

    def satisfies_policy(self, aw: AdmittedWorkload, policy: str) -> bool:
        if aw.preempted_ts >= self.guard_from and not aw.evicting:
            return False  # re-admitted after a preemption within the hour
        if aw.tolerance is not None and tolerates(aw.tolerance, self.priority, self.now_ts):
            return False  # inside its minimum runtime (``quota.toleration``)
        if policy == LOWER_PRIORITY:
            return aw.priority < self.priority
        if policy == LOWER_OR_NEWER_EQUAL_PRIORITY:
            if aw.priority < self.priority:
                return True
            return aw.priority == self.priority and self.ts < aw.queue_order_ts
        return policy == ANY

    def variant(self, aw: AdmittedWorkload, advantage: bool) -> Variant:
        same_cq = aw.cq == self.req.cq.name
        policy = self.within_policy if same_cq else self.cohort_policy
        if not self.satisfies_policy(aw, policy):
            return Variant.NEVER
        if same_cq:
            return Variant.WITHIN_CQ
        if advantage:
            return Variant.HIERARCHICAL_RECLAIM
        if not self.borrow_allowed:
            return Variant.RECLAIM_WITHOUT_BORROWING
        if aw.priority >= self.priority or (
            self.threshold is not None and aw.priority > self.threshold
        ):
            return Variant.RECLAIM_WITHOUT_BORROWING
        return Variant.RECLAIM_WHILE_BORROWING

    def priority_bound(self, policy: str) -> int | None:
        """Candidates at or above this priority can never satisfy ``policy``."""
        if policy == LOWER_PRIORITY:
            return self.priority
        if policy == LOWER_OR_NEWER_EQUAL_PRIORITY:
            return self.priority + 1
        if policy == NEVER:
            return _NOTHING
        return None


class Source:
    """One ClusterQueue contributing candidates, with its lowest common ancestor with the
    preemptor's queue and whether the preemptor has a hierarchical advantage over it."""

    __slots__ = ("advantage", "cq", "lca")

    def __init__(self, cq: ClusterQueueState, lca: Node | None, advantage: bool) -> None:
        self.cq = cq
        self.lca = lca
        self.advantage = advantage


def cohort_sources(snapshot: Snapshot, req: Request) -> tuple[list[Source], list[Source]]:
    """(hierarchy sources, priority sources): borrowing ClusterQueues of the preemptor's
    tree, walking up from its parent (Kueue's collectCandidatesForHierarchicalReclaim)."""
    hierarchy: list[Source] = []
    priority: list[Source] = []
    node = req.cq.node
    if node.parent is None or req.cq.spec.preemption.reclaim_within_cohort == NEVER:
        return hierarchy, priority
    advantage, remaining = quantities_fit_in_quota(node, req.usage)
    previous: Node | None = None
    for subtree_root in node.path_to_root():
        target = hierarchy if advantage else priority
        _collect(snapshot, req, subtree_root, subtree_root, previous, advantage, target)
        fits, remaining = quantities_fit_in_quota(subtree_root, remaining)
        advantage = advantage or fits
        previous = subtree_root
    return hierarchy, priority


def _collect(
    snapshot: Snapshot,
    req: Request,
    current: Node,
    subtree_root: Node,
    skip: Node | None,
    advantage: bool,
    out: list[Source],
) -> None:
    frs = req.frs
    for child in current.child_cohorts:
        if child is skip or child.within_nominal(frs):
            continue
        _collect(snapshot, req, child, subtree_root, skip, advantage, out)
    own = req.cq.node
    children = snapshot.child_cluster_queues(current)
    if len(frs) == 1:
        (fr,) = frs
        for child, cq in children:
            if child.subtree_quota.get(fr, 0) < child.usage.get(fr, 0) and child is not own:
                out.append(Source(cq, subtree_root, advantage))
        return
    for child, cq in children:
        if child is own:
            continue
        usage, quota = child.usage, child.subtree_quota
        for fr in frs:
            if quota.get(fr, 0) < usage.get(fr, 0):  # not within its nominal quota
                out.append(Source(cq, subtree_root, advantage))
                break


# The index lists a group of sources reads, each with its source, in source order.
IndexLists = list[tuple[list[AdmittedWorkload], Source]]


def _index_lists(sources: list[Source], frs: frozenset[FR], evicting: bool) -> IndexLists:
    out: IndexLists = []
    for src in sources:
        for lst in src.cq.using(frs, evicting):
            out.append((lst, src))
    return out


def _exists(lists: IndexLists, classifier: Classifier, bound: int | None) -> bool:
    """Would ``_stream`` over ``lists`` yield anything? Each list is read up to
    ``bound`` only: existence needs no merged order."""
    for lst, src in lists:
        for aw in lst:
            if bound is not None and aw.priority >= bound:
                break
            if classifier.variant(aw, src.advantage) is not Variant.NEVER:
                return True
    return False


def _stream(
    lists: IndexLists,
    classifier: Classifier,
    bound: int | None,
    cost: str = "",
) -> Iterator[Candidate]:
    """Candidates of the index ``lists`` in victim order, classified, NEVER ones dropped;
    stops at the first candidate whose priority reaches ``bound``. With ``cost``
    ``lost-gpu-hours``, candidates of one priority come least lost work first.

    The lists are merged as ``heapq.merge`` would (ties: the earlier list first), on a
    heap of (order key, list, position)."""
    if cost == LOST_GPU_HOURS:
        now = classifier.now_ts
        found = list(_stream(lists, classifier, bound))
        found.sort(key=lambda c: (c.aw.priority, c.aw.lost_work(now), c.aw.order_key))
        yield from found
        return
    if not lists:
        return
    variant_of = classifier.variant
    if len(lists) == 1:
        lst, src = lists[0]
        for aw in lst:
            if bound is not None and aw.priority >= bound:
                return
            variant = variant_of(aw, src.advantage)
            if variant is not Variant.NEVER:
                yield Candidate(aw, src.lca, variant)
        return
    heap = [(lst[0].order_key, i, 0) for i, (lst, _src) in enumerate(lists)]
    heapq.heapify(heap)
    seen: set[str] = set()
    while heap:
        _key, i, pos = heap[0]
        lst, src = lists[i]
        aw = lst[pos]
        if bound is not None and aw.priority >= bound:
            return
        pos += 1
        if pos < len(lst):
            heapq.heapreplace(heap, (lst[pos].order_key, i, pos))
        else:
            heapq.heappop(heap)
        if aw.key in seen:
            continue
        seen.add(aw.key)
        variant = variant_of(aw, src.advantage)
        if variant is not Variant.NEVER:
            yield Candidate(aw, src.lca, variant)


def _min_bound(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


class Candidates:
    """The candidates of one search, as Kueue's candidate iterator yields them.

    Each pass (with or without borrowing) walks the sequence already-evicting
    hierarchy / priority / same-queue candidates, then the running ones in the same group
    order. A pass stops each group at the first priority the pass can never accept, which
    skips exactly the candidates Kueue's iterator would reject for that pass.
    """

    def __init__(self, snapshot: Snapshot, req: Request) -> None:
        self.snapshot = snapshot
        self.req = req
        self.classifier = Classifier(req)
        policy = req.cq.spec.preemption
        # (id of a source list of this object, evicting) -> its index lists: the indexes
        # do not change during a search (only usage does)
        self._lists: dict[tuple[int, bool], IndexLists] = {}
        self._nothing: list[Source] = []
        self.hierarchy, self.priority = cohort_sources(snapshot, req)
        self.own = [Source(req.cq, None, False)] if policy.within_cluster_queue != NEVER else []
        self.cohort_bound = self.classifier.priority_bound(policy.reclaim_within_cohort)
        self.within_bound = self.classifier.priority_bound(policy.within_cluster_queue)
        self.none_from_hierarchy = not self._exists(self.hierarchy, self.cohort_bound)
        self.none_from_other_queues = self.none_from_hierarchy and not self._exists(
            self.priority, self.cohort_bound
        )

    def _lists_of(self, sources: list[Source], evicting: bool) -> IndexLists:
        key = (id(sources), evicting)
        found = self._lists.get(key)
        if found is None:
            found = self._lists[key] = _index_lists(sources, self.req.frs, evicting)
        return found

    def _exists(self, sources: list[Source], bound: int | None) -> bool:
        return any(
            _exists(self._lists_of(sources, evicting), self.classifier, bound)
            for evicting in (True, False)
        )

    def _groups(self, borrowing: bool) -> list[tuple[list[Source], int | None]]:
        """(sources, priority bound) of the hierarchy, priority and same-queue groups."""
        c = self.classifier
        if not borrowing:
            priority_bound = self.cohort_bound
            priority_sources = self.priority
        elif c.borrow_allowed:
            # While borrowing, only candidates below the preemptor's priority and at or
            # below maxPriorityThreshold may go (the others are ReclaimWithoutBorrowing).
            threshold = None if c.threshold is None else c.threshold + 1
            priority_bound = _min_bound(_min_bound(self.cohort_bound, c.priority), threshold)
            priority_sources = self.priority
        else:
            priority_bound, priority_sources = None, self._nothing
        return [
            (self.hierarchy, self.cohort_bound),
            (priority_sources, priority_bound),
            (self.own, self.within_bound),
        ]

    def sequence(self, borrowing: bool) -> Iterator[Candidate]:
        groups = self._groups(borrowing)
        cost = self.snapshot.victim_cost
        for evicting in (True, False):
            for sources, bound in groups:
                yield from _stream(self._lists_of(sources, evicting), self.classifier, bound, cost)

    def could_fit(self, borrowing: bool, fits: Callable[[bool], bool]) -> bool:
        """Would the preemptor fit if every candidate this pass could ever take were gone?

        Fitting only gets easier as usage leaves, and a candidate valid at the start is the
        most a pass can remove, so False proves the pass finds nothing. Usage is removed in
        bulk per queue: the freed amount of a resource needing preemption is bounded by the
        candidates' usage of it, of any other resource by the queue's whole usage of it.
        """
        needed, frs = self.req.usage, self.req.frs
        groups = self._groups(borrowing)
        if len(needed) == 1 and len(frs) == 1 and frs <= needed.keys():
            # One flavor-resource, the one needing preemption: amounts per node.
            (fr,) = frs
            freed_one: dict[Node, int] = {}
            for sources, bound in groups:
                for src in sources:
                    total = src.cq.freeable(fr, bound)
                    node = src.cq.node
                    before = freed_one.get(node, 0)
                    freed_one[node] = total if total > before else before
            journal = remove_amounts(fr, freed_one.items())
            try:
                return fits(borrowing)
            finally:
                restore_usages(journal)
        freed: dict[str, tuple[Node, Quantities]] = {}
        for sources, bound in groups:
            for src in sources:
                cq = src.cq
                entry = freed.get(cq.name)
                if entry is None:
                    entry = freed[cq.name] = (cq.node, {})
                amounts = entry[1]
                for fr in needed:
                    total = cq.freeable(fr, bound) if fr in frs else cq.node.usage.get(fr, 0)
                    before = amounts.get(fr, 0)
                    amounts[fr] = total if total > before else before
        journal = remove_usages(freed.values())
        try:
            return fits(borrowing)
        finally:
            restore_usages(journal)


__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "KUEUE_ORDER",
    "Candidate",
    "Candidates",
    "Classifier",
    "Request",
    "Variant",
    "borrow_within_cohort",
    "cohort_sources",
    "core_victim_cost",
    "victim_cost_name",
]
