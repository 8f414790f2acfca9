from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt.bus import NatsServer, Topology, connected, provision
from tests.e2e.harness import Services


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = NatsServer(str(tmp_path_factory.mktemp("nats"))).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def topology() -> Topology:
    return Topology(f"e{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def nc(nats_url: str, topology: Topology) -> AsyncIterator[Client]:
    async with connected(nats_url, "e2e-test") as client:
        await provision(client.jetstream(), topology, lease_ttl=1.0)
        yield client


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    path = tmp_path / "scenario"
    path.mkdir()
    return path


@pytest.fixture
def services(
    nats_url: str, topology: Topology, scenario_dir: Path, tmp_path: Path
) -> Iterator[Services]:
    logs = tmp_path / "logs"
    logs.mkdir()
    s = Services(nats_url, topology, str(scenario_dir), logs)
    try:
        yield s
    finally:
        s.stop()
