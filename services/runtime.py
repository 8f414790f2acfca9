"""What every service shares: settings, logging and tracing, one NATS connection,
provisioned streams, a publisher, and a stop event set by SIGTERM / SIGINT.

SIGTERM is a normal event: the consumer loops stop fetching, finish (or nak) the message
in hand, the connection drains, spans are flushed, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import os
import signal
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import structlog
from nats.aio.client import Client

from gangpreempt.bus import Publisher, Topology, connected, provision
from gangpreempt.config import Settings
from gangpreempt.telemetry import setup_logging, setup_tracing, shutdown_tracing

log = structlog.get_logger("gangpreempt.service")


class ServiceContext:
    def __init__(self, service: str, settings: Settings, nc: Client, stop: asyncio.Event) -> None:
        self.service = service
        self.settings = settings
        self.nc = nc
        self.js = nc.jetstream()
        self.topology = Topology(settings.prefix)
        self.publisher = Publisher(nc, self.topology, service)
        self.stop = stop

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)


Main = Callable[[ServiceContext], Awaitable[None]]


async def run_service(service: str, settings: Settings, main: Main) -> None:
    profile_dir = os.environ.get("GANGPREEMPT_PROFILE")
    if profile_dir:  # a developer's switch: cProfile the service, dump on exit
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            await _run_service(service, settings, main)
        finally:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"{service}.prof"))
        return
    await _run_service(service, settings, main)


async def _run_service(service: str, settings: Settings, main: Main) -> None:
    setup_logging(service, settings.log_level)
    setup_tracing(service)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with connected(
            settings.nats_url,
            f"gangpreempt-{service}",
            user=settings.nats_user,
            password=settings.nats_password,
        ) as nc:
            ctx = ServiceContext(service, settings, nc, stop)
            await provision(ctx.js, ctx.topology, lease_ttl=settings.lease_ttl)
            log.info("started", prefix=settings.prefix, nats=settings.nats_url)
            await main(ctx)
    finally:
        shutdown_tracing()
        log.info("stopped")


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep; True if ``stop`` was set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()


__all__ = ["Main", "ServiceContext", "run_service", "sleep_or_stop"]
