"""The probes' endpoint: /healthz answers while the loop runs, /readyz only when ready,
/metrics with the process's Prometheus registry."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gangpreempt.telemetry import metrics
from services.health import health_endpoint

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = (await reader.read()).decode()
    writer.close()
    head, _, body = data.partition("\r\n\r\n")
    return int(head.split()[1]), body


async def test_liveness_and_readiness() -> None:
    ready = False
    port = free_port()
    async with health_endpoint(port, lambda: ready):
        assert await get(port, "/healthz") == (200, "ok\n")
        assert (await get(port, "/readyz"))[0] == 503
        ready = True
        assert await get(port, "/readyz") == (200, "ready\n")
        assert (await get(port, "/nothing"))[0] == 404
        metrics.DEAD_LETTERS.labels("test", "decode").inc()
        status, body = await get(port, "/metrics")
        assert status == 200
        assert "# TYPE gangpreempt_plans_total counter" in body
        assert "# TYPE kueue_preempted_workloads_total counter" in body
        line = 'gangpreempt_dead_letters_total{reason="decode",service="test"}'
        assert any(
            row.startswith(line) and float(row.split()[-1]) >= 1 for row in body.splitlines()
        )
    with pytest.raises(ConnectionRefusedError):
        await get(port, "/healthz")  # closed with its context


async def test_port_zero_serves_nothing() -> None:
    async with health_endpoint(0, lambda: True) as port:
        assert port == 0
