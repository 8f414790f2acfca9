"""Following a stream as it grows: an ordered consumer (no acks, recreated on gaps), for
views that only watch: the live view of ``up``, benchmarks, tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy


async def follow(
    nc: Client,
    subject: str,
    stream: str,
    cb: Callable[[Msg], Awaitable[None]],
    deliver_policy: DeliverPolicy = DeliverPolicy.NEW,
) -> Any:
    """Subscribe ``cb`` to ``subject`` of ``stream``; returns the subscription."""
    return await nc.jetstream().subscribe(
        subject, cb=cb, ordered_consumer=True, deliver_policy=deliver_policy, stream=stream
    )


__all__ = ["follow"]
