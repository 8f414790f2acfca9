"""``/healthz`` and ``/readyz`` over plain HTTP, for the Deployments' probes, and
``/metrics`` for Prometheus.

Live: the event loop answers. Ready: the service is connected to NATS and has started
its work (``ready`` is set). Metrics: the process's registry (``telemetry.metrics``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import structlog

from gangpreempt.telemetry import metrics

log = structlog.get_logger("gangpreempt.service")


def _response(status: str, body: str | bytes, content_type: str = "text/plain") -> bytes:
    data = body.encode() if isinstance(body, str) else body
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + data


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
            elif path == "/metrics" or path.startswith("/metrics?"):
                body, content_type = metrics.exposition()
                writer.write(_response("200 OK", body, content_type))
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
