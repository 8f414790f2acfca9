"""A real control plane (etcd, kube-apiserver, kube-scheduler, Kueue) for the whole
session, from the binaries of tools/peers/build.sh (``make test-peers`` builds them
first); a missing binary is an error, never a skip."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import scenario_dir, services
from tests.peers.control_plane import ControlPlane, default_cache_dir

__all__ = ["SHADOW_USER", "control_plane", "scenario_dir", "services"]
SHADOW_USER = "gangpreempt-shadow"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cache = default_cache_dir()  # FileNotFoundError, naming the build script, if not built
    plane = ControlPlane(
        cache_dir=cache,
        work_dir=tmp_path_factory.mktemp("control-plane"),
        # the services' own identity in shadow mode: allowed everything, so that the
        # audit log, not RBAC, shows that they only read
        users={"gangpreempt-test-user": [], SHADOW_USER: ["system:masters"]},
    )
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
