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

from collections.abc import Iterator

from gangpreempt.model.queues import LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, NEVER
from gangpreempt.preemption.candidates import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAMATION,
    Classifier,
    Request,
)
from gangpreempt.preemption.classical import Target
from gangpreempt.quota.fairshare import DRS, NEGATIVE, compare, dominant_resource_share
from gangpreempt.quota.snapshot import AdmittedWorkload, ClusterQueueState, Snapshot
from gangpreempt.quota.tree import Node, cq_available

IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


def _candidate_order(aw: AdmittedWorkload, own: str) -> tuple[bool, bool, int, float, str]:
    """Kueue's candidate order: evicting first, other queues before the own, lower
    priority, most recently admitted, uid."""
    return (not aw.evicting, aw.cq == own, aw.priority, -aw.reserved_ts, aw.uid)


class _Ordering:
    """Target queues by share, descending the cohort tree from the root each time."""

    def __init__(
        self,
        fair: FairSearch,
        candidates: dict[str, list[AdmittedWorkload]],
    ) -> None:
        self.fair = fair
        self.remaining = {name: list(reversed(c)) for name, c in candidates.items() if c}
        self.pruned: set[int] = set()

    def pop(self, cq: Node) -> AdmittedWorkload:
        return self.remaining[cq.name].pop()

    def has(self, cq: Node) -> bool:
        return bool(self.remaining.get(cq.name))

    def first(self, cq: Node) -> AdmittedWorkload:
        return self.remaining[cq.name][-1]

    def drop(self, cq: Node) -> None:
        self.pruned.add(id(cq))

    def drain(self, cq: Node) -> list[AdmittedWorkload]:
        out = list(reversed(self.remaining.pop(cq.name, [])))
        return out

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

    def _next(self, cohort: Node) -> Node | None:
        fair = self.fair
        best_cq: Node | None = None
        best_cq_drs = NEGATIVE
        for child in sorted(cohort.child_cqs, key=lambda n: n.name):
            if id(child) in self.pruned:
                continue
            if not self.has(child):
                self.pruned.add(id(child))
                continue
            drs = fair.share(child)
            if drs.is_zero and child is not fair.own:
                self.pruned.add(id(child))
                continue
            c = compare(drs, best_cq_drs)
            if c > 0 or (
                c == 0
                and best_cq is not None
                and fair.order(self.first(child)) < fair.order(self.first(best_cq))
            ):
                best_cq, best_cq_drs = child, drs
        best_cohort: Node | None = None
        best_cohort_drs = NEGATIVE
        for child in sorted(cohort.child_cohorts, key=lambda n: n.name):
            if id(child) in self.pruned:
                continue
            drs = fair.share(child)
            if drs.is_zero and id(child) not in fair.own_path:
                self.pruned.add(id(child))
                continue
            if compare(drs, best_cohort_drs) >= 0:
                best_cohort, best_cohort_drs = child, drs
        if best_cq is None and best_cohort is None:
            self.pruned.add(id(cohort))
            return None
        if best_cohort is not None and (
            best_cq is None or compare(best_cohort_drs, best_cq_drs) >= 0
        ):
            return self._next(best_cohort)
        return best_cq


class FairSearch:
    """One fair-sharing victim search on a snapshot, which it leaves as it found it."""

    def __init__(self, snapshot: Snapshot, req: Request) -> None:
        self.snapshot = snapshot
        self.req = req
        self.own = req.cq.node
        self.own_path = {id(n) for n in self.own.path_to_root()}
        self._lendable: dict[int, dict[str, int]] = {}
        self.targets: list[Target] = []

    # -- shares ----------------------------------------------------------------------------

    def share(self, node: Node) -> DRS:
        return dominant_resource_share(node, self._lendable)

    def order(self, aw: AdmittedWorkload) -> tuple[bool, bool, int, float, str]:
        return _candidate_order(aw, self.req.cq.name)

    def _below_lca(self, target: Node) -> tuple[Node, Node]:
        """The two nodes just below the lowest common cohort of the preemptor's queue and
        ``target``: (the preemptor's side, the target's side)."""
        lca = target.parent
        while lca is not None and id(lca) not in self.own_path:
            lca = lca.parent
        return _child_toward(self.own, lca), _child_toward(target, lca)

    # -- the search ------------------------------------------------------------------------

    def candidates(self) -> dict[str, list[AdmittedWorkload]]:
        req, snap = self.req, self.snapshot
        policy = req.cq.spec.preemption
        classify = Classifier(req)
        out: dict[str, list[AdmittedWorkload]] = {}

        def usable(cq: ClusterQueueState, rule: str) -> list[AdmittedWorkload]:
            found = [
                aw
                for aw in cq.workloads.values()
                if aw.key not in snap.pinned
                and aw.frs & req.frs
                and classify.satisfies_policy(aw, rule)
            ]
            return sorted(found, key=self.order)

        if policy.within_cluster_queue != NEVER:
            out[req.cq.name] = usable(req.cq, policy.within_cluster_queue)
        if self.own.parent is not None and policy.reclaim_within_cohort != NEVER:
            for cq in snap.cluster_queues_in_tree(req.cq):
                node = cq.node
                if cq is req.cq or not any(
                    node.usage.get(fr, 0) > node.subtree_quota.get(fr, 0) for fr in req.frs
                ):
                    continue
                out[cq.name] = usable(cq, policy.reclaim_within_cohort)
        return {name: c for name, c in out.items() if c}

    def fits(self) -> bool:
        """Does the incoming workload fit (its own simulated usage set aside)?"""
        snap, node, usage = self.snapshot, self.own, self.req.usage
        snap.withdraw(node, usage)
        ok = all(v <= cq_available(node, fr) for fr, v in usage.items())
        snap.put_back(node, usage)
        return ok

    def take(self, aw: AdmittedWorkload, reason: str) -> None:
        self.snapshot.remove(aw)
        self.targets.append(Target(aw, reason))

    def run(self) -> list[Target]:
        candidates = self.candidates()
        if not candidates:
            return []
        snap, usage = self.snapshot, self.req.usage
        snap.put_back(self.own, usage)  # every share counts the incoming workload
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

    def _first_pass(self, candidates: dict[str, list[AdmittedWorkload]]) -> bool:
        node = self.own
        within_nominal = all(
            node.usage.get(fr, 0) <= node.subtree_quota.get(fr, 0) for fr in self.req.frs
        )
        strategies = self.snapshot.fair_strategies
        first = strategies[0] if strategies else LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
        retry: list[AdmittedWorkload] = []
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
            if p_new.zero_weight_borrows and not t_old.zero_weight_borrows:
                retry.extend(ordering.drain(target))  # no strategy can hold: second pass
                continue
            while ordering.has(target):
                aw = ordering.pop(target)
                self.snapshot.remove(aw)
                t_new = self.share(theirs)
                self.snapshot.restore(aw)
                ok = (
                    compare(p_new, t_new) <= 0
                    if first == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
                    else compare(p_new, t_old) < 0
                )
                if ok:
                    self.take(aw, IN_COHORT_FAIR_SHARING)
                    if self.fits():
                        return True
                    break  # shares changed: back to the ordering
                retry.append(aw)
        if len(strategies) < 2 or not retry:
            return False
        return self._second_pass(retry)

    def _second_pass(self, retry: list[AdmittedWorkload]) -> bool:
        """``LessThanInitialShare`` over what the first strategy refused, at most one
        victim per queue."""
        grouped: dict[str, list[AdmittedWorkload]] = {}
        for aw in retry:
            grouped.setdefault(aw.cq, []).append(aw)
        ordering = _Ordering(self, {cq: sorted(ws, key=self.order) for cq, ws in grouped.items()})
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


def _child_toward(node: Node, ancestor: Node | None) -> Node:
    """``node``, or its ancestor whose parent is ``ancestor``."""
    while node.parent is not None and node.parent is not ancestor:
        node = node.parent
    return node


__all__ = ["IN_COHORT_FAIR_SHARING", "FairSearch"]
