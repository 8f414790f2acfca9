"""The cheapest allowed victim set (issue 27, ``--victim-cost lost-gpu-hours``).

Kueue's classical preemption adds candidates in its order until the preemptor fits, then
gives back the ones it can spare (``classical.search``). That set is minimal but not
cheap: it may evict one long run where two short ones would have made the same room.
Under the cost setting, once Kueue's rules have said which candidates a pass may take
(the same candidates, the same pass, the same validity test as they are removed in
Kueue's order), this picks among them the set that loses the least work: exactly, by a
branch-and-bound over the candidates cheapest first, when that ends within ``BUDGET``
fit tests; otherwise the cheapest set it found by then (never dearer than Kueue's, which
it starts from). The set found is minimal: none of its victims could be spared.

Without the cost setting nothing here runs, so every Kueue table gives Kueue's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gangpreempt.preemption.candidates import Candidate
from gangpreempt.quota.snapshot import AdmittedWorkload

BUDGET = 2_000  # fit tests one search may spend looking for a cheaper set


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


__all__ = ["BUDGET", "cheapest"]
