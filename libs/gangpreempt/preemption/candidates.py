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
from collections.abc import Iterator
from enum import IntEnum

from gangpreempt.model.queues import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import AdmittedWorkload, ClusterQueueState, Snapshot
from gangpreempt.quota.tree import FR, Node, Quantities, quantities_fit_in_quota

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


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

    def satisfies_policy(self, aw: AdmittedWorkload, policy: str) -> bool:
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
    sources: list[Source], frs: frozenset[FR], evicting: bool, classifier: Classifier, policy: str
) -> Iterator[Candidate]:
    """Candidates of ``sources`` in victim order, classified, NEVER ones dropped."""
    lists: list[Iterator[tuple[tuple[int, float, str], AdmittedWorkload, Source]]] = []
    for src in sources:
        for lst in src.cq.using(frs, evicting):
            lists.append(_tagged(lst, src))
    if not lists:
        return
    bound = classifier.priority_bound(policy)
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


class Candidates:
    """The ordered, lazily materialized candidate sequence of one search."""

    def __init__(self, snapshot: Snapshot, req: Request) -> None:
        self.req = req
        classifier = Classifier(req)
        hierarchy, priority = cohort_sources(snapshot, req)
        own = (
            [Source(req.cq, None, False)]
            if req.cq.spec.preemption.within_cluster_queue != NEVER
            else []
        )
        cohort_policy = req.cq.spec.preemption.reclaim_within_cohort
        within_policy = req.cq.spec.preemption.within_cluster_queue
        frs = req.frs
        self._streams: list[Iterator[Candidate]] = []
        self._firsts: list[Candidate | None] = []
        for evicting in (True, False):
            for sources, policy in (
                (hierarchy, cohort_policy),
                (priority, cohort_policy),
                (own, within_policy),
            ):
                stream = _stream(sources, frs, evicting, classifier, policy)
                self._streams.append(stream)
                self._firsts.append(next(stream, None))
        # stream index: 0 eH, 1 eP, 2 eS, 3 rH, 4 rP, 5 rS
        f = self._firsts
        self.none_from_hierarchy = f[0] is None and f[3] is None
        self.none_from_other_queues = self.none_from_hierarchy and f[1] is None and f[4] is None
        self._memo: list[Candidate] = []
        self._chain = self._chained()

    def _chained(self) -> Iterator[Candidate]:
        for first, stream in zip(self._firsts, self._streams, strict=True):
            if first is None:
                continue
            yield first
            yield from stream

    def __iter__(self) -> Iterator[Candidate]:
        """A fresh pass over the sequence (Kueue's iterator Reset)."""
        i = 0
        while True:
            if i < len(self._memo):
                yield self._memo[i]
            else:
                nxt = next(self._chain, None)
                if nxt is None:
                    return
                self._memo.append(nxt)
                yield nxt
            i += 1


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
