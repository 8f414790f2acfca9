"""Waiting in tests: on a condition, with a deadline, never a fixed sleep standing in for
readiness (a busy CI machine makes every fixed sleep too short some day)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def until(check: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    """Return once ``check()`` is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(0.02)


async def eventually(
    check: Callable[[], Awaitable[object]],
    timeout: float,
    what: str,
    describe: Callable[[], Awaitable[str]] | None = None,
) -> Any:
    """The first truthy result of the coroutine ``check()``; fail after ``timeout``
    seconds, with ``describe()`` (what is there instead) in the message."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            seen = f"\n{await describe()}" if describe is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{seen}")
        await asyncio.sleep(0.1)


__all__ = ["eventually", "until"]
