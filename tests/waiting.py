"""Waiting in tests: on a condition, with a deadline, never a fixed sleep standing in for
readiness (a busy CI machine makes every fixed sleep too short some day)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(check: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    """Return once ``check()`` is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(0.02)


__all__ = ["until"]
