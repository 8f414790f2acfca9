"""quota's book of preemptions in flight: at most one flight per preemptor, each the
copy of the preemptor's current plan record (``gangpreempt.planning.records``).

Nothing here is only in memory: the flights are rebuilt from the records when quota
starts, and every record change (quota's own writes at once, the others' through the
bucket) is ``learn``-ed. What quota decides to end (a request that waited too long, an
actuated plan whose preemptor is admitted) becomes a record move it owes (``owed``),
written by the service. A failed attempt is remembered with a backoff: it is retried
when the state has changed since, or when the backoff has passed, whichever is first.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from gangpreempt.planning import records
from gangpreempt.planning.records import CLOSED, EXPIRED, IN_FLIGHT, PlanRecord

REQUESTED = "requested"  # waiting for a proposal
CONFIRMED = "confirmed"  # confirmed (or actuating): its holds are in place
ACTUATED = "actuated"  # victims evicted, terminating
ADMITTING = "admitting"  # node level: victims gone, Admitted sent, pods not bound yet
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0


def status_of(rec: PlanRecord) -> str:
    if rec.state == records.REQUESTED:
        return REQUESTED
    if rec.state == records.ACTUATED:
        return ACTUATED
    return CONFIRMED


class Flight(msgspec.Struct):
    record: PlanRecord
    status: str
    since: float  # monotonic, when quota learned of the request

    @property
    def plan_id(self) -> str:
        return self.record.plan_id

    @property
    def request_id(self) -> str:
        return self.record.request_id


class Failure(msgspec.Struct):
    seq: int  # the STATE sequence at the failure
    retry_at: float  # monotonic
    attempts: int


class Owed(msgspec.Struct, frozen=True):
    """A record move quota owes: ``plan_id`` from ``source`` to ``target``."""

    plan_id: str
    source: str
    target: str
    reason: str


Listener = Callable[[str, Flight | None, Flight | None], None]


class Flights:
    def __init__(self, on_change: Listener, seq: Callable[[], int], token: int = 0) -> None:
        self.on_change = on_change  # (preemptor, old flight, new flight) on every change
        self.seq = seq  # the STATE sequence now
        self.token = token  # quota's lease token: requests made under an older one end
        self.by_preemptor: dict[str, Flight] = {}
        self.failures: dict[str, Failure] = {}
        self.owed: list[Owed] = []

    def holders(self) -> list[str]:
        """The preemptors (their refs) whose flight holds room (confirmed or further)."""
        return sorted(
            f.record.preemptor for f in self.by_preemptor.values() if f.status != REQUESTED
        )

    # -- records ----------------------------------------------------------------------------
    def learn(self, rec: PlanRecord, failed_seq: int | None = None) -> None:
        """Take a record as it is now (from the bucket, or quota's own write). A failed
        attempt is retried once the state is past ``failed_seq`` (default: now)."""
        key = rec.flight
        current = self.by_preemptor.get(key)
        stale = rec.state == records.REQUESTED and rec.quota_token < self.token
        if stale and (current is None or current.plan_id != rec.plan_id):
            # Made by an older lease holder after this one adopted the requests (its
            # write was on its way): it is no flight of this holder's, and nobody may
            # confirm it.
            self.owe(rec, EXPIRED, "requested under an older quota lease")
            return
        if current is not None and current.plan_id != rec.plan_id:
            if not records.supersedes(rec, current.record):
                self._orphan(rec)
                return
            self._end(key)  # a later plan for the same preemptor (seen when rebuilding)
            self._orphan(current.record)
            current = None
        if rec.state in IN_FLIGHT:
            status = status_of(rec)
            if current is not None and current.status == ADMITTING and status == ACTUATED:
                status = ADMITTING
            flight = Flight(rec, status, current.since if current else time.monotonic())
            self.by_preemptor[key] = flight
            if rec.state == records.ACTUATED:
                self.failures.pop(key, None)  # it worked: the next failure starts afresh
            self.on_change(key, current, flight)
            return
        if current is not None:
            self._end(key)
            if rec.state != CLOSED:  # rejected, infeasible, expired, dropped
                self._failed(key, failed_seq)

    def _orphan(self, rec: PlanRecord) -> None:
        """A record that is not its preemptor's flight: one left by an ended flight."""
        if rec.state == records.ACTUATED:
            self.owe(rec, CLOSED, "superseded by a later plan for the preemptor")
        elif rec.state == records.REQUESTED:
            self.owe(rec, EXPIRED, "superseded by a later plan for the preemptor")

    def owe(self, rec: PlanRecord, target: str, reason: str) -> None:
        if all(o.plan_id != rec.plan_id for o in self.owed):
            self.owed.append(Owed(rec.plan_id, rec.state, target, reason))

    # -- flights -----------------------------------------------------------------------------
    def start(self, rec: PlanRecord) -> None:
        assert rec.flight not in self.by_preemptor, rec.flight
        self.learn(rec)

    def end(self, key: str, reason: str) -> None:
        """The flight ends here (its preemptor was admitted, or is gone): a request is
        given up, an actuated plan closed; a confirmed or actuating plan is the
        actuator's to finish (its record comes back here as it moves)."""
        flight = self.by_preemptor.get(key)
        if flight is None:
            return
        self._end(key)
        if flight.record.state == records.REQUESTED:
            self.owe(flight.record, EXPIRED, reason)
        elif flight.record.state == records.ACTUATED:
            self.owe(flight.record, CLOSED, reason)

    def fail(self, key: str, reason: str) -> None:
        """The attempt failed on quota's side (a request that waited too long)."""
        if key in self.by_preemptor:
            self.end(key, reason)
            self._failed(key)

    def admitting(self, key: str) -> None:
        flight = self.by_preemptor.get(key)
        if flight is not None and flight.status == ACTUATED:
            old = msgspec.structs.replace(flight)
            flight.status = ADMITTING
            self.on_change(key, old, flight)

    def forget(self, key: str) -> None:
        """The preemptor is gone: nothing about it is worth remembering."""
        self.failures.pop(key, None)

    def _end(self, key: str) -> None:
        flight = self.by_preemptor.pop(key, None)
        if flight is not None:
            self.on_change(key, flight, None)

    def _failed(self, key: str, seq: int | None = None) -> None:
        previous = self.failures.get(key)
        attempts = previous.attempts + 1 if previous is not None else 1
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (attempts - 1))
        at = max(self.seq(), seq or 0)
        self.failures[key] = Failure(at, time.monotonic() + delay, attempts)

    # -- questions ---------------------------------------------------------------------------
    def waiting(self) -> frozenset[str]:
        """Preemptors with a plan in flight: they keep their place, get no new decision."""
        return frozenset(self.by_preemptor)

    def may_request(self, key: str, seq: int) -> bool:
        """After a failed attempt, a new request waits until the state has changed or
        its backoff has passed (no retry storm, and no preemptor forgotten in a quiet
        cluster); the workload is still evaluated meanwhile and may simply fit."""
        failure = self.failures.get(key)
        return failure is None or seq > failure.seq or time.monotonic() >= failure.retry_at

    def next_retry(self) -> float | None:
        """The earliest monotonic instant a backoff ends, if any is still running."""
        now = time.monotonic()
        waits = [f.retry_at for f in self.failures.values() if f.retry_at > now]
        return min(waits) if waits else None

    def overdue(self, timeout: float) -> list[str]:
        """Preemptors whose request has waited longer than ``timeout`` for an answer."""
        now = time.monotonic()
        return [
            key
            for key, f in self.by_preemptor.items()
            if f.status == REQUESTED and now - f.since > timeout
        ]

    def take_owed(self) -> list[Owed]:
        owed, self.owed = self.owed, []
        return owed


__all__ = [
    "ACTUATED",
    "ADMITTING",
    "CONFIRMED",
    "REQUESTED",
    "Failure",
    "Flight",
    "Flights",
    "Owed",
    "status_of",
]
