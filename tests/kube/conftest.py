from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gangpreempt.config import Settings
from services.actuator.kubernetes import KubeSink
from services.kube.access import ACTUATOR_ANY
from services.kube.client import KubeApi
from tests.kube.apiserver import ApiServer
from tests.kube.sinking import Replica


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    server = ApiServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def sink(apiserver: ApiServer, tmp_path: Path) -> AsyncIterator[tuple[KubeSink, Replica]]:
    config = apiserver.kubeconfig(str(tmp_path / "kubeconfig"))
    replica = Replica(apiserver)
    async with KubeApi.connect(Settings(kubeconfig=config), "actuator", ACTUATOR_ANY) as api:
        s = await KubeSink.create(api, replica, "delete")  # type: ignore[arg-type]
        yield s, replica
