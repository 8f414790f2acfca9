"""A service's live view at the starting state's completion: the node index is built then,
in a thread, with STATE held until it is done (no change slips in under the build) while
the loop goes on (a lease renewal, a status answer), and the state counts as complete
only after it."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Publisher, Topology
from gangpreempt.config import Settings
from gangpreempt.model import kinds
from gangpreempt.model.pods import Node, Pod
from gangpreempt.planning.nodeindex import NodeIndex
from services.livestate import LiveState
from services.runtime import ServiceContext
from tests.waiting import until

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def upsert(obj: Any) -> events.ObjectUpserted:
    kind, key = kinds.kind_of(obj), kinds.key_of(obj)
    return events.ObjectUpserted(
        id=f"{kind}/{key}@1", occurred_at=NOW, kind=kind, key=key, body=kinds.encode_object(obj)
    )


async def test_the_index_is_built_off_the_loop_with_state_held(
    nc: Client, topology: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    real_build = NodeIndex.build

    def slow_build(self: NodeIndex, now: datetime) -> None:
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        time.sleep(0.5)  # a build of 20,000 nodes takes seconds
        real_build(self, now)
        seen["late_pod_in_state"] = "ml/late" in self.state.pods

    monkeypatch.setattr(NodeIndex, "build", slow_build)
    ctx = ServiceContext("victims", Settings(prefix=topology.prefix), nc, asyncio.Event())
    live = LiveState(ctx, "victims")
    pub = Publisher(nc, topology, "ingest")
    await pub.publish(upsert(Node("n1", {"cpu": 8, "pods": 110})))
    await pub.publish(
        upsert(Pod("ml", "a", {"cpu": 4}, uid="u-a", node_name="n1", priority=1, start_time=NOW))
    )
    await pub.publish(
        events.StateComplete(id="complete", occurred_at=NOW, source="test", objects=2)
    )
    await pub.publish(upsert(Pod("ml", "late", {"cpu": 1}, uid="u-l", priority=1)))

    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.02)
            ticks += 1

    ticking = asyncio.ensure_future(ticker())
    try:
        await live.replica.start()
        await until(lambda: "thread" in seen, 10, "the build started")
        before = ticks
        await until(lambda: live.replica.complete, 20, "the starting state complete")
        during = ticks - before
        await until(lambda: "ml/late" in live.replica.state.pods, 10, "the change after it")
    finally:
        stop.set()
        await ticking
        await live.replica.stop()
    assert seen["thread"], "the index was built on the loop's thread"
    assert seen["late_pod_in_state"] is False, "a change applied while the index was built"
    assert during >= 5, f"the loop turned {during} times in a 0.5 s build"
    assert not live.nodes.stale
    assert live.nodes.builds == 1
    # kept current after: the later pod is in the index (pending)
    assert live.nodes.cluster is not None
    assert "ml/late" in live.nodes.cluster.pending
