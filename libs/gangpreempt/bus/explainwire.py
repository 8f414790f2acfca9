"""``gangpreempt explain --plan``: the victims service explains a plan on request (NATS
request/reply on a subject no stream captures; only ``admin`` may ask)."""

from __future__ import annotations

import msgspec
from nats.aio.client import Client

from gangpreempt.bus.topology import Topology
from gangpreempt.errors import Transient
from gangpreempt.planning.explaining import Explanation


class ExplainRequest(msgspec.Struct, frozen=True):
    plan_id: str = ""  # a plan's id (its record says the preemptor)
    workload: str = ""  # or a pending object's ref, explained as plan --workload does


class ExplainReply(msgspec.Struct, frozen=True, omit_defaults=True):
    error: str = ""  # why there is no explanation
    plan_state: str = ""  # the plan record's state (requested, confirmed, actuated, ...)
    plan_victims: list[str] = msgspec.field(default_factory=list)  # what the plan chose
    plan_reason: str = ""  # why the plan ended, when it did
    explanation: Explanation | None = None  # the decision on the state the worker has now


def explain_subject(topology: Topology) -> str:
    """Not in any stream (the decisions stream takes ``<prefix>.victims.>``)."""
    return f"{topology.prefix}.explain.victims"


async def ask_explain(
    nc: Client, topology: Topology, request: ExplainRequest, timeout: float = 30.0
) -> ExplainReply:
    """Ask a victims worker; ``Transient`` when none answers in time."""
    try:
        msg = await nc.request(explain_subject(topology), msgspec.json.encode(request), timeout)
    except Exception as exc:  # no responders, a timeout
        where = explain_subject(topology)
        raise Transient(f"no victims worker answered on {where}: {exc!r}") from exc
    return msgspec.json.decode(msg.data, type=ExplainReply)


__all__ = ["ExplainReply", "ExplainRequest", "ask_explain", "explain_subject"]
