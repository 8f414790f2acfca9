"""The sim cluster's journal: what the sim must not forget when ingest is killed, beside
the world itself (which STATE holds): when the scenario started, which timeline steps
have fired, and every eviction applied, written (and fsynced) before the eviction is.

A restarted ingest whose journal exists rebuilds the world from STATE and the journal
instead of publishing the scenario again, as an API server restarts on its store; if
the journal does not say the starting state was stored whole (ingest died while
publishing it), the restarted one publishes the objects STATE does not have yet. The
eviction lines are also the record the chaos checker reads: one line per eviction the
sim applied, with its plan, token and the lease token it checked against.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec


class EvictionEntry(msgspec.Struct, frozen=True):
    at: float  # wall clock, seconds
    plan_id: str
    ref: str
    uid: str
    fencing_token: int
    lease_token: int  # the lease's token when the sim checked it
    pods: tuple[str, ...] = ()
    pod_uids: tuple[str, ...] = ()


class Line(msgspec.Struct, frozen=True, omit_defaults=True):
    start: float | None = None
    loaded: float | None = None  # the whole starting state is stored on STATE
    fired: int | None = None
    evict: EvictionEntry | None = None


class Journal:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def lines(self) -> list[Line]:
        """Every line written (a torn last line, from a kill mid-write, is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for raw in self.path.read_bytes().splitlines():
            try:
                out.append(msgspec.json.decode(raw, type=Line))
            except msgspec.DecodeError:
                continue
        return out

    def write(self, **fields: Any) -> None:
        self.write_many([Line(**fields)])

    def write_many(self, lines: list[Line]) -> None:
        """Append ``lines`` with one write and one fsync."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = b"".join(msgspec.json.encode(line) + b"\n" for line in lines)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def evictions(path: str) -> list[EvictionEntry]:
    return [line.evict for line in Journal(path).lines() if line.evict is not None]


__all__ = ["EvictionEntry", "Journal", "Line", "evictions"]
