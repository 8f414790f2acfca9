"""A consistent start: quota decides nothing until ingest has marked its starting state
complete on STATE (``StateComplete``), so a pending pod is never admitted onto a node
whose running pods are not published yet. Here the test plays ingest and publishes the
pending pod before the pod that fills its node, as a source listing pods in name order
does."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.bus.publishing import Publisher
from gangpreempt.model.pods import Node, Pod
from tests.builders import state_upsert
from tests.e2e.harness import Services, of, wait_for

pytestmark = pytest.mark.e2e
NOW = datetime(2026, 1, 1, tzinfo=UTC)
PENDING = "Pod/ml/a-pending"


def skipped_at(log: str) -> list[int]:
    """The STATE sequences at which quota ran a cycle and decided nothing."""
    out = []
    for line in log.splitlines():
        if "the starting state is not complete yet" in line:
            out.append(json.loads(line)["seq"])
    return out


async def test_nothing_is_decided_before_the_starting_state_is_complete(
    nc: Client, topology: Topology, services: Services
) -> None:
    services.start("quota", extra={"GANGPREEMPT_LOG_LEVEL": "debug"})
    services.wait_started()
    pub = Publisher(nc, topology, "ingest")
    node = Node("n1", {"cpu": 4, "pods": 110})
    pending = Pod("ml", "a-pending", {"cpu": 4}, uid="u-a", priority=10)
    running = Pod(
        "ml", "z-running", {"cpu": 4}, uid="u-z", node_name="n1", priority=100, start_time=NOW
    )
    await pub.publish(state_upsert(node))
    ack = await pub.publish(state_upsert(pending))
    # Until quota has run a cycle on a state that holds the pending pod and its empty
    # node (or has decided something on it) ...
    deadline = time.monotonic() + 30
    while True:
        admitted = of(await wait_for(nc, topology, lambda _: True), events.Admitted)
        if admitted or any(seq >= ack.seq for seq in skipped_at(services.log("quota"))):
            break
        assert time.monotonic() < deadline, "quota ran no cycle on the partial state"
        await asyncio.sleep(0.1)
    # ... it decided nothing on it.
    assert not admitted
    await pub.publish(state_upsert(running))
    await pub.publish(
        events.StateComplete(id="complete-1", occurred_at=NOW, source="test", objects=3)
    )
    evs = await wait_for(
        nc,
        topology,
        lambda evs: bool(of(evs, events.Pending, workload=PENDING)),
        what="the pending pod's decision on the whole state",
    )
    # The node is full and its pod outranks the preemptor: pending, never admitted.
    assert not of(evs, events.Admitted, workload=PENDING)
    assert not of(evs, events.PreemptionRequested, preemptor=PENDING)
