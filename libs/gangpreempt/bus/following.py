"""Following a stream as it grows.

``follow`` is a bare ordered consumer (no acks, recreated by the client on gaps), for
views that only watch: the live view of ``up``, benchmarks, tests.

``Follower`` is what a service's view of a stream is built on (the STATE replica, the
plan records): the same ordered consumer with a short heartbeat, plus a watchdog that
notices when the stream has moved on and nothing arrives (a nats-server restart can
leave an ordered consumer dead on the server while the client waits) and subscribes
again from the last sequence applied. Messages are handed over in stream order, each
sequence at most once, so the callback sees the stream as if nothing had happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from gangpreempt.waiting import sleep_or_stop

log = structlog.get_logger("gangpreempt.bus")

HEARTBEAT_S = 1.0  # the server's idle heartbeat on a follower's consumer
WATCHDOG_S = 2.0  # how long a follower may lag the stream without a message
# An abandoned follower's consumer (its client gone) is removed this long after: the
# streams cap their consumers (bus/provisioning.py), so dead ones must not linger.
FOLLOWER_IDLE = 5.0


async def follow(
    nc: Client,
    subject: str,
    stream: str,
    cb: Callable[[Msg], Awaitable[None]],
    deliver_policy: DeliverPolicy = DeliverPolicy.NEW,
) -> Any:
    """Subscribe ``cb`` to ``subject`` of ``stream``; returns the subscription."""
    return await nc.jetstream().subscribe(
        subject,
        cb=cb,
        ordered_consumer=True,
        deliver_policy=deliver_policy,
        stream=stream,
        inactive_threshold=FOLLOWER_IDLE,
    )


class Follower:
    """``cb`` gets every message of ``subject`` in ``stream`` from ``deliver_policy`` on,
    in order, once, across reconnects and server restarts."""

    def __init__(
        self,
        nc: Client,
        stream: str,
        subject: str,
        cb: Callable[[Msg], Awaitable[None]],
        deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
        watchdog: float = WATCHDOG_S,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.stream = stream
        self.subject = subject
        self.cb = cb
        self.deliver_policy = deliver_policy
        self.watchdog = watchdog
        self.applied = 0  # the last stream sequence handed to cb
        self.resubscribed = 0  # how many times the watchdog had to subscribe again
        self._sub: Any = None
        self._last_msg = time.monotonic()
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Subscribe (once: a start that is retried after a failure does not subscribe
        twice)."""
        if self._sub is None:
            await self._subscribe(None)
        if self._task is None:
            self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self._unsubscribe()

    async def last_seq(self) -> int:
        """The stream's last sequence now (0 when empty)."""
        info = await self.js.stream_info(self.stream)
        return int(info.state.last_seq)

    async def _on_msg(self, msg: Msg) -> None:
        async with self._lock:
            seq = msg.metadata.sequence.stream
            if seq <= self.applied:
                return  # seen before a resubscription
            self.applied = seq
            self._last_msg = time.monotonic()
            await self.cb(msg)

    async def _subscribe(self, start: int | None) -> None:
        config = ConsumerConfig(deliver_policy=self.deliver_policy)
        if start is not None:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
            )
        self._sub = await self.js.subscribe(
            self.subject,
            cb=self._on_msg,
            ordered_consumer=True,
            idle_heartbeat=HEARTBEAT_S,
            stream=self.stream,
            config=config,
            inactive_threshold=FOLLOWER_IDLE,
        )
        self._last_msg = time.monotonic()

    async def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _watch(self) -> None:
        while not await sleep_or_stop(self._stop, self.watchdog / 2):
            try:
                behind = await self.last_seq() > self.applied
            except Exception as exc:  # the server is away: the client reconnects
                log.debug("follower cannot read its stream", stream=self.stream, error=repr(exc))
                continue
            if not behind or time.monotonic() - self._last_msg < self.watchdog:
                continue
            log.warning(
                "follower stalled; subscribing again", stream=self.stream, applied=self.applied
            )
            try:
                await self._unsubscribe()
                await self._subscribe(self.applied + 1)
                self.resubscribed += 1
            except Exception as exc:
                log.warning("follower could not subscribe again", error=repr(exc))


__all__ = ["HEARTBEAT_S", "WATCHDOG_S", "Follower", "follow"]
