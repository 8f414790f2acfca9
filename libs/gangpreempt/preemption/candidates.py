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
from gangpreempt.quota.tree import FR, Node, Quantities, quantities_fit_in_quota

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

    __slots__ = ("cq", "frs", "preemptor", "usage")

    def __init__(
        self,
        preemptor: PendingWorkload,
        cq: ClusterQueueState,
        frs: frozenset[FR],
        usage: Quantities,
    ) -> None:
        self.preemptor = preemptor
        self.cq = cq
        self.frs = frs
        self.usage = usage


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
    for child in current.child_cohorts:
        if child is skip or child.within_nominal(req.frs):
            continue
        _collect(snapshot, req, child, subtree_root, skip, advantage, out)
    for child in current.child_cqs:
        if child is req.cq.node or child.within_nominal(req.frs):
            continue
        out.append(Source(snapshot.cqs[child.name], subtree_root, advantage))


def _tagged(
    lst: list[AdmittedWorkload], src: Source
) -> Iterator[tuple[tuple[int, float, str], AdmittedWorkload, Source]]:
    for aw in lst:
        yield aw.order_key, aw, src


def _stream(
    sources: list[Source],
    frs: frozenset[FR],
    evicting: bool,
    classifier: Classifier,
    bound: int | None,
    cost: str = "",
) -> Iterator[Candidate]:
    """Candidates of ``sources`` in victim order, classified, NEVER ones dropped; stops at
    the first candidate whose priority reaches ``bound``. With ``cost``
    ``lost-gpu-hours``, candidates of one priority come least lost work first."""
    if cost == LOST_GPU_HOURS:
        now = classifier.now_ts
        found = list(_stream(sources, frs, evicting, classifier, bound))
        found.sort(key=lambda c: (c.aw.priority, c.aw.lost_work(now), c.aw.order_key))
        yield from found
        return
    lists = [_tagged(lst, src) for src in sources for lst in src.cq.using(frs, evicting)]
    if not lists:
        return
    merged = lists[0] if len(lists) == 1 else heapq.merge(*lists, key=lambda t: t[0])
    seen: set[str] = set()
    for _key, aw, src in merged:
        if bound is not None and aw.priority >= bound:
            return
        if aw.key in seen:
            continue
        seen.add(aw.key)
        variant = classifier.variant(aw, src.advantage)
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
        self.hierarchy, self.priority = cohort_sources(snapshot, req)
        self.own = [Source(req.cq, None, False)] if policy.within_cluster_queue != NEVER else []
        self.cohort_bound = self.classifier.priority_bound(policy.reclaim_within_cohort)
        self.within_bound = self.classifier.priority_bound(policy.within_cluster_queue)
        self.none_from_hierarchy = not self._exists(self.hierarchy, self.cohort_bound)
        self.none_from_other_queues = self.none_from_hierarchy and not self._exists(
            self.priority, self.cohort_bound
        )

    def _exists(self, sources: list[Source], bound: int | None) -> bool:
        for evicting in (True, False):
            for _ in _stream(sources, self.req.frs, evicting, self.classifier, bound):
                return True
        return False

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
            priority_bound, priority_sources = None, []
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
                yield from _stream(sources, self.req.frs, evicting, self.classifier, bound, cost)

    def could_fit(self, borrowing: bool, fits: Callable[[bool], bool]) -> bool:
        """Would the preemptor fit if every candidate this pass could ever take were gone?

        Fitting only gets easier as usage leaves, and a candidate valid at the start is the
        most a pass can remove, so False proves the pass finds nothing. Usage is removed in
        bulk per queue: the freed amount of a resource needing preemption is bounded by the
        candidates' usage of it, of any other resource by the queue's whole usage of it.
        """
        freed: dict[str, Quantities] = {}
        for sources, bound in self._groups(borrowing):
            for src in sources:
                amounts = freed.setdefault(src.cq.name, {})
                for fr in self.req.usage:
                    if fr in self.req.frs:
                        total = sum(src.cq.usage_below(fr, ev, bound) for ev in (True, False))
                    else:
                        total = src.cq.node.usage.get(fr, 0)
                    amounts[fr] = max(amounts.get(fr, 0), total)
        snapshot = self.snapshot
        for name, amounts in freed.items():
            snapshot.withdraw(snapshot.cqs[name].node, amounts)
        try:
            return fits(borrowing)
        finally:
            for name, amounts in freed.items():
                snapshot.put_back(snapshot.cqs[name].node, amounts)


__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "Candidate",
    "Candidates",
    "Classifier",
    "Request",
    "Variant",
    "borrow_within_cohort",
    "cohort_sources",
]
