"""The actuator's part in Kueue's admission check: it writes quota's ``CheckDecided``
through the sink, and marks gangpreempt's AdmissionChecks ``Active``, only while it
holds its lease, and each decision only if quota decided it under quota's current
lease (a stale quota holder's decision is dropped: the new holder decides again)."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from nats.js.kv import KeyValue

from gangpreempt import events
from gangpreempt.bus.consuming import Delivery
from gangpreempt.bus.leasing import current_token
from gangpreempt.errors import Fenced, Transient
from services.actuator.sinks import Sink
from services.runtime import ServiceContext, sleep_or_stop

log = structlog.get_logger("gangpreempt.actuator")

QUOTA_LEASE = "quota"
ACTIVATE_EVERY_S = 2.0


class CheckWriter:
    def __init__(self, ctx: ServiceContext, sink: Sink, leases: KeyValue) -> None:
        self.ctx = ctx
        self.sink = sink
        self.leases = leases
        self.consumer = ctx.decisions_consumer(self.on_event, concurrency=8)
        self.written = 0  # decisions written (tests, logs)

    async def on_event(self, event: Any, _delivery: Delivery) -> None:
        if not isinstance(event, events.CheckDecided):
            return
        try:
            quota = await current_token(self.leases, QUOTA_LEASE)
        except Exception as exc:
            raise Transient(f"quota's lease cannot be read: {exc!r}") from exc
        if quota != event.quota_token:
            log.info(
                "admission check decision dropped: decided under an old quota lease",
                workload=event.workload,
                decided_under=event.quota_token,
                quota_token=quota,
            )
            return
        try:
            outcome = await self.sink.set_check(event)
        except Fenced as exc:  # redelivered; the next holder writes it
            raise Transient(str(exc)) from exc
        if outcome == "written":
            self.written += 1
        log.info(
            "admission check",
            workload=event.workload,
            check=event.check,
            state=event.state,
            outcome=outcome,
        )

    async def keep_active(self, term: asyncio.Event) -> None:
        """gangpreempt's AdmissionChecks marked Active, as they appear."""
        while not term.is_set():
            try:
                marked = await self.sink.activate()
                if marked:
                    log.info("admission checks marked active", checks=marked)
            except Fenced:
                return
            except Exception as exc:  # the API server away: try again
                log.warning("admission checks not marked active yet", error=repr(exc))
            await sleep_or_stop(term, ACTIVATE_EVERY_S)

    async def run(self, term: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.consumer.run(term))
            tg.create_task(self.keep_active(term))


__all__ = ["CheckWriter"]
