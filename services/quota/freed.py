"""Room a Kueue preemptor's victims freed, kept for it until Kueue admits it (the
admission-check authority, ``docs/kubernetes.md``, the hand-off).

Under that authority gangpreempt does not admit: Kueue reserves quota on its own clock,
then gangpreempt's check says Ready. Between the victims leaving and Kueue reserving the
preemptor, Kueue may reserve another workload in the freed room first (a victim it
requeued, a borrower of another ClusterQueue). So the preemptor stays first in every
pass, and a reservation Kueue makes for another workload there is sent back at once
(``Retry`` naming whom the room is held for), until the preemptor is admitted or gone.
Bounded: after ``timeout`` seconds others may take the room (a preemptor Kueue does not
pick, its LocalQueue stopped). Kept in memory only: a new quota leader starts without it
(a window where Kueue may give the room to another, as without gangpreempt)."""

from __future__ import annotations

import time
from collections.abc import Callable

from gangpreempt.model.cluster import ClusterState


class FreedRoom:
    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        self.until: dict[str, float] = {}  # preemptor key -> monotonic deadline
        self.placements: dict[str, dict[str, str]] = {}  # preemptor key -> its pods' nodes

    def keep(self, key: str, placement: dict[str, str] | None = None) -> None:
        """``key``'s victims have left: the room is its own from now (on the nodes, the
        ``placement`` its plan held, reserved to it in every pass)."""
        self.until[key] = self.clock() + self.timeout
        if placement:
            self.placements[key] = dict(placement)

    def rooms(self) -> dict[str, dict[str, str]]:
        """The placements kept, by preemptor key (as ``settle`` last left them)."""
        return {k: p for k, p in self.placements.items() if k in self.until}

    def settle(self, state: ClusterState) -> frozenset[str]:
        """The preemptors the room is still kept for: not admitted, not gone, in time."""
        now = self.clock()
        for key, deadline in list(self.until.items()):
            wl = state.workloads.get(key)
            if wl is None or not wl.is_pending or now > deadline:
                del self.until[key]
                self.placements.pop(key, None)
        return frozenset(self.until)

    def refs(self, state: ClusterState) -> list[str]:
        return sorted(state.workloads[k].ref for k in self.until if k in state.workloads)

    def clear(self) -> None:
        self.until.clear()
        self.placements.clear()


__all__ = ["FreedRoom"]
