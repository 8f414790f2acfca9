"""Connecting to NATS, with connection errors logged (never silently printed)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlparse

import nats
import structlog
from nats.aio.client import Client

from gangpreempt.config import Settings
from gangpreempt.errors import Transient

log = structlog.get_logger("gangpreempt.bus")


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
    url: str, name: str, *, user: str | None = None, password: str | None = None, **options: Any
) -> AsyncIterator[Client]:
    """An open NATS connection, drained on exit."""

    async def error_cb(exc: Exception) -> None:
        log.error("nats error", error=str(exc), error_type=type(exc).__name__)

    async def disconnected_cb() -> None:
        log.warning("nats disconnected")

    async def reconnected_cb() -> None:
        log.info("nats reconnected")

    await wait_for_port(url)
    nc = await nats.connect(
        url,
        name=name,
        user=user,
        password=password,
        error_cb=error_cb,
        disconnected_cb=disconnected_cb,
        reconnected_cb=reconnected_cb,
        max_reconnect_attempts=-1,
        **options,
    )
    try:
        yield nc
    finally:
        if not nc.is_closed:
            with contextlib.suppress(Exception):
                await nc.drain()


def connected_with(
    settings: Settings, name: str, **options: Any
) -> contextlib.AbstractAsyncContextManager[Client]:
    """``connected`` to the settings' NATS URL with their credentials."""
    return connected(
        settings.nats_url,
        name,
        user=settings.nats_user,
        password=settings.nats_password,
        **options,
    )


__all__ = ["connected", "connected_with", "wait_for_port"]
