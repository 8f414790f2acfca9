"""A single-holder lease in a KV bucket whose TTL the server enforces.

The revision at which the lease was acquired is the fencing token: it only grows from
holder to holder. The key's value names the holder and its token (``<holder> <token>``),
so a sink can check the token of a command against the lease as it is now, not only
against the highest token it has seen.

The holder renews every ttl/3. It counts its lease as valid until ``ttl - margin``
after the last renewal it *sent* (the server expires the key ``ttl`` after it stored
that renewal, which is later), on its monotonic clock: a process that was paused past
its lease finds it invalid the moment it runs again, before any write, without asking
the server. A renewal that times out is retried until that deadline; a renewal that
finds another revision (the key expired, or another holder has it) loses the lease.
"""

from __future__ import annotations

import asyncio
import time

import nats.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from gangpreempt.bus.following import Follower
from gangpreempt.errors import Fenced
from gangpreempt.waiting import sleep_or_stop

log = structlog.get_logger("gangpreempt.lease")

# A NATS call that did not get through: retried while the lease is still valid.
_AWAY = (TimeoutError, nats.errors.Error, OSError)


def lease_value(holder: str, token: int) -> bytes:
    return f"{holder} {token}".encode()


def parse_lease(value: bytes | None) -> tuple[str, int] | None:
    """(holder, token) of a lease value, None while it carries no token yet."""
    holder, _, token = (value or b"").decode(errors="replace").rpartition(" ")
    if not holder or not token.isdigit():
        return None
    return holder, int(token)


async def current_token(kv: KeyValue, key: str, timeout: float = 2.0) -> int | None:
    """The fencing token of whoever holds the lease now (None: nobody)."""
    try:
        entry = await asyncio.wait_for(kv.get(key), timeout)
    except KeyNotFoundError:
        return None
    parsed = parse_lease(entry.value)
    return parsed[1] if parsed is not None else None


class LeaseView:
    """Who holds a lease now, as a sink that checks commands against it sees it: a
    followed copy of the key (no read per command), read again from the bucket when a
    command's token differs from the copy (the copy may only lag: a new holder's first
    command can come before its acquisition does)."""

    def __init__(self, nc: Client, bucket: str, key: str) -> None:
        self.bucket = bucket
        self.key = key
        self.token: int | None = None  # the followed copy
        self._kv: KeyValue | None = None
        self._follower = Follower(
            nc, f"KV_{bucket}", f"$KV.{bucket}.{key}", self._on_msg, DeliverPolicy.LAST_PER_SUBJECT
        )
        self._nc = nc

    async def _on_msg(self, msg: Msg) -> None:
        gone = (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE")
        parsed = None if gone else parse_lease(msg.data)
        self.token = parsed[1] if parsed is not None else None

    async def start(self) -> None:
        self._kv = await self._nc.jetstream().key_value(self.bucket)
        await self._follower.start()

    async def stop(self) -> None:
        await self._follower.stop()

    async def current(self, token: int) -> int | None:
        """The lease's token now, for a command that carries ``token`` (None: nobody
        holds it, or it cannot be read)."""
        if token == self.token or self._kv is None:
            return self.token
        try:
            return await current_token(self._kv, self.key)
        except Exception:  # NATS away: the followed copy is all there is
            return self.token


class Lease:
    def __init__(self, kv: KeyValue, key: str, holder: str, ttl: float) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder
        self.ttl = ttl
        self.margin = max(0.1, ttl * 0.2)
        self.token: int | None = None  # revision at acquisition
        self._revision: int | None = None
        self._valid_until = 0.0
        self.lost = asyncio.Event()

    # -- holding -------------------------------------------------------------------------
    def valid(self) -> bool:
        """Held, and not past its deadline on this process's clock."""
        return (
            self.token is not None
            and not self.lost.is_set()
            and time.monotonic() < self._valid_until
        )

    def check(self) -> int:
        """The token, or ``Fenced`` when this process may no longer act under it."""
        if not self.valid():
            raise Fenced(f"lease {self.key} (token {self.token}) is no longer ours")
        assert self.token is not None
        return self.token

    async def acquire(self, stop: asyncio.Event) -> int | None:
        """Wait until the lease is ours (None if ``stop`` is set first)."""
        waited = False
        self.token = None
        while not stop.is_set():
            sent = time.monotonic()
            try:
                rev = await asyncio.wait_for(
                    self.kv.create(self.key, self.holder.encode()), max(1.0, self.ttl)
                )
                # The value names the token, for sinks that check the lease itself.
                self._revision = await asyncio.wait_for(
                    self.kv.update(self.key, lease_value(self.holder, rev), last=rev),
                    max(1.0, self.ttl),
                )
            except (KeyWrongLastSequenceError, KeyNotFoundError):
                # Held by another instance (the client's look-up after a conflict may also
                # find the key expired in between: then it is free, try again soon).
                if not waited:
                    log.info("lease held by another instance; standing by", key=self.key)
                    waited = True
                await sleep_or_stop(stop, max(0.05, self.ttl / 8))
                continue
            except _AWAY as exc:
                log.warning("lease: NATS did not answer; trying again", error=repr(exc))
                await sleep_or_stop(stop, 0.2)
                continue
            self.token = rev
            self._valid_until = sent + self.ttl - self.margin
            self.lost.clear()
            log.info("lease acquired", key=self.key, fencing_token=rev)
            return rev
        return None

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew every ttl/3 until ``stop``; once the lease is lost, set ``lost`` and
        return."""
        while not await sleep_or_stop(stop, self.ttl / 3):
            while True:
                outcome = await self._renew()
                if outcome is True:
                    break
                if outcome is False or time.monotonic() >= self._valid_until:
                    log.error("lease lost", key=self.key, fencing_token=self.token)
                    self.lost.set()
                    return
                if await sleep_or_stop(stop, min(0.2, self.ttl / 10)):
                    return

    async def _renew(self) -> bool | None:
        """True: renewed; False: lost; None: NATS did not answer (try again)."""
        assert self.token is not None
        value = lease_value(self.holder, self.token)
        sent = time.monotonic()
        try:
            self._revision = await asyncio.wait_for(
                self.kv.update(self.key, value, last=self._revision), self.ttl / 3
            )
        except KeyWrongLastSequenceError:
            # Our previous renewal may have been stored with its answer lost: the key
            # then still holds our value under a revision we have not seen.
            try:
                entry = await asyncio.wait_for(self.kv.get(self.key), self.ttl / 3)
            except KeyNotFoundError:
                return False
            except _AWAY:
                return None
            if entry.value != value:
                return False
            self._revision = entry.revision
            return None
        except KeyNotFoundError:
            return False
        except _AWAY as exc:
            log.warning("lease renewal did not get through", error=repr(exc))
            return None
        self._valid_until = sent + self.ttl - self.margin
        return True

    async def release(self) -> None:
        if self._revision is None:
            return
        try:
            await asyncio.wait_for(self.kv.delete(self.key, last=self._revision), 2.0)
        except Exception as exc:
            log.warning("lease release failed (it will expire)", error=repr(exc))
        self._revision = None
        self.token = None


__all__ = ["Lease", "LeaseView", "current_token", "lease_value", "parse_lease"]
