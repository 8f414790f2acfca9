"""A real control plane (etcd, kube-apiserver, kube-scheduler, Kueue) for the whole
session, from the binaries of tools/peers/build.sh (``make test-peers`` builds them
first); a missing binary is an error, never a skip."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import scenario_dir, services
from tests.peers.control_plane import ControlPlane, default_cache_dir

__all__ = ["control_plane", "scenario_dir", "services"]


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cache = default_cache_dir()  # FileNotFoundError, naming the build script, if not built
    plane = ControlPlane(
        cache_dir=cache,
        work_dir=tmp_path_factory.mktemp("control-plane"),
        users={"gangpreempt-test-user": []},
    )
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
