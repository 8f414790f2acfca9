"""Writes to the API server that a stale plan cannot misapply: each one re-reads the
object, checks it is the incarnation the plan names (uid), and sends its write with the
uid and resourceVersion just read as preconditions. A 409 (someone wrote in between)
re-reads and tries again; 429 and 5xx back off and try again, until a deadline."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from opentelemetry.trace import Span

from gangpreempt.errors import Transient
from gangpreempt.telemetry import tracer
from gangpreempt.waiting import sleep_or_stop
from services.kube.client import JSON, ApiError

log = structlog.get_logger("gangpreempt.actuator")

T = TypeVar("T")

RETRY_FOR = 60.0  # seconds a write keeps retrying 409 / 429 / 5xx
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0


class Stale(Exception):
    """The object is not the incarnation the plan was made for: touch nothing."""


async def retrying(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    retry_for: float = RETRY_FOR,
    deadline: float | None = None,
    stop: asyncio.Event | None = None,
) -> T:
    """``attempt()`` (which re-reads before it writes) until it succeeds, a non-retriable
    error, or 409 / 429 / 5xx / connection errors past ``deadline`` (a ``time.monotonic``
    instant; by default ``retry_for`` seconds from now), or once ``stop`` is set (the
    service is stopping: a write that can be decided again later is not retried)."""
    if deadline is None:
        deadline = time.monotonic() + retry_for
    with tracer().start_as_current_span(
        "kubernetes write", attributes={"gangpreempt.object": what}
    ) as span:
        return await _retrying(what, attempt, deadline, span, stop)


async def _retrying(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    deadline: float,
    span: Span,
    stop: asyncio.Event | None = None,
) -> T:
    tries = 0
    while True:
        span.set_attribute("gangpreempt.tries", tries + 1)
        try:
            return await attempt()
        except ApiError as exc:
            if not exc.retriable or time.monotonic() >= deadline or _stopping(stop):
                raise
            delay, error = exc.retry_after, str(exc)
        except Transient as exc:
            if time.monotonic() >= deadline or _stopping(stop):
                raise
            delay, error = None, str(exc)
        tries += 1
        if delay is None:
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (tries - 1))
        delay = min(delay, max(0.0, deadline - time.monotonic()))
        log.info("retrying", what=what, error=error, attempt=tries, delay=round(delay, 2))
        if stop is None:
            await asyncio.sleep(delay)
        else:
            await sleep_or_stop(stop, delay)


def _stopping(stop: asyncio.Event | None) -> bool:
    return stop is not None and stop.is_set()


def preconditions(obj: JSON) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    return {
        "uid": str(meta.get("uid", "")),
        "resourceVersion": str(meta.get("resourceVersion", "")),
    }


def check_uid(ref: str, obj: JSON, uid: str) -> None:
    live = str((obj.get("metadata") or {}).get("uid", ""))
    if uid and live != uid:
        raise Stale(f"{ref} was replaced (uid {uid} -> {live})")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(object_name: str, *parts: str) -> str:
    """A name per (object, plan, ...): creating it twice gives 409, so events are sent
    once however often an actuation is retried."""
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:12]
    # A DNS subdomain: a cut name must not end in "-" or "." before the suffix.
    return f"{object_name[:200].rstrip('-.')}.gp-{digest}"


__all__ = [
    "RETRY_FOR",
    "Stale",
    "check_uid",
    "event_name",
    "now_rfc3339",
    "preconditions",
    "retrying",
]
