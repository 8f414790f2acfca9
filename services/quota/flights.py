"""The quota service's book of preemptions in flight, one per preemptor."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gangpreempt.planning.inflight import PlanInFlight

REQUESTED = "requested"
CONFIRMED = "confirmed"
ACTUATED = "actuated"


class Flight(msgspec.Struct):
    request_id: str
    status: str = REQUESTED
    plan: PlanInFlight | None = None


class Flights:
    def __init__(self, on_end: Callable[[str, Flight], None]) -> None:
        self.on_end = on_end  # called once for every flight that ends (preemptor, flight)
        self.by_preemptor: dict[str, Flight] = {}
        # preemptor -> STATE seq of its last failed attempt: retry only once state moved on
        self.failed_at: dict[str, int] = {}

    def end(self, preemptor: str) -> None:
        flight = self.by_preemptor.pop(preemptor, None)
        if flight is not None:
            self.on_end(preemptor, flight)

    def start(self, preemptor: str, request_id: str) -> Flight:
        flight = self.by_preemptor[preemptor] = Flight(request_id=request_id)
        return flight

    def fail(self, preemptor: str, seq: int) -> None:
        self.end(preemptor)
        self.failed_at[preemptor] = seq

    def waiting(self) -> frozenset[str]:
        """Preemptors with a plan in flight: they keep their place, get no new decision."""
        return frozenset(self.by_preemptor)

    def may_request(self, preemptor: str, seq: int) -> bool:
        """After a failed attempt, a new preemption is requested only once the state has
        changed (no retry storm); the workload is still evaluated and may simply fit."""
        return self.failed_at.get(preemptor, -1) < seq


__all__ = ["ACTUATED", "CONFIRMED", "REQUESTED", "Flight", "Flights"]
