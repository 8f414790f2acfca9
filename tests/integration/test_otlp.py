"""Spans leave the process over OTLP/HTTP when the standard endpoint variable is set:
a service process's spans reach a collector (here a small HTTP server that keeps what
it is sent)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from aiohttp import web

pytestmark = pytest.mark.integration

PROGRAM = """
from gangpreempt.telemetry import setup_tracing, shutdown_tracing, tracer
setup_tracing("probe")
with tracer().start_as_current_span("probe-span"):
    pass
shutdown_tracing()
"""


async def collector() -> tuple[web.AppRunner, str, list[tuple[str, str, bytes]]]:
    received: list[tuple[str, str, bytes]] = []

    async def traces(request: web.Request) -> web.Response:
        received.append((request.path, request.content_type, await request.read()))
        return web.Response(status=200, body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", received


async def run(env: dict[str, str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROGRAM, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return proc.returncode


async def test_spans_are_exported_over_otlp_when_an_endpoint_is_set() -> None:
    runner, url, received = await collector()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        await run({**env, "OTEL_EXPORTER_OTLP_ENDPOINT": url})
        assert [(path, kind) for path, kind, _ in received] == [
            ("/v1/traces", "application/x-protobuf")
        ]
        body = received[0][2]
        assert b"gangpreempt-probe" in body  # the resource's service.name
        assert b"probe-span" in body
        # Without the variable nothing is sent.
        received.clear()
        await run(env)
        assert received == []
    finally:
        await runner.cleanup()
