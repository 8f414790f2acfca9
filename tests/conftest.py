"""Fixtures shared by the integration and e2e tiers: a real nats-server per test module
(free port, temporary store) and a unique prefix (streams, subjects, buckets) per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from nats.aio.client import Client

from gangpreempt.bus import NatsServer, Topology, connected, provision


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = NatsServer(str(tmp_path_factory.mktemp("nats"))).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def topology() -> Topology:
    return Topology(f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def nc(nats_url: str, topology: Topology) -> AsyncIterator[Client]:
    async with connected(nats_url, "test") as client:
        await provision(client.jetstream(), topology, lease_ttl=1.0)
        yield client


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--repeat",
        type=int,
        default=1,
        help="run each test N times in one session (a flakiness sweep: tests/peers)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    times = int(metafunc.config.getoption("repeat"))
    if times > 1:
        metafunc.fixturenames.append("repeat_index")
        metafunc.parametrize("repeat_index", range(times))
