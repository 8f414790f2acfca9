"""The minimal victim set at quota level (Kueue's classical preemption).

Remove candidates in order until the preemptor fits, skipping a candidate whose queue is
already back within its nominal quota (up to the common ancestor); then put victims back
in reverse order while the preemptor still fits. The result is all-or-nothing: either a
set that makes the preemptor fit, or no victims at all. Under ``--victim-cost
lost-gpu-hours`` the pass that found a set then looks among the same candidates for the
set that loses the least work (``cheapest``), with the nodes' victims counted when the
pods are known (``with_nodes``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gangpreempt.model.queues import NEVER
from gangpreempt.preemption.candidates import (
    LOST_GPU_HOURS,
    Candidate,
    Candidates,
    Request,
    Variant,
    borrow_within_cohort,
)
from gangpreempt.preemption.cheapest import cheapest, with_nodes
from gangpreempt.quota.snapshot import AdmittedWorkload, Snapshot
from gangpreempt.quota.tree import cq_available


class Target:
    """A victim and the reason it is preempted (and, from the classical search, the
    candidate it was)."""

    __slots__ = ("aw", "candidate", "reason")

    def __init__(
        self, aw: AdmittedWorkload, reason: str, candidate: Candidate | None = None
    ) -> None:
        self.candidate = candidate
        self.aw = aw
        self.reason = reason

    def __repr__(self) -> str:
        return f"<Target {self.aw.ref} {self.reason}>"


def fits(snapshot: Snapshot, req: Request, allow_borrowing: bool, topology: bool = True) -> bool:
    """The preemptor fits the quota as the snapshot stands (and, with ``topology``, its
    topology-aware pod sets have an assignment)."""
    node = req.cq.node
    for fr, v in req.usage.items():
        if not allow_borrowing and node.borrowing_with(fr, v):
            return False
        if v > cq_available(node, fr):
            return False
    return not topology or req.topology is None or req.topology()


def _under_nominal(req: Request) -> bool:
    node = req.cq.node
    return all(node.usage.get(fr, 0) < node.nominal(fr) for fr in req.frs)


def _valid(snapshot: Snapshot, req: Request, cand: Candidate, borrowing: bool) -> bool:
    if cand.aw.cq == req.cq.name:
        return True
    if borrowing and cand.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    node = snapshot.cqs[cand.aw.cq].node
    if node.within_nominal(req.frs):
        return False
    for ancestor in node.path_to_root():
        if ancestor is cand.lca:
            break
        if ancestor.within_nominal(req.frs):
            return False
    return True


def attempts(req: Request, candidates: Candidates) -> tuple[bool, ...]:
    """Which passes to run (with borrowing, without), in Kueue's order."""
    forbidden = not borrow_within_cohort(req.cq)[0]
    if candidates.none_from_other_queues or (forbidden and not _under_nominal(req)):
        return (True,)
    if forbidden and candidates.none_from_hierarchy:
        return (False, True)
    return (True, False)


def _fill_back(
    snapshot: Snapshot, req: Request, targets: list[Target], borrowing: bool
) -> list[Target]:
    kept = list(targets)
    for i in range(len(targets) - 2, -1, -1):
        t = targets[i]
        snapshot.restore(t.aw)
        if fits(snapshot, req, borrowing):
            kept.remove(t)
        else:
            snapshot.remove(t.aw)
    return kept


def _cheapest(
    snapshot: Snapshot,
    req: Request,
    candidates: Candidates,
    kept: list[Target],
    borrowing: bool,
) -> list[Target]:
    """The set of least lost work among the candidates of the pass that found ``kept``
    (each valid as it is removed in Kueue's order, as the pass removes them)."""
    pool = [c for c in candidates.sequence(borrowing) if _valid(snapshot, req, c, borrowing)]
    found = [t.candidate for t in kept if t.candidate is not None]
    if len(found) != len(kept):
        return kept

    def allowed_fits(members: Sequence[Candidate]) -> bool:
        removed: list[AdmittedWorkload] = []
        try:
            for c in members:
                if not _valid(snapshot, req, c, borrowing):
                    return False
                snapshot.remove(c.aw)
                removed.append(c.aw)
            return fits(snapshot, req, borrowing)
        finally:
            for aw in reversed(removed):
                snapshot.restore(aw)

    now = snapshot.now.timestamp()

    def cost(aw: AdmittedWorkload) -> float:
        return aw.lost_work(now)

    chosen = cheapest(pool, found, allowed_fits, cost)
    side = snapshot.node_side
    if side is not None:
        kueues = _kueue_order(snapshot, req, borrowing)
        options = [found, chosen] if kueues is None else [kueues, found, chosen]
        key = req.preemptor.key
        chosen = with_nodes(pool, options, allowed_fits, cost, side, key, req.cq.name)
    return [Target(c.aw, c.variant.reason, c) for c in chosen]


def _kueue_order(snapshot: Snapshot, req: Request, borrowing: bool) -> list[Candidate] | None:
    """The set Kueue's own order takes (no cost), when its pass is ``borrowing``'s: an
    option the cost setting weighs with the nodes, so that it never loses more than
    Kueue's set would with the nodes' extra victims."""
    cost, side = snapshot.victim_cost, snapshot.node_side
    snapshot.victim_cost, snapshot.node_side = "", None
    try:
        found = search(snapshot, req)
    finally:
        snapshot.victim_cost, snapshot.node_side = cost, side
    members = [t.candidate for t in found.targets if t.candidate is not None]
    if found.allow_borrowing != borrowing or len(members) != len(found.targets):
        return None
    return members


class Search:
    """The victims found and the pass that found them (borrowing allowed or not): the set
    is minimal for that pass's fit test."""

    __slots__ = ("allow_borrowing", "targets")

    def __init__(self, targets: list[Target], allow_borrowing: bool) -> None:
        self.targets = targets
        self.allow_borrowing = allow_borrowing


def get_targets(snapshot: Snapshot, req: Request) -> list[Target]:
    """The victims Kueue's classical preemption picks for ``req``, or [] if none work."""
    return search(snapshot, req).targets


def search(snapshot: Snapshot, req: Request) -> Search:
    policy = req.cq.spec.preemption
    if policy.within_cluster_queue == NEVER and policy.reclaim_within_cohort == NEVER:
        return Search([], True)
    if snapshot.fair_sharing:
        from gangpreempt.preemption.fair import FairSearch  # the two searches share Target

        return Search(FairSearch(snapshot, req).run(), True)
    candidates = Candidates(snapshot, req)
    for borrowing in attempts(req, candidates):
        # on quota alone: the check takes the candidates' usage out, not the candidates
        if not candidates.could_fit(borrowing, lambda b: fits(snapshot, req, b, False)):
            continue
        targets: list[Target] = []
        for cand in candidates.sequence(borrowing):
            if not _valid(snapshot, req, cand, borrowing):
                continue
            snapshot.remove(cand.aw)
            targets.append(Target(cand.aw, cand.variant.reason, cand))
            if fits(snapshot, req, borrowing):
                kept = _fill_back(snapshot, req, targets, borrowing)
                for t in kept:
                    snapshot.restore(t.aw)
                if snapshot.victim_cost == LOST_GPU_HOURS:
                    kept = _cheapest(snapshot, req, candidates, kept, borrowing)
                return Search(kept, borrowing)
        for t in targets:
            snapshot.restore(t.aw)
    return Search([], True)


__all__ = ["Search", "Target", "attempts", "fits", "get_targets", "search"]
