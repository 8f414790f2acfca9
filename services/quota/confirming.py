"""quota's answers on plan records: a proposal confirmed or rejected, a request found
infeasible, and the moves quota owes (a request given up, a plan closed).

A proposal is checked and its holds (the ledger's, the nodes') are taken with nothing
awaited in between, before the record write is awaited, so the admission cycle and
every other proposal already see them (proposals are decided concurrently, their writes
overlap); if the write does not go through, the record is read again and the holds
follow what it says. A proposal whose record is not ``requested`` any
more (a redelivery, a duplicate, a restart) gets the answer the record already holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

import structlog

from gangpreempt import events
from gangpreempt.bus import Lease, Publisher
from gangpreempt.bus.records import RecordBook, RecordStore, Versioned
from gangpreempt.errors import Conflict, Transient
from gangpreempt.planning.records import (
    CONFIRMED,
    EXPIRED,
    INFEASIBLE,
    QUOTA,
    REJECTED,
    REQUESTED,
    IllegalMove,
    PlanRecord,
    advance,
    quota_adopts,
    takeover_move,
)
from services.quota.flights import Flights, Owed

log = structlog.get_logger("gangpreempt.quota")

Check = Callable[[PlanRecord, events.PlanProposed], str | None]
# The disruption budget at confirmation: why the plan must wait for it, or the record
# fields that carry its charge (taken when it answers); None: no budget
Charge = Callable[[PlanRecord, events.PlanProposed], tuple[str | None, dict[str, object]]]
TAKEN_OVER = "requested under an older quota lease: the new holder asks again"


class Confirmer:
    def __init__(
        self,
        store: RecordStore,
        book: RecordBook,
        flights: Flights,
        publisher: Publisher,
        now: Callable[[], datetime],
        writer: str,
        lease: Lease | None = None,
        charge: Charge | None = None,
        uncharge: Callable[[str], None] | None = None,
    ) -> None:
        self.charge = charge
        self.uncharge = uncharge
        self.store = store
        self.book = book
        self.flights = flights
        self.publisher = publisher
        self.now = now
        self.writer = writer
        self.lease = lease  # quota's lease: every record write is fenced by it
        self.creating: dict[str, asyncio.Future[int]] = {}  # plan -> its record's creation

    def token(self) -> int:
        """Quota's lease token, checked on this process's clock (``Fenced`` once it is no
        longer ours): every record write carries it."""
        return self.lease.check() if self.lease is not None else 0

    def advance(self, rec: PlanRecord, to: str, **changes: object) -> PlanRecord:
        """``rec`` moved by quota, under its lease token (``Fenced`` without the lease)."""
        return advance(
            rec,
            to,
            by=QUOTA,
            now=self.now(),
            writer=self.writer,
            quota_token=self.token(),
            **changes,
        )

    # -- records quota creates -------------------------------------------------------------
    def create(self, rec: PlanRecord) -> asyncio.Future[int]:
        """Write a new request's record (beside the request itself); a proposal for it
        waits for this write before it reads the record."""

        async def created() -> int:
            self.token()  # not past the lease, just before the write
            return await self.store.create(rec)

        future = asyncio.ensure_future(created())
        self.creating[rec.plan_id] = future

        def done(f: asyncio.Future[int]) -> None:
            self.creating.pop(rec.plan_id, None)
            if not f.cancelled() and f.exception() is None:
                self.book.learn(rec, f.result())

        future.add_done_callback(done)
        return future

    async def read(self, plan_id: str) -> Versioned | None:
        """The record as quota knows it (it writes every ``requested`` record's next
        move itself, so its book is current for those; a stale copy only costs a lost
        compare-and-set), else as the bucket has it."""
        creating = self.creating.get(plan_id)
        if creating is not None:
            await asyncio.wait({creating}, timeout=self.store.timeout)
        known = self.book.records.get(plan_id)
        if known is not None and known[0].state == REQUESTED:
            return known
        return await self.store.get(plan_id)

    async def write(self, rec: PlanRecord, revision: int, to: str, **changes: object) -> PlanRecord:
        moved = self.advance(rec, to, **changes)
        self.book.learn(moved, await self.store.put(moved, revision))
        return moved

    async def adopt(self, token: int, concurrency: int = 64) -> int:
        """Write, under ``token``, every record whose next move is quota's
        (``records.takeover_move``: an actuated plan again as it is, a request expired):
        a write an older lease holder still has on its way then fails its
        compare-and-set, and any later one is refused as stale. Returns how many were
        written."""
        gate = asyncio.Semaphore(concurrency)

        def mover(rec: PlanRecord) -> PlanRecord | None:
            move = takeover_move(rec, token)
            if move is None:
                return None
            if move == EXPIRED:
                return self.advance(rec, move, reason=TAKEN_OVER)
            return self.advance(rec, move)

        async def one(plan_id: str) -> bool:
            async with gate:
                moved = await self.store.move(plan_id, mover)
            if moved is None:
                return False
            self.book.learn(*moved)
            return moved[0].quota_token == token

        wanted = [pid for pid, (rec, _) in self.book.records.items() if quota_adopts(rec, token)]
        return sum(await asyncio.gather(*(one(pid) for pid in wanted)))

    # -- proposals --------------------------------------------------------------------------
    async def proposed(self, p: events.PlanProposed, check: Check) -> None:
        await self.answer(p, await self.decide(p, check))

    async def decide(self, p: events.PlanProposed, check: Check) -> str | None:
        """Confirm or reject on the record: why it is rejected, or None (confirmed)."""
        found = await self.read(p.plan_id)
        if found is None:
            return "no preemption request in flight with this id"
        rec, revision = found
        if rec.state != REQUESTED:
            return self.answered(rec, p)
        flight = self.flights.by_preemptor.get(rec.flight)
        reason = (
            "the preemption request ended while the plan was computed"
            if flight is None or flight.plan_id != rec.plan_id
            else check(rec, p)
        )
        charged: dict[str, object] = {}
        if reason is None and self.charge is not None:
            reason, charged = self.charge(rec, p)
        if reason is not None:
            rejected = await self.write(rec, revision, REJECTED, reason=reason)
            self.flights.learn(rejected)
            return reason
        confirmed = self.advance(rec, CONFIRMED, proposal=p, **charged)
        self.flights.learn(confirmed)  # the holds, before anything is awaited
        try:
            self.book.learn(confirmed, await self.store.put(confirmed, revision))
        except (Conflict, Transient):
            if self.uncharge is not None:
                self.uncharge(p.plan_id)  # the record, read again, says what holds
            again = await self.store.get(p.plan_id)
            self.flights.learn(again[0] if again is not None else rec)
            raise Transient(f"plan {p.plan_id}: confirmation not written") from None
        return None

    def answered(self, rec: PlanRecord, p: events.PlanProposed) -> str | None:
        """A proposal seen before: the answer the record holds, again (same event id)."""
        if rec.proposal is not None and rec.proposal.plan_id == p.plan_id:
            return None
        if rec.state == REJECTED:
            return rec.reason
        return f"the preemption request is {rec.state}: {rec.reason}"

    async def answer(self, p: events.PlanProposed, reason: str | None) -> None:
        now = self.now()
        if reason is None:
            event: events.Event = events.PlanConfirmed(
                id=f"confirmed-{p.plan_id}",
                occurred_at=now,
                plan_id=p.plan_id,
                preemptor=p.preemptor,
            )
            log.info("plan confirmed", plan_id=p.plan_id, workload=p.preemptor)
        else:
            event = events.PlanRejected(
                id=f"rejected-{p.plan_id}",
                occurred_at=now,
                plan_id=p.plan_id,
                preemptor=p.preemptor,
                reason=reason,
            )
            log.info("plan rejected", plan_id=p.plan_id, workload=p.preemptor, reason=reason)
        await self.publisher.publish(event)

    async def infeasible(self, event: events.PreemptionInfeasible, seq: int) -> None:
        plan_id = events.stable_id("plan", event.request_id)
        found = await self.read(plan_id)
        if found is None or found[0].state != REQUESTED:
            return
        rec, revision = found
        try:
            moved = await self.write(rec, revision, INFEASIBLE, reason=event.message)
        except Conflict:
            return  # answered meanwhile
        self.flights.learn(moved, failed_seq=max(seq, event.state_seq))
        log.info("preemption infeasible", workload=event.preemptor, reason=event.message)

    # -- moves quota owes --------------------------------------------------------------------
    async def pay(self, owed: list[Owed]) -> list[Owed]:
        """Write the moves quota owes; those that could not be written now are returned."""
        unpaid = []
        for o in owed:

            def mover(rec: PlanRecord, o: Owed = o) -> PlanRecord | None:
                if rec.state != o.source:
                    return None  # moved on: nothing owed any more
                return self.advance(rec, o.target, reason=o.reason)

            try:
                moved = await self.store.move(o.plan_id, mover)
            except (Transient, IllegalMove) as exc:
                log.info("record move not written; will retry", plan_id=o.plan_id, error=str(exc))
                unpaid.append(o)
                continue
            if moved is None:
                continue
            self.book.learn(*moved)
            rec = moved[0]
            if rec.state == EXPIRED and rec.writer == self.writer and rec.reason == o.reason:
                await self.publisher.publish(
                    events.RequestExpired(
                        id=f"expired-{rec.request_id}",
                        occurred_at=self.now(),
                        request_id=rec.request_id,
                        workload=rec.preemptor,
                        reason=o.reason,
                    )
                )
        return unpaid


__all__ = ["Charge", "Check", "Confirmer"]
