"""List + watch, one loop per resource, into a store of the raw objects.

Each loop lists (in pages), then watches from the list's resourceVersion with bookmarks,
re-watching from the last version seen when the server ends a watch. A 410 Gone (the
version was compacted away) or any error relists; so does the clock every
``relist_interval``, so a missed event cannot last.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from gangpreempt.errors import Transient
from gangpreempt.waiting import sleep_or_stop
from services.kube.access import Resource
from services.kube.client import JSON, ApiError, KubeApi, path_of

log = structlog.get_logger("gangpreempt.ingest")

PAGE = 500
WATCH_SECONDS = 300  # one watch request at most (the server may end it sooner)
BACKOFF_MAX = 30.0
QUICK_END = 1.0  # a watch that ends sooner with no event is re-opened after this long

Key = tuple[str, str]  # (namespace, name)


class Expired(Exception):
    """The resourceVersion we watch from is gone (410): relist."""


class ObjectStore:
    """The raw objects as last listed or watched, per resource; ``changed`` is set on
    every change, ``synced`` holds the resources listed at least once."""

    def __init__(self) -> None:
        self.objects: dict[Resource, dict[Key, JSON]] = {}
        self.synced: set[Resource] = set()
        self.changed = asyncio.Event()
        self.relists = 0  # full lists done (for tests and logs)

    def replace(self, resource: Resource, items: dict[Key, JSON]) -> None:
        if self.objects.get(resource) != items:
            self.changed.set()
        self.objects[resource] = items
        self.synced.add(resource)
        self.relists += 1

    def put(self, resource: Resource, obj: JSON) -> None:
        self.objects.setdefault(resource, {})[_key(obj)] = _trimmed(obj)
        self.changed.set()

    def remove(self, resource: Resource, obj: JSON) -> None:
        if self.objects.get(resource, {}).pop(_key(obj), None) is not None:
            self.changed.set()

    def all_objects(self) -> list[tuple[tuple[Resource, str, str], str, JSON]]:
        """Every object, as ((resource, namespace, name), resourceVersion, object)."""
        return [
            ((resource, *key), _rv(obj), obj)
            for resource, items in self.objects.items()
            for key, obj in items.items()
        ]


def _trimmed(obj: JSON) -> JSON:
    """What the decoders never read, dropped to keep the store small."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


def _key(obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv(obj: Any) -> str:
    if not isinstance(obj, dict):
        return ""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Reflector:
    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        version: str,
        store: ObjectStore,
        relist_interval: float,
    ) -> None:
        self.api = api
        self.resource = resource
        self.version = version
        self.store = store
        self.relist_interval = relist_interval
        group = resource.group
        self.api_version = f"{group}/{version}" if group else version

    async def list(self) -> str:
        """List every object (page by page); returns the list's resourceVersion."""
        items: dict[Key, JSON] = {}
        scope = (
            {"fieldSelector": self.resource.field_selector} if self.resource.field_selector else {}
        )
        query = {"limit": str(PAGE), **scope}
        path = path_of(self.resource, self.version, self.resource.namespace or None)
        while True:
            page = await self.api.request("GET", self.resource, "list", path, query=query)
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    # A list's items carry no kind and apiVersion: the decoders need them.
                    item.setdefault("apiVersion", self.api_version)
                    item.setdefault("kind", self.resource.kind)
                    items[_key(item)] = _trimmed(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                self.store.replace(self.resource, items)
                return str(meta.get("resourceVersion") or "")
            query = {"limit": str(PAGE), "continue": str(token), **scope}

    async def watch(self, since: str, until: float, stop: asyncio.Event) -> None:
        """Watch from ``since`` until the clock reaches ``until`` (then a relist is due)."""
        rv = since
        while not stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return
            seconds = min(WATCH_SECONDS, int(left) + 1)
            events = self.api.watch(self.resource, self.version, rv, seconds)
            opened, received = time.monotonic(), 0
            async for event in events:
                received += 1
                kind = event.get("type")
                obj = event.get("object")
                if kind == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if code == 410:
                        raise Expired(str(obj.get("message", "")) if isinstance(obj, dict) else "")
                    raise Transient(f"watch {self.resource.plural}: error event {obj!r}")
                if not isinstance(obj, dict):
                    continue
                rv = _rv(obj) or rv
                if kind == "BOOKMARK":
                    continue
                obj.setdefault("apiVersion", self.api_version)
                obj.setdefault("kind", self.resource.kind)
                if kind in ("ADDED", "MODIFIED"):
                    self.store.put(self.resource, obj)
                elif kind == "DELETED":
                    self.store.remove(self.resource, obj)
                if stop.is_set():
                    return
            if received == 0 and time.monotonic() - opened < QUICK_END:
                # Ended at once with nothing (a proxy, a server shutting down): not in a
                # tight loop.
                await sleep_or_stop(stop, QUICK_END)

    async def run(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                since = await self.list()
                failures = 0
                await self.watch(since, time.monotonic() + self.relist_interval, stop)
            except Expired as exc:
                log.info(
                    "watch expired (410): relisting", resource=self.resource.plural, detail=str(exc)
                )
            except ApiError as exc:
                if exc.status == 410:
                    log.info("list expired (410): relisting", resource=self.resource.plural)
                    continue
                if exc.status == 403 and self.resource not in self.store.synced:
                    # Not granted (e.g. the Role for Kueue's ConfigMap was not applied):
                    # the rest of the cluster is published without it; tried again later.
                    self.store.replace(self.resource, {})
                failures += 1
                log.warning("list/watch failed", resource=self.resource.plural, error=str(exc))
                if await sleep_or_stop(stop, min(BACKOFF_MAX, 0.5 * 2**failures)):
                    return
            except Transient as exc:
                failures += 1
                log.warning("list/watch interrupted", resource=self.resource.plural, error=str(exc))
                if await sleep_or_stop(stop, min(BACKOFF_MAX, 0.5 * 2**failures)):
                    return


__all__ = ["Expired", "ObjectStore", "Reflector"]
