"""A real control plane (etcd, kube-apiserver, kube-scheduler, Kueue) for the whole
session, from the binaries of tools/peers/build.sh (``make test-peers`` builds them
first); a missing binary is an error, never a skip."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import scenario_dir, services
from tests.peers.cluster import SERVICE_USERS, Cluster, running_cluster
from tests.peers.control_plane import ControlPlane, default_cache_dir

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "k8s"

__all__ = [
    "SERVICE_USERS",
    "SHADOW_USER",
    "cluster",
    "control_plane",
    "scenario_dir",
    "services",
]
SHADOW_USER = "gangpreempt-shadow"
SERVICE_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:gangpreempt"]


RBAC_KINDS = {
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}


# What the tests run: the base's RBAC files, the component of act mode (the services here
# place pods) and the base's admission policy on the actuator's pod writes.
DEPLOY_FILES = (
    "ingest-rbac.yaml",
    "actuator-rbac.yaml",
    "components/act/rbac.yaml",
    "actuator-policy.yaml",
)
POLICY_KINDS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}


def apply_documents(plane: ControlPlane, docs: Iterable[dict[str, Any]]) -> None:
    """RBAC objects and admission policies, as kubectl apply would (server-side)."""
    for doc in docs:
        kind = (doc or {}).get("kind", "")
        meta = doc.get("metadata", {}) if doc else {}
        if kind in RBAC_KINDS:
            where = f"namespaces/{meta['namespace']}/" if "namespace" in meta else ""
            base = f"/apis/rbac.authorization.k8s.io/v1/{where}{RBAC_KINDS[kind]}"
        elif kind in POLICY_KINDS:
            base = f"/apis/admissionregistration.k8s.io/v1/{POLICY_KINDS[kind]}"
        else:
            continue
        plane.apply(doc, f"{base}/{meta['name']}")


def deploy_rbac(plane: ControlPlane) -> None:
    """deploy/k8s's roles and bindings of the services that call the API server, and
    the admission policy on the actuator's pod writes."""
    for name in DEPLOY_FILES:
        apply_documents(plane, yaml.safe_load_all((DEPLOY / name).read_text()))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cache = default_cache_dir()  # FileNotFoundError, naming the build script, if not built
    plane = ControlPlane(
        cache_dir=cache,
        work_dir=tmp_path_factory.mktemp("control-plane"),
        # the services' own identity in shadow mode: allowed everything, so that the
        # audit log, not RBAC, shows that they only read
        users={
            "gangpreempt-test-user": [],
            SHADOW_USER: ["system:masters"],
            **{user: SERVICE_GROUPS for user in SERVICE_USERS.values()},
        },
    )
    plane.start()
    try:
        deploy_rbac(plane)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
async def cluster(control_plane: ControlPlane) -> AsyncIterator[Cluster]:
    """A cluster of its own on the session's control plane, its queues managed."""
    async with running_cluster(control_plane, managed=True) as c:
        yield c
