"""A single-holder lease in a KV bucket whose TTL the server enforces. The revision at
which the lease was acquired is the fencing token: it only grows from holder to holder,
so a sink can refuse commands from a holder that has been replaced."""

from __future__ import annotations

import asyncio

import structlog
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from gangpreempt.waiting import sleep_or_stop

log = structlog.get_logger("gangpreempt.lease")


class Lease:
    def __init__(self, kv: KeyValue, key: str, holder: str, ttl: float) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder
        self.ttl = ttl
        self.token: int | None = None  # revision at acquisition
        self._revision: int | None = None
        self.lost = asyncio.Event()

    async def acquire(self, stop: asyncio.Event) -> int | None:
        """Wait until the lease is ours (None if ``stop`` is set first)."""
        waited = False
        while not stop.is_set():
            try:
                rev = await self.kv.create(self.key, self.holder.encode())
            except KeyWrongLastSequenceError:
                if not waited:
                    log.info("lease held by another instance; standing by", key=self.key)
                    waited = True
                await sleep_or_stop(stop, max(0.1, self.ttl / 4))
                continue
            except KeyNotFoundError:
                # The client's create looks the key up after a conflict; the holder's
                # lease can expire in between. It is free now: try again at once.
                continue
            self.token = self._revision = rev
            self.lost.clear()
            log.info("lease acquired", key=self.key, fencing_token=rev)
            return rev
        return None

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew every ttl/3 until ``stop``; on any failure set ``lost`` and return."""
        while not await sleep_or_stop(stop, self.ttl / 3):
            try:
                self._revision = await self.kv.update(
                    self.key, self.holder.encode(), last=self._revision
                )
            except (KeyWrongLastSequenceError, KeyNotFoundError, TimeoutError) as exc:
                log.error("lease lost", key=self.key, error=repr(exc))
                self.lost.set()
                return

    async def release(self) -> None:
        if self._revision is None:
            return
        try:
            await self.kv.delete(self.key, last=self._revision)
        except Exception as exc:
            log.warning("lease release failed (it will expire)", error=repr(exc))
        self._revision = None


__all__ = ["Lease"]
