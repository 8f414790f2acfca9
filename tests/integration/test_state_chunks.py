"""STATE in chunks against a real nats-server: a large batch of the sim's changes goes in
``StateChunk`` messages, a replica rebuilt from the stream sees exactly what per-object
messages would have given it, a chunk whose objects all have newer versions is deleted
from the stream, and one bad change in a chunk is dead-lettered while the others apply."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from gangpreempt import events
from gangpreempt.bus import Publisher, Topology
from gangpreempt.model import PodSet, Workload
from gangpreempt.replica import StateReplica
from services.ingest.chunks import ChunkReaper
from services.ingest.sim import Chunking, SimCluster
from tests.builders import state_upsert
from tests.waiting import eventually

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def workload(name: str, cpu: int = 1000, count: int = 1) -> Workload:
    return Workload(namespace="ns", name=name, pod_sets=(PodSet("main", count, {"cpu": cpu}),))


async def chunk_subjects(nc: Client, topology: Topology) -> int:
    info = await nc.jetstream().stream_info(
        topology.state_stream, subjects_filter=topology.state_chunk_wildcard
    )
    return len(info.state.subjects or {})


async def chunks_are(nc: Client, topology: Topology, want: int) -> bool:
    return await chunk_subjects(nc, topology) == want


async def rebuilt(nc: Client, topology: Topology) -> dict[str, Workload]:
    """The workloads a replica started now reads from STATE."""
    replica = StateReplica(nc, topology, "test")
    await replica.start()
    try:
        await replica.caught_up()
        return dict(replica.state.workloads)
    finally:
        await replica.stop()


async def test_sim_batches_go_in_chunks_and_spent_chunks_are_deleted(
    nc: Client, topology: Topology
) -> None:
    reaper = ChunkReaper(nc, topology)
    sim = SimCluster(
        Publisher(nc, topology, "ingest"), 1.0, chunking=Chunking(4, "e1", reaper.ledger)
    )
    try:
        for i in range(10):  # queued together: two chunks of 4, then 2 on their own
            await sim.upsert(workload(f"w{i}"))
        await sim.flush()
        assert await chunk_subjects(nc, topology) == 2
        got = await rebuilt(nc, topology)
        assert {k: w.resource_version for k, w in got.items()} == {
            f"ns/w{i}": str(i + 1) for i in range(10)
        }
        # a reaper started later learns which chunks still hold something
        assert await ChunkReaper(nc, topology).learn() == 2

        for i in range(4):  # the first chunk's objects changed one by one
            await sim.upsert(workload(f"w{i}", cpu=2000))
            await sim.flush()
        await eventually(lambda: chunks_are(nc, topology, 1), 10, "the first chunk deleted")
        got = await rebuilt(nc, topology)
        assert len(got) == 10
        assert [got[f"ns/w{i}"].pod_sets[0].requests["cpu"] for i in range(10)] == [2000] * 4 + [
            1000
        ] * 6

        for i in range(4, 8):  # the second chunk's objects deleted
            await sim.delete("Workload", f"ns/w{i}")
            await sim.flush()
        await eventually(lambda: chunks_are(nc, topology, 0), 10, "the second chunk deleted")
        assert set(await rebuilt(nc, topology)) == {f"ns/w{i}" for i in (0, 1, 2, 3, 8, 9)}
        assert reaper.deleted == 2
    finally:
        await sim.close()
        await reaper.close()


async def test_a_bad_change_in_a_chunk_is_dead_lettered_and_the_others_apply(
    nc: Client, topology: Topology
) -> None:
    good, bad = workload("good"), workload("bad", count=-1)
    changes = (state_upsert(bad), state_upsert(good))
    chunk = events.StateChunk(id="chunk-x-0", occurred_at=NOW, epoch="x", n=0, changes=changes)
    await Publisher(nc, topology, "ingest").publish(chunk)
    replica = StateReplica(nc, topology, "test")
    await replica.start()
    try:
        await replica.caught_up()
        assert set(replica.state.workloads) == {"ns/good"}
    finally:
        await replica.stop()
    sub = await nc.jetstream().subscribe(
        topology.dlq_subject("test"),
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
        stream=topology.dlq_stream,
    )
    try:
        msg = await sub.next_msg(timeout=10)
    finally:
        await sub.unsubscribe()
    reason = (msg.headers or {}).get("gp-dlq-reason", "")
    assert "chunk-x-0" in reason
    assert "bad@1" in reason
    assert "good@1" not in reason


async def test_a_listener_failing_on_one_change_of_a_chunk_leaves_the_rest_applied(
    nc: Client, topology: Topology
) -> None:
    names = ("a", "b", "c")
    changes = tuple(state_upsert(workload(n)) for n in names)
    chunk = events.StateChunk(id="chunk-y-0", occurred_at=NOW, epoch="y", n=0, changes=changes)
    await Publisher(nc, topology, "ingest").publish(chunk)
    replica = StateReplica(nc, topology, "test")
    heard: list[str] = []

    def listener(kind: str, _old: object, new: object) -> None:
        if kind != "Workload":
            return
        assert isinstance(new, Workload)
        heard.append(new.name)
        if new.name == "a":
            raise KeyError("a listener's bug")

    replica.on_change(listener)
    await replica.start()
    try:
        await replica.caught_up()
        assert set(replica.state.workloads) == {"ns/a", "ns/b", "ns/c"}
        assert heard == ["a", "b", "c"]
    finally:
        await replica.stop()


async def test_deletions_queued_together_go_on_their_own_subjects_and_pin_no_chunk(
    nc: Client, topology: Topology
) -> None:
    reaper = ChunkReaper(nc, topology)
    sim = SimCluster(
        Publisher(nc, topology, "ingest"), 1.0, chunking=Chunking(4, "e2", reaper.ledger)
    )
    try:
        for i in range(8):  # two chunks of 4
            await sim.upsert(workload(f"w{i}"))
        await sim.flush()
        assert await chunk_subjects(nc, topology) == 2
        # queued together: six deletions and two changes, drained a chunk's worth at a time
        for i in range(6):
            await sim.delete("Workload", f"ns/w{i}")
        for i in (6, 7):
            await sim.upsert(workload(f"w{i}", cpu=2000))
        await sim.flush()
        # both old chunks spent; only the chunk of the two changes holds anything
        await eventually(lambda: chunks_are(nc, topology, 1), 10, "the spent chunks deleted")
        got = await rebuilt(nc, topology)
        assert {k: w.pod_sets[0].requests["cpu"] for k, w in got.items()} == {
            "ns/w6": 2000,
            "ns/w7": 2000,
        }
        assert reaper.ledger.chunks == 1
    finally:
        await sim.close()
        await reaper.close()
