"""``/healthz`` and ``/readyz`` over plain HTTP, for the Deployments' probes.

Live: the event loop answers. Ready: the service is connected to NATS and has started
its work (``ready`` is set)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import structlog

log = structlog.get_logger("gangpreempt.service")


def _response(status: str, body: str) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n{body}"
    ).encode()


@contextlib.asynccontextmanager
async def health_endpoint(port: int, ready: Callable[[], bool]) -> AsyncIterator[int]:
    """Serve the probes on ``port`` (0: no endpoint) while the context is open; yields
    the port."""
    if port == 0:
        yield 0
        return

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            parts = line.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else ""
            if path == "/healthz":
                writer.write(_response("200 OK", "ok\n"))
            elif path == "/readyz":
                ok = ready()
                writer.write(
                    _response("200 OK", "ready\n")
                    if ok
                    else _response("503 Service Unavailable", "not ready\n")
                )
            else:
                writer.write(_response("404 Not Found", "not found\n"))
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "0.0.0.0", port)
    log.info("health endpoint", port=port)
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


__all__ = ["health_endpoint"]
