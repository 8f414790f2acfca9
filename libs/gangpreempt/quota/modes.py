"""Flavor assignment modes, coarse (Fit / Preempt / NoFit) and granular."""

from __future__ import annotations

from enum import IntEnum

from gangpreempt.model.queues import PREEMPTION_OVER_BORROWING, TRY_NEXT_FLAVOR, FlavorFungibility


class Mode(IntEnum):
    """Ordered from worst to best."""

    NoFit = 0
    Preempt = 1
    Fit = 2


class Possibility(IntEnum):
    """What quota (and, if needed, preemption) allows in one flavor, worst to best."""

    NO_FIT = 0
    NO_CANDIDATES = 1  # preemption could help, but the search found no victims
    PREEMPT = 2  # victims include workloads of the preemptor's own ClusterQueue
    RECLAIM = 3  # victims are all in other ClusterQueues
    FIT = 4

    @property
    def mode(self) -> Mode:
        if self is Possibility.NO_FIT:
            return Mode.NoFit
        if self is Possibility.FIT:
            return Mode.Fit
        return Mode.Preempt


class Granular:
    """A possibility with the borrowing level it needs (0 = within nominal quota)."""

    __slots__ = ("borrowing", "possibility")

    def __init__(self, possibility: Possibility, borrowing: int) -> None:
        self.possibility = possibility
        self.borrowing = borrowing

    def __repr__(self) -> str:
        return f"Granular({self.possibility.name}, borrow={self.borrowing})"


WORST = Granular(Possibility.NO_FIT, 1 << 62)
BEST = Granular(Possibility.FIT, 0)


def preferred(a: Granular, b: Granular, fungibility: FlavorFungibility) -> bool:
    """Is ``a`` better than ``b`` under the ClusterQueue's preference?

    BorrowingOverPreemption (the default) ranks the preemption mode first and the
    borrowing level second; PreemptionOverBorrowing the other way round. A flavor whose
    preemption found no victims ranks below every viable one.
    """
    if a.possibility is Possibility.NO_FIT:
        return False
    if b.possibility is Possibility.NO_FIT:
        return True
    a_none = a.possibility is Possibility.NO_CANDIDATES
    b_none = b.possibility is Possibility.NO_CANDIDATES
    if a_none != b_none:
        return not a_none
    if fungibility.preference == PREEMPTION_OVER_BORROWING:
        if a.borrowing != b.borrowing:
            return a.borrowing < b.borrowing
        return a.possibility > b.possibility
    if a.possibility != b.possibility:
        return a.possibility > b.possibility
    return a.borrowing < b.borrowing


def try_next_flavor(rep: Granular, fungibility: FlavorFungibility) -> bool:
    """KEP-582's table: continue to the next flavor, or stop the search here?"""
    if rep.possibility in (Possibility.NO_FIT, Possibility.NO_CANDIDATES):
        return True
    if (
        rep.possibility in (Possibility.PREEMPT, Possibility.RECLAIM)
        and fungibility.when_can_preempt == TRY_NEXT_FLAVOR
    ):
        return True
    return rep.borrowing > 0 and fungibility.when_can_borrow == TRY_NEXT_FLAVOR


__all__ = ["BEST", "WORST", "Granular", "Mode", "Possibility", "preferred", "try_next_flavor"]
