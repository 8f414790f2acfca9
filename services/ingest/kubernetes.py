"""The ``kubernetes`` source: list + watch every kind gangpreempt reads that the API
server serves, and publish the state the manifest decoders make of the raw objects.

Nothing is published until every served resource has been listed once (a partial
cluster would look emptier than it is). Then each batch of watch events (gathered for
``BATCH_DELAY``) is decoded as a whole and only the objects whose model changed are
published; every ``relist_interval`` the resources are relisted and the whole state is
republished, so a lost or diverged STATE stream heals. An object the decoders reject is
left out and logged, naming the object and the field; the rest goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gangpreempt.config import Settings
from gangpreempt.errors import Transient
from gangpreempt.manifests.objects import ObjectCache
from gangpreempt.telemetry import metrics
from gangpreempt.waiting import sleep_or_stop
from services.ingest.sources import Differ
from services.kube.access import WATCHED
from services.kube.client import ApiError, KubeApi
from services.kube.discovery import Served, discover
from services.kube.watching import ObjectStore, Reflector

log = structlog.get_logger("gangpreempt.ingest")

BATCH_DELAY = 0.1  # seconds to gather watch events before decoding (at least)
SYNC_REPORT = 30.0  # seconds between reports of resources not listed yet
ORIGIN = "kubernetes"

Key = tuple[str, str]  # (kind, key)
Publish = Callable[[list[Any], list[Key]], Awaitable[None]]
OnStream = Callable[[], Awaitable[set[Key]]]


class KubeSource:
    """``on_stream`` (optional) says which objects the STATE stream holds: at each full
    republish, those no longer in the cluster are deleted again (a lost deletion, or one
    made while ingest was down, heals too)."""

    def __init__(self, settings: Settings, on_stream: OnStream | None = None) -> None:
        self.settings = settings
        self.on_stream = on_stream
        self.store = ObjectStore()
        self.differ = Differ()
        self.cache = ObjectCache(ORIGIN)  # an object is decoded again only when it changed
        self.rejected: set[str] = set()
        self.warnings: set[str] = set()
        self.served: Served = {}
        self.published = asyncio.Event()  # the first full state is out
        self.decode_seconds = 0.0  # how long the last decode took

    async def _discover(self, api: KubeApi, stop: asyncio.Event) -> bool:
        failures = 0
        while not stop.is_set():
            try:
                self.served = await discover(api, WATCHED)
            except (ApiError, Transient) as exc:
                failures += 1
                log.warning("discovery failed", error=str(exc))
                if await sleep_or_stop(stop, min(30.0, 0.5 * 2**failures)):
                    return False
                continue
            missing = [f"{r.group or 'core'}/{r.plural}" for r in WATCHED if r not in self.served]
            log.info(
                "kubernetes resources found",
                watching=[f"{r.group or 'core'}/{v}/{r.plural}" for r, v in self.served.items()],
                not_served=missing,
            )
            return True
        return False

    def _decode(self, objects: list[Any], everything: bool) -> tuple[list[Any], list[Key]]:
        loaded = self.cache.load(objects)
        rejected = set(loaded.rejected)
        warnings = set(loaded.warnings)
        # New ones at once; all of them again at each full relist, so an object that
        # cannot be read stays visible in the logs until it is fixed.
        for error in sorted(rejected if everything else rejected - self.rejected):
            log.error("object rejected; left out of the state", error=error)
        for warning in sorted(warnings if everything else warnings - self.warnings):
            log.warning("object read with a warning", warning=warning)
        self.rejected, self.warnings = rejected, warnings
        return self.differ.diff(loaded.state, everything=everything)

    async def decode(self, everything: bool) -> tuple[list[Any], list[Key]]:
        """The changes since the last decode (everything, and the stream's leftovers,
        with ``everything``). The decode runs in a thread: on a large cluster it takes
        a while, and the event loop keeps serving NATS, the watches and the probes."""
        started = time.monotonic()
        objects = self.store.all_objects()
        upserts, deletes = await asyncio.to_thread(self._decode, objects, everything)
        self.decode_seconds = time.monotonic() - started
        metrics.DECODE_SECONDS.labels("kubernetes").observe(self.decode_seconds)
        if everything:
            metrics.RELISTS.labels("kubernetes").inc()
        if everything and self.on_stream is not None:
            try:
                leftovers = await self.on_stream() - self.differ.keys() - set(deletes)
            except Transient as exc:
                log.warning("could not read the STATE stream's objects", error=str(exc))
            else:
                deletes = [*deletes, *sorted(leftovers)]
        return upserts, deletes

    async def _synced(self, stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> bool:
        started = time.monotonic()
        reported = started
        while not stop.is_set():
            _surface(tasks)
            if all(r in self.store.synced for r in self.served):
                return True
            if time.monotonic() - reported >= SYNC_REPORT:
                reported = time.monotonic()
                log.warning(
                    "waiting for the first list of",
                    resources=[r.plural for r in self.served if r not in self.store.synced],
                    waited=round(reported - started),
                )
            if await sleep_or_stop(stop, 0.05):
                return False
        return False

    async def run(self, stop: asyncio.Event, publish: Publish) -> None:
        async with KubeApi.connect(self.settings, "ingest") as api:
            if not await self._discover(api, stop):
                return
            interval = self.settings.relist_interval
            reflectors = [
                Reflector(api, r, v, self.store, interval) for r, v in self.served.items()
            ]
            tasks = [asyncio.create_task(r.run(stop)) for r in reflectors]
            try:
                await self._publish_loop(stop, publish, interval, tasks)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _publish_loop(
        self,
        stop: asyncio.Event,
        publish: Publish,
        interval: float,
        tasks: list[asyncio.Task[None]],
    ) -> None:
        if not await self._synced(stop, tasks):
            return
        self.store.changed.clear()
        await publish(*await self.decode(everything=True))
        self.published.set()
        next_republish = time.monotonic() + interval
        while not stop.is_set():
            _surface(tasks)
            wait = max(0.0, next_republish - time.monotonic())
            changed = asyncio.ensure_future(self.store.changed.wait())
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({changed, stopped}, timeout=wait, return_when="FIRST_COMPLETED")
            changed.cancel()
            stopped.cancel()
            if stop.is_set():
                return
            republish = time.monotonic() >= next_republish
            # Gather for at least as long as the last decode took: decoding then takes at
            # most about half of the time however fast the cluster changes.
            gather = max(BATCH_DELAY, self.decode_seconds)
            if not republish and await sleep_or_stop(stop, gather):
                return
            self.store.changed.clear()
            upserts, deletes = await self.decode(everything=republish)
            if republish:
                next_republish = time.monotonic() + interval
                log.info("periodic republish", objects=len(upserts))
            if upserts or deletes:
                await publish(upserts, deletes)


def _surface(tasks: list[asyncio.Task[None]]) -> None:
    """A reflector that crashed is a bug: raise it here, so ingest stops (and restarts)
    instead of waiting for a list that will never come."""
    for t in tasks:
        crashed = t.exception() if t.done() and not t.cancelled() else None
        if crashed is not None:
            raise crashed


__all__ = ["KubeSource"]
