"""A compromised (or buggy) ingest lies about the cluster: it publishes a victim below
the preemptor's priority while it is above, or running on the node the preemptor needs
while it runs elsewhere. quota and victims, which see the cluster only through ingest,
are fooled and a plan is confirmed; the actuator reads the victim again from the API
server before its first write (``planning/legitimacy.py``, ``live_refusal``) and drops the
plan: nothing is evicted. ingest lists a lying API server here, the actuator the true one;
both hold the same objects (same uids and resourceVersions) but for the lie."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import Services, of, state_has, wait_for
from tests.kube.apiserver import CORE, ApiServer

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.timeout(90)]

GPU = "nvidia.com/gpu"
NS = "team"


def node(name: str) -> dict[str, Any]:
    room = {GPU: "8", "cpu": "64", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": room, "allocatable": room},
    }


def pod(name: str, priority: int, on: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {GPU: "8"}}}],
    }
    if on:
        spec["nodeName"] = on
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Running" if on else "Pending"},
    }


def truth() -> list[dict[str, Any]]:
    """Two 8-GPU nodes, both taken: ``important`` (priority 1000) on n1, ``cheap``
    (priority 1) on n2; ``newcomer`` (priority 100, 8 GPUs) waits. The only legitimate
    plan evicts ``cheap`` for a placement on n2."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        node("n1"),
        node("n2"),
        pod("important", 1000, "n1"),
        pod("cheap", 1, "n2"),
        pod("newcomer", 100),
    ]


def lowered(objects: list[dict[str, Any]]) -> None:
    """The lie: ``important`` is published at priority 1, and ``cheap`` at 5000."""
    for obj in objects:
        if obj["metadata"]["name"] == "important":
            obj["spec"]["priority"] = 1
        if obj["metadata"]["name"] == "cheap":
            obj["spec"]["priority"] = 5000


def moved(objects: list[dict[str, Any]]) -> None:
    """The lie: ``important`` and ``cheap`` swap nodes. Evicting ``cheap`` (legitimate by
    priority) then seems to free n1 for the newcomer, where ``important`` really runs: an
    eviction for a placement that cannot happen."""
    for obj in objects:
        name = obj["metadata"]["name"]
        if name == "important":
            obj["spec"]["nodeName"] = "n2"
        if name == "cheap":
            obj["spec"]["nodeName"] = "n1"


@pytest.fixture
async def servers() -> AsyncIterator[tuple[ApiServer, ApiServer]]:
    true, lying = ApiServer(kinds=CORE), ApiServer(kinds=CORE)
    await true.start()
    await lying.start()
    try:
        yield true, lying
    finally:
        await true.stop()
        await lying.stop()


def env(server: ApiServer, where: Path) -> dict[str, str]:
    where.mkdir(parents=True, exist_ok=True)
    return {
        "GANGPREEMPT_SOURCE": "kubernetes",
        "GANGPREEMPT_SINK": "kubernetes",
        "GANGPREEMPT_KUBECONFIG": server.kubeconfig(str(where / "kubeconfig")),
    }


@pytest.mark.parametrize(
    ("lie", "rule", "victim"),
    [(lowered, "priority", "important"), (moved, "off-placement", "cheap")],
    ids=["lowered", "moved"],
)
async def test_a_lying_ingest_gets_nothing_evicted(
    nc: Client,
    topology: Topology,
    services: Services,
    servers: tuple[ApiServer, ApiServer],
    tmp_path: Path,
    lie: Callable[[list[dict[str, Any]]], None],
    rule: str,
    victim: str,
) -> None:
    true, lying = servers
    told = copy.deepcopy(truth())
    lie(told)
    for real, false in zip(truth(), told, strict=True):  # same order: same resourceVersions
        true.put(real)
        lying.put(false)
    services.start("ingest", extra=env(lying, tmp_path / "lying"))
    services.start("quota", "victims", "actuator", extra=env(true, tmp_path / "true"))
    services.wait_started()
    await state_has(nc, topology, "Pod", f"{NS}/newcomer")
    evs = await wait_for(
        nc, topology, lambda e: bool(of(e, events.PlanDropped)), what="a dropped plan"
    )
    dropped = of(evs, events.PlanDropped)[0]
    assert dropped.reason.startswith("illegitimate: live:"), dropped.reason
    assert f"refused by rule {rule}" in dropped.reason
    (proposal,) = [p for p in of(evs, events.PlanProposed) if p.plan_id == dropped.plan_id]
    assert [v.object for v in proposal.victims] == [f"Pod/{NS}/{victim}"]  # fooled so far
    assert not of(evs, events.VictimActuated)
    written = [(m, p) for m, p, _ in true.requests if m in ("POST", "DELETE", "PATCH")]
    assert not [w for w in written if "/pods/" in w[1]], written
    assert true.get("", "pods", NS, victim) is not None
