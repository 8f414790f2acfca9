"""Waiting that a stop request cuts short."""

from __future__ import annotations

import asyncio
import contextlib


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep; True if ``stop`` was set meanwhile (or already)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()


__all__ = ["sleep_or_stop"]
