"""Driving one plan record to its end, as the actuator that holds the lease.

The record says what to do (``gangpreempt.planning.records.actuator_step``):

- ``confirmed``: the gang barrier (every pod set or group of the gang placed) and the
  live objects (each victim the same incarnation, still running; the preemptor still
  pending) are checked; a plan that fails is moved to ``dropped`` and announced with
  ``PlanDropped``, nothing touched. Otherwise it is moved to ``actuating`` under this
  actuator's fencing token, and only then is any victim touched.
- ``actuating``: every victim is evicted (idempotent per plan: a victim this plan
  evicted before answers "already evicted"), ``VictimActuated`` and ``PlanActuated``
  are published, and the record is moved to ``actuated``. A record actuating under an
  older token (its holder died or was paused) is taken over first, under ours.

Every write is preceded by a check of the lease, and every record write is a
compare-and-set: a lost race is read again and decided again, never overwritten.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

import nats.errors
import structlog

from gangpreempt import events
from gangpreempt.bus import Lease, Publisher
from gangpreempt.bus.records import RecordBook, RecordStore
from gangpreempt.errors import Conflict, Fenced, Transient
from gangpreempt.planning.barrier import PlannedObject, stale_reason
from gangpreempt.planning.legitimacy import (
    PROTECTED_NAMESPACES,
    Refusal,
    illegitimate,
    live_refusal,
)
from gangpreempt.planning.nodeconfirm import placement_gap, room_gap
from gangpreempt.planning.nodeplan import is_node_level
from gangpreempt.planning.records import (
    ACTUATED,
    ACTUATING,
    ACTUATOR,
    ANNOUNCE,
    DROP,
    DROPPED,
    FENCED,
    NOTHING,
    PlanRecord,
    actuator_step,
    advance,
)
from gangpreempt.replica import StateReplica
from gangpreempt.telemetry import metrics, tracer
from gangpreempt.telemetry.tracing import continued_span
from services import simwire
from services.actuator.sinks import Sink
from services.kube.errors import ApiError
from services.livestate import key_of
from services.runtime import fault

log = structlog.get_logger("gangpreempt.actuator")

KUEUE_EVICTION = "kueue"


def refused(wrong: Refusal) -> str:
    """The drop reason of a plan the legitimacy rules refuse, counted by its rule."""
    metrics.PLANS_ILLEGITIMATE.labels("actuator", wrong.rule).inc()
    return f"illegitimate: {wrong}"


class Driver:
    def __init__(
        self,
        store: RecordStore,
        book: RecordBook,
        replica: StateReplica,
        sink: Sink,
        publisher: Publisher,
        lease: Lease,
        now: Callable[[], datetime],
        writer: str,
        pod_eviction: str,
        plan_timeout: float,
        protected: Collection[str] = PROTECTED_NAMESPACES,
    ) -> None:
        self.store = store
        self.book = book
        self.replica = replica
        self.sink = sink
        self.publisher = publisher
        self.lease = lease
        self.now = now
        self.writer = writer
        self.pod_eviction = pod_eviction
        self.plan_timeout = plan_timeout
        self.protected = protected  # namespaces no victim is taken from

    async def drive(self, plan_id: str) -> None:
        """Take the plan as far as it goes now. Raises ``Fenced`` when another holder
        acts, ``Transient`` when it is worth trying again later."""
        token = self.lease.check()
        # The book's copy first (it follows the bucket; every write is a compare-and-set,
        # so a stale copy only costs a lost race); after a lost race, the bucket itself.
        current = self.book.records.get(plan_id)
        for _ in range(10):
            if current is None:
                current = await self.store.get(plan_id)
                if current is None:
                    return
                self.book.learn(*current)
            rec, revision = current
            current = None
            stale = await self.validate(rec) if rec.state == "confirmed" else None
            step = actuator_step(rec, token, stale)
            if step == NOTHING:
                return
            if step == FENCED:
                raise Fenced(f"plan {plan_id} is actuating under a newer token")
            try:
                attributes = {"gangpreempt.plan_id": plan_id, "gangpreempt.fencing_token": token}
                with continued_span(f"actuator {step}", rec.trace, None, attributes):
                    if step == DROP:
                        assert stale is not None
                        await self.drop(rec, revision, token, stale)
                    elif step == ANNOUNCE:
                        await self.announce_drop(rec, revision)
                    else:
                        await self.actuate(rec, revision, token)
                return
            except Conflict:
                continue  # the record moved on meanwhile: read it and decide again
        raise Transient(f"plan {plan_id}: the record keeps moving")

    # -- checks -----------------------------------------------------------------------------
    async def validate(self, rec: PlanRecord) -> str | None:
        """Why the confirmed plan must be dropped, or None."""
        p = rec.proposal
        if p is None:
            return "the record carries no proposal"
        await self.replica.wait_seq(p.state_seq)
        state = self.replica.state
        node_level = is_node_level(state, p.preemptor)
        if node_level:
            gap = placement_gap(state, p.preemptor, p.placement, self.replica.pods)
            if gap is not None:
                return f"the gang is not placed: {gap}"
        else:
            wl = state.workloads.get(key_of(p.preemptor))
            missing = sorted({ps.name for ps in wl.pod_sets} - set(p.pod_sets)) if wl else []
            if missing:
                return f"plan does not cover pod sets {', '.join(missing)}"
        index = self.replica.pods
        wrong = illegitimate(
            state, p, self.protected, node_level=node_level, index=index, now=self.now()
        )
        if wrong is not None:
            return refused(wrong)
        if p.placement:
            victim_pods = (pod for v in p.victims for pod in v.pods)
            room = room_gap(state, p.placement, victim_pods, index)
            if room is not None:
                return f"the gang is not placed: {room}"
        pods = [pod for v in p.victims for pod in v.pods]
        try:
            live = await self.sink.read([p.preemptor, *(v.object for v in p.victims), *pods])
        except (Transient, ApiError) as exc:
            # The truth cannot be read now: try again, and give up (touching nothing)
            # once the plan has waited for its actuation longer than plan_timeout.
            waited = (self.now() - rec.updated_at).total_seconds()
            if waited < self.plan_timeout:
                raise Transient(f"live read failed: {exc}") from exc
            return f"live read failed for {waited:.0f}s: {exc}"
        stale = stale_reason(
            PlannedObject(p.preemptor, p.preemptor_uid, ""),
            [
                PlannedObject(v.object, v.uid, v.resource_version, v.pods, v.pod_uids)
                for v in p.victims
            ],
            live,
        )
        if stale is not None:
            return f"stale: {stale}"
        wrong = live_refusal(p, live, node_level)
        return refused(wrong) if wrong is not None else None

    # -- moves ------------------------------------------------------------------------------
    async def write(
        self, rec: PlanRecord, revision: int, to: str, **changes: Any
    ) -> tuple[PlanRecord, int]:
        """Move the record (compare-and-set), after checking the lease once more."""
        self.lease.check()
        moved = advance(rec, to, by=ACTUATOR, now=self.now(), writer=self.writer, **changes)
        written = await self.store.put(moved, revision)
        self.book.learn(moved, written)
        return moved, written

    async def drop(self, rec: PlanRecord, revision: int, token: int, reason: str) -> None:
        dropped, revision = await self.write(
            rec, revision, DROPPED, reason=reason, fencing_token=token
        )
        log.info("plan dropped", plan_id=rec.plan_id, workload=rec.preemptor, reason=reason)
        await self.announce_drop(dropped, revision)

    async def announce_drop(self, rec: PlanRecord, revision: int) -> None:
        await self.publisher.publish(
            events.PlanDropped(
                id=f"dropped-{rec.plan_id}",
                occurred_at=self.now(),
                plan_id=rec.plan_id,
                preemptor=rec.preemptor,
                reason=rec.reason,
            )
        )
        await self.write(rec, revision, DROPPED, announced=True)

    async def actuate(self, rec: PlanRecord, revision: int, token: int) -> None:
        p = rec.proposal
        assert p is not None
        confirmed_at = rec.updated_at if rec.state == "confirmed" else None
        if rec.state != ACTUATING or rec.fencing_token != token:
            taking_over = rec.state == ACTUATING
            fault("before-actuation")
            rec, revision = await self.write(rec, revision, ACTUATING, fencing_token=token)
            fault("after-take-over" if taking_over else "after-claim")
        results = await asyncio.gather(*(self.evict(p, v, token) for v in p.victims))
        done = tuple(v.object for v, ok in zip(p.victims, results, strict=True) if ok)
        # The events go out before the record says actuated: a crash in between resumes
        # the plan and sends them again (same ids, dropped by the stream as duplicates).
        sends = [
            await self.publisher.send(
                events.VictimActuated(
                    id=f"victim-{p.plan_id}-{v.object}",
                    occurred_at=self.now(),
                    plan_id=p.plan_id,
                    preemptor=p.preemptor,
                    victim=v.object,
                    victim_uid=v.uid,
                    reason=v.reason,
                    sink=self.sink.name,
                    fencing_token=token,
                )
            )
            for v, ok in zip(p.victims, results, strict=True)
            if ok
        ]
        sends.append(
            await self.publisher.send(
                events.PlanActuated(
                    id=f"actuated-{p.plan_id}",
                    occurred_at=self.now(),
                    plan_id=p.plan_id,
                    preemptor=p.preemptor,
                    victims=done,
                    fencing_token=token,
                )
            )
        )
        try:
            await asyncio.wait_for(asyncio.gather(*sends), self.publisher.ack_timeout)
        except TimeoutError as exc:
            raise Transient(f"plan {p.plan_id}: events not acknowledged") from exc
        fault("before-actuated")  # every victim evicted, the record not yet actuated
        await self.write(
            rec,
            revision,
            ACTUATED,
            fencing_token=token,
            actuated=done,
            announced=True,
        )
        metrics.hop("confirmed_to_actuated", confirmed_at, self.now())
        taken = [v for v, ok in zip(p.victims, results, strict=True) if ok]
        metrics.plan_actuated(
            p.cluster_queue,
            [v.reason for v in taken],
            sum(max(1, len(v.pods)) for v in taken),
        )
        log.info("plan actuated", plan_id=p.plan_id, workload=p.preemptor, victims=len(done))

    async def evict(self, p: events.PlanProposed, v: events.PlannedVictim, token: int) -> bool:
        """Evict one victim (idempotent for this plan); False when the sink refused."""
        self.lease.check()
        started = time.monotonic()
        with tracer().start_as_current_span(
            "evict", attributes={"gangpreempt.victim": v.object, "gangpreempt.sink": self.sink.name}
        ):
            return await self._evict(p, v, token, started)

    async def _evict(
        self, p: events.PlanProposed, v: events.PlannedVictim, token: int, started: float
    ) -> bool:
        try:
            reply = await self.sink.evict(
                simwire.EvictRequest(
                    ref=v.object,
                    uid=v.uid,
                    plan_id=p.plan_id,
                    preemptor=p.preemptor,
                    reason=v.reason,
                    fencing_token=token,
                    pods=v.pods,
                    mode=self.mode_for(v.object),
                    pod_uids=v.pod_uids,
                    why=v.why,
                )
            )
        except (Fenced, Transient):
            raise
        except (TimeoutError, nats.errors.Error, OSError) as exc:  # the sink is not there
            raise Transient(f"evicting {v.object}: {exc!r}") from exc
        except Exception as exc:  # a sink defect must not strand the plan: report it
            log.exception("eviction failed", plan_id=p.plan_id, victim=v.object)
            reply = simwire.EvictReply(ok=False, detail=repr(exc))
        if reply.fenced:
            raise Fenced(f"the sink refused token {token}: {reply.detail}")
        if not reply.ok:
            log.error("eviction refused", plan_id=p.plan_id, victim=v.object, detail=reply.detail)
            return False
        fault("after-eviction")
        log.debug("evicted", victim=v.object, seconds=round(time.monotonic() - started, 4))
        return True

    def mode_for(self, ref: str) -> str:
        """How a victim is actuated: a Kueue Workload is evicted the way Kueue does it,
        pods are deleted or soft-evicted (GANGPREEMPT_POD_EVICTION)."""
        kind, _, key = ref.partition("/")
        if kind == "Workload" and key in self.replica.state.workloads:
            return KUEUE_EVICTION
        return self.pod_eviction


__all__ = ["KUEUE_EVICTION", "Driver"]
