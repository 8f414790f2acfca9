"""The garbage collector and a service's large, long-lived state.

A replica of 5,000 nodes and 50,000 pods, with the ledger and node index beside it, is
hundreds of thousands of objects that live as long as the service. The collector's full
collections scan every one of them: while the starting state streams in (a full
collection each time the heap has grown by a quarter), and then at the first full
collection after it, which falls in a decision (250 ms of a gang's first decision at
5,000 nodes, against 6 ms for the next ones).

So what is alive is frozen (``gc.freeze``: out of every later collection): every
``FREEZE_EVERY`` changes while the starting state loads, and once, after a collection,
when it is complete. Objects made later are collected as usual. A frozen object's memory
is still freed when its last reference goes; only a reference cycle among frozen objects
would stay (a replica's objects hold none).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import structlog

from gangpreempt.replica import StateReplica

log = structlog.get_logger("gangpreempt.heap")

FREEZE_EVERY = 20_000  # state changes between two freezes while the starting state loads


def freeze_heap() -> None:
    """Collect, then take everything alive out of the later collections."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info(
        "heap frozen",
        objects=gc.get_freeze_count(),
        ms=round((time.perf_counter() - started) * 1000, 1),
    )


class LoadFreezer:
    """Follows a replica's changes: freezes what the load made so far every
    ``FREEZE_EVERY`` changes until the starting state is complete, then freezes once more
    after a collection (``freeze_heap``). Listen after the service's own listeners, so
    that what they build on completion (a node index) is frozen with the rest."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        self.every = every
        self.loading = True
        self.changes = 0

    def __call__(self, kind: str, _old: Any, _new: Any) -> None:
        if not self.loading:
            return
        if kind == "StateComplete":
            self.loading = False
            freeze_heap()
            return
        self.changes += 1
        if self.changes % self.every == 0:
            gc.freeze()  # no collection: a load makes next to no garbage cycles


def freeze_while_loading(replica: StateReplica) -> LoadFreezer:
    freezer = LoadFreezer()
    replica.on_change(freezer)
    return freezer


__all__ = ["FREEZE_EVERY", "LoadFreezer", "freeze_heap", "freeze_while_loading"]
