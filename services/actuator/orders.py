"""The actuator's part in the hand-off (``docs/kubernetes.md``): while it holds its lease,
it writes quota's ``CheckDecided`` on the Workload (Kueue's admission check), marks
gangpreempt's AdmissionChecks ``Active``, and lifts gangpreempt's scheduling gate from
pods whose placement is decided: a Kueue Workload's pods onto their pod set's planned
nodes, a gang's or lone pod's onto the nodes of quota's ``Admitted``
(``planning.gating``). A decision of quota's is applied only if it was made under
quota's current lease (a stale holder's is dropped: the new holder decides again). A
gated pod nothing places in time is released unchanged (or, fail-closed, reported)."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from nats.js.kv import KeyValue

from gangpreempt import events
from gangpreempt.bus.consuming import Delivery
from gangpreempt.bus.leasing import current_token
from gangpreempt.errors import Fenced, Transient
from gangpreempt.planning.gating import hostname, overdue, placed, planned_assignments
from gangpreempt.replica import StateReplica
from services.actuator.sinks import Sink
from services.runtime import ServiceContext, sleep_or_stop

log = structlog.get_logger("gangpreempt.actuator")

QUOTA_LEASE = "quota"
SWEEP_S = 0.5  # gated pods looked at, AdmissionChecks marked Active, at least this often


class QuotaOrders:
    def __init__(
        self, ctx: ServiceContext, sink: Sink, leases: KeyValue, replica: StateReplica
    ) -> None:
        self.ctx = ctx
        self.sink = sink
        self.leases = leases
        self.replica = replica
        self.consumer = ctx.decisions_consumer(self.on_event, concurrency=8)
        self.written = 0  # checks written (tests, logs)
        self.reported: set[str] = set()  # overdue pods reported (fail-closed)

    async def current(self, decided_under: int, what: str) -> bool:
        try:
            quota = await current_token(self.leases, QUOTA_LEASE)
        except Exception as exc:
            raise Transient(f"quota's lease cannot be read: {exc!r}") from exc
        if quota != decided_under:
            log.info(
                "quota's decision dropped: made under an old quota lease",
                what=what,
                decided_under=decided_under,
                quota_token=quota,
            )
        return quota == decided_under

    async def on_event(self, event: Any, _delivery: Delivery) -> None:
        try:
            # The sim binds what quota admits itself: only a kubernetes sink has gates.
            ordered = isinstance(event, events.CheckDecided) or (
                isinstance(event, events.Admitted)
                and event.placement
                and self.sink.name == "kubernetes"
            )
            if not ordered or not await self.current(event.quota_token, event.workload):
                return
            if isinstance(event, events.CheckDecided):
                await self.check(event)
            else:
                await self.place(event)
        except Fenced as exc:  # redelivered; the next holder applies it
            raise Transient(str(exc)) from exc

    async def check(self, event: events.CheckDecided) -> None:
        outcome = await self.sink.set_check(event)
        if outcome == "written":
            self.written += 1
        log.info(
            "admission check",
            workload=event.workload,
            check=event.check,
            state=event.state,
            outcome=outcome,
        )

    async def place(self, event: events.Admitted) -> None:
        await self.replica.caught_up()
        state = self.replica.state
        for key, node in sorted(placed(state, event.placement).items()):
            why = f"gangpreempt placed {event.workload} here: {node}"
            outcome = await self.sink.lift_gate(key, hostname(state, node), why)
            log.info("gate lifted", pod=key, node=node, outcome=outcome)

    async def sweep(self) -> None:
        """gangpreempt's AdmissionChecks Active; gated pods of Kueue Workloads narrowed to
        their planned nodes; gated pods past the bound released (or reported)."""
        marked = await self.sink.activate()
        if marked:
            log.info("admission checks marked active", checks=marked)
        state = self.replica.state
        for key, node in sorted(planned_assignments(state).items()):
            why = f"gangpreempt planned this pod's node: {node}"
            outcome = await self.sink.lift_gate(key, hostname(state, node), why)
            log.info("gate lifted", pod=key, node=node, outcome=outcome)
        settings = self.ctx.settings
        for key in overdue(state, self.ctx.now(), settings.gate_timeout):
            why = f"not placed by gangpreempt within {settings.gate_timeout:g}s"
            if settings.gate_fail == "closed":
                if key not in self.reported:
                    self.reported.add(key)
                    log.warning("gated pod not placed; kept gated (fail-closed)", pod=key)
                continue
            outcome = await self.sink.lift_gate(key, None, f"{why}: released unchanged")
            log.warning("gated pod not placed; released unchanged", pod=key, outcome=outcome)

    async def keep_sweeping(self, term: asyncio.Event) -> None:
        while not term.is_set():
            try:
                await self.sweep()
            except Fenced:
                return
            except Exception as exc:  # the API server away: try again
                log.warning("gates and checks not swept", error=repr(exc))
            await sleep_or_stop(term, SWEEP_S)

    async def run(self, term: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.consumer.run(term))
            tg.create_task(self.keep_sweeping(term))


__all__ = ["QuotaOrders"]
