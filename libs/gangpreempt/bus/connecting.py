"""Connecting to NATS, with connection errors logged (never silently printed)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlparse

import nats
import nats.errors
import structlog
from nats.aio.client import Client

from gangpreempt.config import Settings
from gangpreempt.errors import InvalidInput, Transient

log = structlog.get_logger("gangpreempt.bus")
T = TypeVar("T")


async def wait_for_port(url: str, timeout: float = 10.0) -> None:
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 4222
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            _reader, writer = await asyncio.open_connection(host, port)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        except OSError as exc:
            if asyncio.get_running_loop().time() > deadline:
                raise Transient(f"NATS at {url} is not reachable: {exc}") from exc
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def connected(
    url: str,
    name: str,
    *,
    user: str | None = None,
    password: str | None = None,
    patience: float | None = 10.0,
    stop: asyncio.Event | None = None,
    **options: Any,
) -> AsyncIterator[Client]:
    """An open NATS connection, drained on exit. With ``patience`` None it waits for
    NATS as long as it takes (a service started while NATS is down waits for it), or
    until ``stop`` is set (``Stopped``)."""

    async def error_cb(exc: Exception) -> None:
        log.error("nats error", error=str(exc), error_type=type(exc).__name__)

    async def disconnected_cb() -> None:
        log.warning("nats disconnected")

    async def reconnected_cb() -> None:
        log.info("nats reconnected")

    while True:
        if stop is not None and stop.is_set():
            raise Stopped("stopped while waiting for NATS")
        try:
            await wait_for_port(url, patience if patience is not None else 1.0)
        except Transient:
            if patience is not None:
                raise
            continue
        try:
            nc = await nats.connect(
                url,
                name=name,
                user=user,
                password=password,
                error_cb=error_cb,
                disconnected_cb=disconnected_cb,
                reconnected_cb=reconnected_cb,
                max_reconnect_attempts=-1,
                **{"reconnect_time_wait": 0.5, **options},
            )
            break
        except (OSError, nats.errors.Error) as exc:  # gone again between the two
            if patience is not None:
                raise
            log.warning("NATS not reachable yet; waiting", error=repr(exc))
            await asyncio.sleep(0.5)
    try:
        yield nc
    finally:
        if not nc.is_closed:
            with contextlib.suppress(Exception):
                await nc.drain()


def tls_options(ca_file: str | None) -> dict[str, Any]:
    """nats-py's options for a server whose certificate ``ca_file`` signed: TLS from the
    first byte, so that nothing (the password least of all) is ever sent in the clear,
    not even to a server that offers no TLS. ``{}`` without a CA file."""
    if ca_file is None:
        return {}
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidInput(f"GANGPREEMPT_NATS_CA: cannot read {ca_file}: {exc}") from exc
    return {"tls": context, "tls_handshake_first": True}


def connected_with(
    settings: Settings, name: str, **options: Any
) -> contextlib.AbstractAsyncContextManager[Client]:
    """``connected`` to the settings' NATS URL with their credentials (and over TLS when
    they name the server's CA)."""
    return connected(
        settings.nats_url,
        name,
        user=settings.nats_user,
        password=settings.nats_password,
        **{**tls_options(settings.nats_ca), **options},
    )


async def persevering(stop: asyncio.Event, what: str, step: Callable[[], Awaitable[T]]) -> T:
    """``step()`` again and again until it succeeds (NATS may be away while a service
    starts: it waits instead of dying), or ``Stopped`` once ``stop`` is set. Invalid
    input (a manifest that cannot be read, an event too large) is raised at once: trying
    again cannot mend it."""
    delay = 0.2
    while True:
        if stop.is_set():
            raise Stopped(f"stopped while waiting to {what}")
        try:
            return await step()
        except InvalidInput:
            raise
        except Exception as exc:
            log.warning("not done yet; retrying", what=what, error=repr(exc))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(2.0, delay * 2)


class Stopped(Exception):
    """A stop was requested while a service was still starting."""


__all__ = [
    "Stopped",
    "connected",
    "connected_with",
    "persevering",
    "tls_options",
    "wait_for_port",
]
