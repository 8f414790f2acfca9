"""The cheapest allowed victim set (``--victim-cost lost-gpu-hours``).

Kueue's classical preemption adds candidates in its order until the preemptor fits, then
gives back the ones it can spare (``classical.search``). That set is minimal but not
cheap: it may evict one long run where two short ones would have made the same room.
Under the cost setting, once Kueue's rules have said which candidates a pass may take
(the same candidates, the same pass, the same validity test as they are removed in
Kueue's order), this picks among them the set that loses the least work: exactly, by a
branch-and-bound over the candidates cheapest first, when that ends within ``BUDGET``
fit tests; otherwise the cheapest set it found by then (never dearer than Kueue's, which
it starts from). The set found is minimal: none of its victims could be spared.

When the Workload's pods are known (``NodeSide``, the quota service's and the replay's
passes), the quota victims are chosen together with the victims the nodes then need:
among Kueue's set, the quota-cheapest set and the set that starts from the cheapest room
on the nodes (completed with the cheapest candidates the quota still needs), the one
whose quota and node victims together lose least (``with_nodes``).

Without the cost setting nothing here runs, so every Kueue table gives Kueue's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from gangpreempt.preemption.candidates import Candidate
from gangpreempt.quota.snapshot import AdmittedWorkload

BUDGET = 2_000  # fit tests one search may spend looking for a cheaper set


class NodeSide(Protocol):
    """The nodes, as the quota search under the cost setting asks them
    (``planning.nodeside``); costs in GPU-seconds, as ``AdmittedWorkload.lost_work``."""

    def extras(self, workload: str, queue: str, victims: Sequence[str]) -> float | None:
        """What the victims the nodes need beyond ``victims`` (Workload refs) lose, for
        the pods of ``workload`` (``namespace/name``) of ClusterQueue ``queue``: 0 when
        none are needed or its pods are not known, None when they cannot be placed."""
        ...

    def first(self, workload: str, queue: str, allowed: Collection[str]) -> list[str] | None:
        """The cheapest victims (unit refs) that make room on the nodes for the pods of
        ``workload``, from ``allowed`` (Workload refs) and the units below its priority;
        None when its pods are not known or cannot be placed even so."""
        ...


def cheapest(
    pool: Sequence[Candidate],
    found: Sequence[Candidate],
    allowed_fits: Callable[[Sequence[Candidate]], bool],
    cost: Callable[[AdmittedWorkload], float],
) -> list[Candidate]:
    """The cheapest set of ``pool`` (candidates in Kueue's order) for which
    ``allowed_fits`` holds (every member valid as it is removed in Kueue's order, and the
    preemptor fits), starting from ``found`` (Kueue's set); ties go to fewer victims,
    then to the set first in Kueue's order."""
    place = {c.aw.key: i for i, c in enumerate(pool)}

    def order(c: Candidate) -> int:
        return place.get(c.aw.key, len(place))

    ranked = sorted(pool, key=lambda c: (cost(c.aw), order(c)))
    costs = [cost(c.aw) for c in ranked]
    best = sorted(found, key=order)
    best_key = (sum(cost(c.aw) for c in best), len(best))
    tests = 0
    chosen: list[Candidate] = []

    def explore(start: int, spent: float) -> None:
        nonlocal best, best_key, tests
        if tests >= BUDGET:
            return
        if chosen:
            tests += 1
            members = sorted(chosen, key=order)
            if allowed_fits(members):
                key = (spent, len(members))
                if key < best_key:
                    best, best_key = members, key
                return  # a superset only costs more
        for i in range(start, len(ranked)):
            added = spent + costs[i]
            if (added, len(chosen) + 1) >= best_key:
                break  # the rest cost at least as much: ranked cheapest first
            chosen.append(ranked[i])
            explore(i + 1, added)
            chosen.pop()
            if tests >= BUDGET:
                return

    explore(0, 0.0)
    return _spare(best, allowed_fits)


def _spare(
    members: list[Candidate], allowed_fits: Callable[[Sequence[Candidate]], bool]
) -> list[Candidate]:
    """Give back every victim the set can do without (the last in Kueue's order first,
    as Kueue does): a victim of no cost is evicted only if it is needed."""
    kept = list(members)
    for c in reversed(members):
        rest = [k for k in kept if k is not c]
        if rest and allowed_fits(rest):
            kept = rest
    return kept


def with_nodes(
    pool: Sequence[Candidate],
    options: Sequence[Sequence[Candidate]],
    allowed_fits: Callable[[Sequence[Candidate]], bool],
    cost: Callable[[AdmittedWorkload], float],
    side: NodeSide,
    workload: str,
    queue: str,
) -> list[Candidate]:
    """Among ``options`` (allowed quota sets, Kueue's first) and the set that starts from
    the nodes' cheapest room, the one whose victims and the nodes' extra victims lose
    least together (ties: fewer quota victims, then the earlier option); the first
    option when the nodes cannot place the pods with any."""
    place = {c.aw.key: i for i, c in enumerate(pool)}

    def order(c: Candidate) -> int:
        return place.get(c.aw.key, len(place))

    sets = [sorted(o, key=order) for o in options]
    room = side.first(workload, queue, [c.aw.ref for c in pool])
    if room is not None:
        start = set(room)
        members = [c for c in pool if c.aw.ref in start]
        rest = sorted(
            (c for c in pool if c.aw.ref not in start), key=lambda c: (cost(c.aw), order(c))
        )
        added: list[Candidate] = []
        for c in rest:
            if allowed_fits(sorted(members + added, key=order)):
                break
            added.append(c)
        chosen = sorted(members + added, key=order)
        if chosen and allowed_fits(chosen):
            for c in reversed(added):  # the quota's additions the set can do without
                kept = [k for k in chosen if k is not c]
                if allowed_fits(kept):
                    chosen = kept
            sets.append(chosen)
    best: tuple[float, int, int] | None = None
    pick = sets[0]
    seen: set[tuple[str, ...]] = set()
    for i, members in enumerate(sets):
        refs = tuple(c.aw.ref for c in members)
        if refs in seen:
            continue
        seen.add(refs)
        extra = side.extras(workload, queue, refs)
        if extra is None:
            continue
        key = (sum(cost(c.aw) for c in members) + extra, len(members), i)
        if best is None or key < best:
            best, pick = key, members
    return list(pick)


__all__ = ["BUDGET", "NodeSide", "cheapest", "with_nodes"]
