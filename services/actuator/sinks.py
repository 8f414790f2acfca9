"""Where actuations go. Every sink reads the live objects (the source of truth) right
before acting, and every eviction it sends is idempotent per (plan, victim)."""

from __future__ import annotations

from typing import Protocol

import nats.errors
import structlog
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.errors import Transient
from gangpreempt.planning.barrier import LiveObject, live_object
from gangpreempt.replica import StateReplica
from services import simwire

log = structlog.get_logger("gangpreempt.actuator")


class Sink(Protocol):
    name: str

    async def read(self, refs: list[str]) -> dict[str, LiveObject]: ...

    async def evict(self, request: simwire.EvictRequest) -> simwire.EvictReply: ...

    async def set_check(self, ev: events.CheckDecided) -> str: ...

    async def activate(self) -> list[str]: ...

    async def lift_gate(self, key: str, host: str | None, why: str) -> str: ...


class SimSink:
    """The sim cluster in ingest, over request/reply."""

    name = "sim"

    def __init__(self, nc: Client, topology: Topology) -> None:
        self.nc = nc
        self.topology = topology

    async def _request(self, subject: str, payload: bytes) -> bytes:
        try:
            msg = await self.nc.request(subject, payload, timeout=5)
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            # not there (restarting: no responders), slow, or NATS away: try again later
            raise Transient(f"sim cluster did not answer on {subject}: {exc!r}") from exc
        return bytes(msg.data)

    async def read(self, refs: list[str]) -> dict[str, LiveObject]:
        data = await self._request(
            self.topology.sim_read, simwire.encode(simwire.ReadRequest(refs))
        )
        reply = simwire.decode(data, simwire.ReadReply)
        return {o.ref: o for o in reply.objects}

    async def evict(self, request: simwire.EvictRequest) -> simwire.EvictReply:
        data = await self._request(self.topology.sim_evict, simwire.encode(request))
        return simwire.decode(data, simwire.EvictReply)

    async def set_check(self, ev: events.CheckDecided) -> str:
        return "the sim cluster has no admission checks"  # its ClusterQueues list none

    async def activate(self) -> list[str]:
        return []

    async def lift_gate(self, key: str, host: str | None, why: str) -> str:
        return "the sim binds admitted pods itself"  # its pods carry no gates


class LogSink:
    """Touches nothing: reads from the actuator's STATE replica and logs each eviction."""

    name = "log"

    def __init__(self, replica: StateReplica) -> None:
        self.replica = replica

    async def read(self, refs: list[str]) -> dict[str, LiveObject]:
        await self.replica.caught_up()
        state = self.replica.state
        return {ref: live_object(ref, state) for ref in refs}

    async def evict(self, request: simwire.EvictRequest) -> simwire.EvictReply:
        log.info(
            "would evict",
            victim=request.ref,
            pods=list(request.pods),
            mode=request.mode,
            plan_id=request.plan_id,
            preemptor=request.preemptor,
            reason=request.reason,
            fencing_token=request.fencing_token,
        )
        return simwire.EvictReply(ok=True, applied=True)

    async def set_check(self, ev: events.CheckDecided) -> str:
        log.info(
            "would set the admission check",
            workload=ev.workload,
            check=ev.check,
            state=ev.state,
            message=ev.message,
            requeue_after_s=ev.requeue_after_s,
        )
        return "logged"

    async def activate(self) -> list[str]:
        return []

    async def lift_gate(self, key: str, host: str | None, why: str) -> str:
        log.info("would lift the gate", pod=key, hostname=host, why=why)
        return "logged"


__all__ = ["LogSink", "SimSink", "Sink"]
