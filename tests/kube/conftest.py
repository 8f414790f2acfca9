from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.kube.apiserver import ApiServer


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    server = ApiServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
