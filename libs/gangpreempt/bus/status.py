"""quota's status on request: whether it has decided on everything STATE holds. ``up
--until-settled`` and the scale benchmark ask it instead of waiting for a quiet window
(a cycle on a large cluster may take longer than any fixed window)."""

from __future__ import annotations

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

    @property
    def idle(self) -> bool:
        """Nothing to decide: every change it has is decided on."""
        return (
            self.complete
            and not self.busy
            and not self.dirty
            and self.decided_seq >= self.state_seq
        )


def status_subject(topology: Topology, service: str) -> str:
    """Not in any stream: a request answered by the service, nothing stored."""
    return f"{topology.prefix}.status.{service}"


async def ask_quota(nc: Client, topology: Topology, timeout: float = 1.0) -> QuotaStatus | None:
    """quota's status, or None when it does not answer in time."""
    try:
        msg: Msg = await nc.request(status_subject(topology, "quota"), b"", timeout=timeout)
        return msgspec.json.decode(msg.data, type=QuotaStatus)
    except Exception:  # no responders, a timeout, a quota of another version
        return None


async def quota_caught_up(nc: Client, topology: Topology) -> bool:
    """quota is idle and has decided on everything STATE holds now."""
    status = await ask_quota(nc, topology)
    if status is None or not status.idle:
        return False
    info = await nc.jetstream().stream_info(topology.state_stream)
    return status.state_seq >= info.state.last_seq


__all__ = ["QuotaStatus", "ask_quota", "quota_caught_up", "status_subject"]
