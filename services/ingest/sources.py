"""The ``manifests`` source: a file or folder, re-read when it changes, yielding only
the objects that changed."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import msgspec
import structlog

from gangpreempt.errors import ManifestError
from gangpreempt.manifests import load
from gangpreempt.manifests.yamlio import yaml_files
from gangpreempt.model import kinds
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.workloads import Workload
from gangpreempt.telemetry import metrics
from services.ingest.timeline import TIMELINE

log = structlog.get_logger("gangpreempt.ingest")

Fingerprint = tuple[tuple[str, int, int], ...]


class ManifestSource:
    def __init__(self, path: str, exclude: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.exclude = frozenset(os.path.abspath(p) for p in exclude)
        self._fingerprint: Fingerprint = ()
        self._seen: Fingerprint = ()  # the files at the previous poll
        self.differ = Differ()

    def files(self) -> list[str]:
        return [
            f
            for f in yaml_files(self.path)
            if os.path.basename(f) != TIMELINE and os.path.abspath(f) not in self.exclude
        ]

    def fingerprint(self) -> Fingerprint:
        out = []
        for f in self.files():
            try:
                st = os.stat(f)
            except FileNotFoundError:
                continue  # deleted since the folder was listed: it is gone
            out.append((f, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def read(self) -> ClusterState:
        files = self.files()
        if not files:
            return ClusterState()  # an emptied folder: everything was deleted
        # A file the timeline applies is read alone: its classes are in the live state.
        loaded = load(files, references=False)
        for warning in loaded.warnings:
            log.warning("manifest warning", warning=warning)
        return loaded.state

    def forget(self) -> None:
        """The last changes did not reach the bus: the next poll finds them again."""
        self._fingerprint = self._seen = ()
        self.differ.rollback()

    def changes(self, force: bool = False) -> tuple[list[Any], list[tuple[str, str]]] | None:
        """(upserted objects, deleted (kind, key)) since the last call, or None when the
        files did not change. A manifest error is logged and the last good state kept (at
        start, with ``force``, it is raised)."""
        try:
            fp = self.fingerprint()
        except ManifestError as exc:
            if force:
                raise
            log.error("manifests unreadable; keeping the previous state", error=str(exc))
            return None
        if not force:
            stable = fp == self._seen  # unchanged since the last poll: not being written
            self._seen = fp
            if not stable or fp == self._fingerprint:
                return None
        self._fingerprint = self._seen = fp
        started = time.perf_counter()
        try:
            state = self.read()
        except ManifestError as exc:
            if force:
                raise
            log.error("manifests rejected; keeping the previous state", error=str(exc))
            return None
        metrics.DECODE_SECONDS.labels("manifests").observe(time.perf_counter() - started)
        metrics.RELISTS.labels("manifests").inc()
        return self.differ.diff(state)


def digest(body: bytes) -> bytes:
    """What the differ keeps of an encoded body: 16 bytes that change when it does
    (BLAKE2b), not the body itself (200,000 objects' bodies are ~100 MiB)."""
    return hashlib.blake2b(body, digest_size=16).digest()


class Differ:
    """What changed between the states it is shown: the objects whose encoded body
    differs (all of them with ``everything``), and the ones gone. An object that cannot
    be encoded (a number past int64 no reader bounded) is left out, and logged once."""

    def __init__(self) -> None:
        self._bodies: dict[tuple[str, str], bytes] = {}  # digests of the encoded bodies
        # The objects last shown: the same (frozen) object again is unchanged, not
        # encoded again (the kubernetes source's cache hands back the same objects).
        self._objects: dict[tuple[str, str], Any] = {}
        self._previous: tuple[dict[tuple[str, str], bytes], dict[tuple[str, str], Any]] = ({}, {})
        self._unencodable: dict[tuple[str, str], Any] = {}  # left out at the last diff

    def rollback(self) -> None:
        """Back to the state shown before the last ``diff``."""
        self._bodies, self._objects = self._previous

    def keys(self) -> set[tuple[str, str]]:
        """(kind, key) of every object of the last state shown."""
        return set(self._bodies)

    def diff(
        self, state: ClusterState, everything: bool = False
    ) -> tuple[list[Any], list[tuple[str, str]]]:
        bodies: dict[tuple[str, str], bytes] = {}
        objects: dict[tuple[str, str], Any] = {}
        unencodable: dict[tuple[str, str], Any] = {}
        upserts = []
        for obj in kinds.objects(state):
            k = (kinds.kind_of(obj), kinds.key_of(obj))
            objects[k] = obj
            if self._objects.get(k) is obj:
                bodies[k] = self._bodies[k]
                if everything:
                    upserts.append(obj)
                continue
            try:
                body = digest(kinds.encode_object(obj))
            except (OverflowError, msgspec.EncodeError) as exc:
                # A number past what the model encodes (int64) that no reader bounded:
                # the object is left out, as one the decoders reject; the rest goes on.
                if self._unencodable.get(k) is not obj:  # said once per version
                    ref = f"{k[0]}/{k[1]}"
                    log.error("object cannot be encoded; left out", object=ref, error=repr(exc))
                unencodable[k] = obj
                del objects[k]
                continue
            bodies[k] = body
            if everything or self._bodies.get(k) != body:
                upserts.append(obj)
        deletes = [k for k in self._bodies if k not in bodies]
        self._previous = (self._bodies, self._objects)
        self._bodies = bodies
        self._objects = objects
        self._unencodable = unencodable
        # Queues and flavors first, then workloads holding quota, then pending ones: a
        # reader that sees only part of the change never sees a pending workload without
        # the usage it competes with.
        upserts.sort(key=_publish_order)
        return upserts, deletes


_KIND_ORDER = {kind: i for i, kind in enumerate(kinds.KINDS)}


def _publish_order(obj: Any) -> tuple[int, int]:
    pending = 1 if isinstance(obj, Workload) and not obj.holds_quota else 0
    return _KIND_ORDER[kinds.kind_of(obj)], pending


__all__ = ["Differ", "ManifestSource"]
