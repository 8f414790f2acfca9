"""Services' status on request. quota's: whether it has decided on everything STATE
holds; ingest's: how much of the scenario's timeline it has played. ``up
--until-settled`` and the scale benchmark ask them instead of waiting for a quiet window
(a cycle on a large cluster may take longer than any fixed window, and a timeline may
hold a step long after everything before it settled)."""

from __future__ import annotations

from typing import TypeVar

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from gangpreempt.bus.topology import Topology


class QuotaStatus(msgspec.Struct, frozen=True):
    complete: bool  # ingest's starting state has been seen whole
    state_seq: int  # the STATE sequence quota's replica has applied
    decided_seq: int  # the STATE sequence its last finished cycle decided on
    busy: bool  # a cycle is running
    dirty: bool  # a change waits for the next cycle
    flights: int  # preemptors with a plan in flight
    retry_pending: bool  # a failed attempt waits for its backoff
    token: int = 0  # the lease token it decides under (only the lease holder answers)

    @property
    def idle(self) -> bool:
        """Nothing to decide: every change it has is decided on."""
        return (
            self.complete
            and not self.busy
            and not self.dirty
            and self.decided_seq >= self.state_seq
        )


class IngestStatus(msgspec.Struct, frozen=True):
    timed_steps: int  # the timeline's steps at a given second
    timed_played: int  # of those, played and their changes stored
    triggered_steps: int  # steps played when an event appears (they may never fire)
    triggered_played: int

    @property
    def timeline_done(self) -> bool:
        """Every timed step is played: what is left can only be set off by an event."""
        return self.timed_played >= self.timed_steps


def status_subject(topology: Topology, service: str) -> str:
    """Not in any stream: a request answered by the service, nothing stored."""
    return f"{topology.prefix}.status.{service}"


S = TypeVar("S", QuotaStatus, IngestStatus)


async def ask(
    nc: Client, topology: Topology, service: str, kind: type[S], timeout: float = 1.0
) -> S | None:
    """``service``'s status, or None when it does not answer in time."""
    try:
        msg: Msg = await nc.request(status_subject(topology, service), b"", timeout=timeout)
        return msgspec.json.decode(msg.data, type=kind)
    except Exception:  # no responders, a timeout, a service of another version
        return None


async def ask_quota(nc: Client, topology: Topology, timeout: float = 1.0) -> QuotaStatus | None:
    """quota's status (its lease holder's), or None when it does not answer in time."""
    return await ask(nc, topology, "quota", QuotaStatus, timeout)


async def ask_ingest(nc: Client, topology: Topology, timeout: float = 1.0) -> IngestStatus | None:
    """ingest's status, or None when it does not answer in time."""
    return await ask(nc, topology, "ingest", IngestStatus, timeout)


async def timeline_played(nc: Client, topology: Topology) -> bool:
    """ingest has played every timed step of its scenario's timeline."""
    status = await ask_ingest(nc, topology)
    return status is not None and status.timeline_done


async def quota_caught_up(nc: Client, topology: Topology) -> bool:
    """quota is idle and has decided on everything STATE holds now."""
    status = await ask_quota(nc, topology)
    if status is None or not status.idle:
        return False
    info = await nc.jetstream().stream_info(topology.state_stream)
    return status.state_seq >= info.state.last_seq


__all__ = [
    "IngestStatus",
    "QuotaStatus",
    "ask",
    "ask_ingest",
    "ask_quota",
    "quota_caught_up",
    "status_subject",
    "timeline_played",
]
