from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gangpreempt.bus import Topology
from tests.e2e.harness import Services
from tests.kube.conftest import apiserver  # the in-repo API server (a module may define its own)

__all__ = ["apiserver", "scenario_dir", "services"]


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
