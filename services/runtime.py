"""What every service shares: settings, logging and tracing, one NATS connection,
provisioned streams, a publisher, and a stop event set by SIGTERM / SIGINT.

SIGTERM is a normal event: the consumer loops stop fetching, finish (or nak) the message
in hand, the connection drains, spans are flushed, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import signal
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
from nats.aio.client import Client

from gangpreempt.bus import Consumer, Publisher, Topology, connected_with, provision_with
from gangpreempt.bus.connecting import Stopped, persevering
from gangpreempt.bus.consumers import consumer_subjects
from gangpreempt.bus.consuming import Handler
from gangpreempt.bus.permissions import inbox_prefix
from gangpreempt.config import Settings
from gangpreempt.telemetry import setup_logging, setup_tracing, shutdown_tracing
from gangpreempt.telemetry.gcpauses import watch_gc_pauses
from gangpreempt.waiting import sleep_or_stop
from services.health import health_endpoint

log = structlog.get_logger("gangpreempt.service")
T = TypeVar("T")


_reached: dict[str, int] = {}


def fault(point: str) -> None:
    """Test hook: ``GANGPREEMPT_FAULT=<point>`` kills this process with SIGKILL the first
    time it reaches ``point``, ``<point>#N`` the Nth time, ``pause:<point>[#N]`` stops it
    there with SIGSTOP (until someone sends SIGCONT): the chaos and e2e tests crash or
    pause a service mid-saga with it, at a point and a moment of their choosing."""
    wanted = os.environ.get("GANGPREEMPT_FAULT", "")
    if not wanted:
        return
    pause = wanted.startswith("pause:")
    where, _, nth = wanted.removeprefix("pause:").partition("#")
    if where != point:
        return
    _reached[point] = _reached.get(point, 0) + 1
    if _reached[point] != (int(nth) if nth else 1):
        return
    if pause:
        os.environ.pop("GANGPREEMPT_FAULT")  # once
        log.warning("fault injected: SIGSTOP", point=point, reached=_reached[point])
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        log.warning("fault injected: SIGKILL", point=point, reached=_reached[point])
        os.kill(os.getpid(), signal.SIGKILL)


class ServiceContext:
    def __init__(self, service: str, settings: Settings, nc: Client, stop: asyncio.Event) -> None:
        self.service = service
        self.settings = settings
        self.nc = nc
        self.js = nc.jetstream()
        self.topology = Topology(settings.prefix)
        self.publisher = Publisher(nc, self.topology, service)
        self.stop = stop
        # Conditions a service adds to /readyz beyond "connected and started" (ingest:
        # its first full state is published).
        self.readiness: list[Callable[[], bool]] = []

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)

    async def persevering(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """``step()`` until it succeeds (NATS may be away while the service starts)."""
        return await persevering(self.stop, what, step)

    def decisions_consumer(self, handler: Handler, **options: Any) -> Consumer:
        """This service's durable consumer on the decisions stream (``bus.consumers``:
        provisioned beforehand, the service only binds to it)."""
        return Consumer(
            self.nc,
            self.topology,
            self.service,
            durable=self.topology.durable(self.service),
            stream=self.topology.decisions_stream,
            subjects=consumer_subjects(self.topology, self.service),
            handler=handler,
            bind=True,
            **options,
        )


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
    watch_gc_pauses()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready: list[ServiceContext] = []  # the context, once the service has started its work

    def is_ready() -> bool:
        return bool(ready) and ready[0].nc.is_connected and all(c() for c in ready[0].readiness)

    try:
        async with (
            health_endpoint(settings.health_port, is_ready),
            connected_with(
                settings,
                f"gangpreempt-{service}",
                inbox_prefix=inbox_prefix(service),
                patience=None,
                stop=stop,
            ) as nc,
        ):
            ctx = ServiceContext(service, settings, nc, stop)
            if settings.provision:
                await persevering(stop, "provision", lambda: provision_with(ctx.js, settings))
            log.info("started", prefix=settings.prefix, nats=settings.nats_url)
            ready.append(ctx)
            await main(ctx)
    except Stopped as exc:
        log.info("stopped before it started", reason=str(exc))
    finally:
        shutdown_tracing()
        log.info("stopped")


__all__ = ["Main", "ServiceContext", "fault", "run_service", "sleep_or_stop"]
