"""The garbage collector's pauses, measured: each collection's duration goes to
``gangpreempt_gc_pause_seconds{generation}``, and one of at least ``LONG_PAUSE_S`` is
logged (a full collection over a large state stops the service's loop for that long,
whatever it was deciding)."""

from __future__ import annotations

import gc
import time
from typing import Any

import structlog

from gangpreempt.telemetry.metrics import GC_PAUSE_SECONDS

log = structlog.get_logger("gangpreempt.gc")

LONG_PAUSE_S = 0.05


class PauseWatch:
    """A ``gc.callbacks`` entry timing each collection from its start to its stop."""

    def __init__(self) -> None:
        self.started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        took = time.perf_counter() - self.started
        generation = int(info.get("generation", 0))
        GC_PAUSE_SECONDS.labels(str(generation)).observe(took)
        if took >= LONG_PAUSE_S:
            log.info(
                "long garbage collection",
                generation=generation,
                ms=round(took * 1000, 1),
                collected=info.get("collected", 0),
            )


def watch_gc_pauses() -> PauseWatch:
    """Start timing the collections of this process (once: a second call is a no-op)."""
    for callback in gc.callbacks:
        if isinstance(callback, PauseWatch):
            return callback
    watch = PauseWatch()
    gc.callbacks.append(watch)
    return watch


__all__ = ["LONG_PAUSE_S", "PauseWatch", "watch_gc_pauses"]
