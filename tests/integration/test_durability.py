"""The durable pieces of the saga against a real nats-server: plan records moved by
compare-and-set, a record book and a state replica that follow their streams across a
nats-server restart, and a lease that is valid on its holder's clock only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import (
    Lease,
    NatsServer,
    Publisher,
    Topology,
    connected,
    leases_bucket,
    provision,
)
from gangpreempt.bus.leasing import current_token
from gangpreempt.bus.provisioning import plans_bucket
from gangpreempt.bus.records import RecordBook, RecordStore
from gangpreempt.errors import Conflict, Fenced
from gangpreempt.model import PodSet, Workload, kinds
from gangpreempt.planning import records as r
from gangpreempt.replica import StateReplica
from services import simwire
from services.ingest.sim import SimCluster
from services.quota.confirming import Confirmer
from services.quota.flights import Flights
from tests.waiting import eventually, until

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def requested(plan_id: str) -> r.PlanRecord:
    return r.new_record(plan_id, f"req-{plan_id}", "Workload/ns/g", "ns/g", NOW)


async def test_records_move_by_compare_and_set(nc: Client, topology: Topology) -> None:
    store = RecordStore(await plans_bucket(nc.jetstream(), topology))
    rec = requested("p1")
    await store.create(rec)
    with pytest.raises(Conflict):
        await store.create(rec)  # one record per plan
    found = await store.get("p1")
    assert found is not None
    read, revision = found
    confirmed = r.advance(read, r.REJECTED, by=r.QUOTA, now=NOW, reason="x")
    await store.put(confirmed, revision)
    with pytest.raises(Conflict):  # a writer that read the old revision loses
        await store.put(r.advance(read, r.EXPIRED, by=r.QUOTA, now=NOW), revision)
    # move() reads again after a lost race and lets the mover decide on the new state.
    seen: list[str] = []

    def mover(rec: r.PlanRecord) -> r.PlanRecord | None:
        seen.append(rec.state)
        return None if rec.state in r.TERMINAL else rec

    moved = await store.move("p1", mover)
    assert moved is not None
    assert moved[0].state == r.REJECTED
    assert seen == [r.REJECTED]
    assert await store.move("absent", mover) is None
    # An ended record is deleted (followers learn it from the marker), then purged: the
    # bucket does not keep a message for every plan ever made (expiring markers push the
    # revisions out, then go themselves).
    await store.delete("p1", moved[1])
    assert await store.get("p1") is None
    await store.purge("p1", ttl=1.0)
    assert await store.get("p1") is None
    js = nc.jetstream()

    async def emptied() -> bool:
        return (await js.stream_info(f"KV_{topology.plans_bucket}")).state.messages == 0

    await eventually(emptied, 15.0, "the purged key's messages gone")


async def test_a_record_book_learns_writes_of_its_own_and_of_others(
    nc: Client, topology: Topology
) -> None:
    kv = await plans_bucket(nc.jetstream(), topology)
    store = RecordStore(kv)
    await store.create(requested("before"))
    book = RecordBook(nc, topology)
    changes: list[tuple[str | None, str | None]] = []
    book.on_change(lambda old, new: changes.append((old and old.state, new and new.state)))
    await book.start()
    assert book.get("before") is not None  # what the bucket held at start
    revision = await store.create(requested("mine"))
    book.learn(requested("mine"), revision)  # a service applies its own write at once
    await store.create(requested("theirs"))
    await until(lambda: book.get("theirs") is not None, what="another writer's record")
    found = await store.get("before")
    assert found is not None
    await kv.delete("before", last=found[1])
    await until(lambda: book.get("before") is None, what="the deletion")
    assert changes.count((None, r.REQUESTED)) == 3  # each record once, echoes ignored
    await book.stop()


async def test_a_record_book_keeps_no_tombstone_for_the_markers_that_retire_a_record(
    nc: Client, topology: Topology
) -> None:
    """A deletion leaves a tombstone (quota retires the key later); the expiring markers
    that retire it leave none, or quota would retire the key again and again."""
    store = RecordStore(await plans_bucket(nc.jetstream(), topology))
    revision = await store.create(requested("old"))
    book = RecordBook(nc, topology)
    await book.start()
    await store.delete("old", revision)
    await until(lambda: "old" in book.tombstones, what="the deletion's tombstone")
    del book.tombstones["old"]  # as quota does once it retires the key
    await store.purge("old", ttl=1.0)
    await book.caught_up()
    assert "old" not in book.tombstones
    assert book.get("old") is None
    await book.stop()


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(str(tmp_path / "nats")).start()
    try:
        yield server
    finally:
        server.stop()


async def test_followers_go_on_after_the_server_is_killed_and_restarted(
    restartable: NatsServer, topology: Topology
) -> None:
    async with connected(restartable.url, "test", reconnect_time_wait=0.2) as nc:
        await provision(nc.jetstream(), topology)
        pub = Publisher(nc, topology, "ingest")
        replica = StateReplica(nc, topology, "test")
        book = RecordBook(nc, topology)
        await replica.start()
        await book.start()
        store = RecordStore(await nc.jetstream().key_value(topology.plans_bucket))

        async def put(name: str) -> None:
            wl = Workload(namespace="ns", name=name, pod_sets=(PodSet("main", 1, {"cpu": 1}),))
            await pub.publish(
                events.ObjectUpserted(
                    id=f"{name}@1",
                    occurred_at=NOW,
                    kind="Workload",
                    key=wl.key,
                    body=kinds.encode_object(wl),
                )
            )

        await put("before")
        await store.create(requested("before"))
        await until(lambda: "ns/before" in replica.state.workloads, what="the first object")
        assert restartable.proc is not None
        restartable.proc.kill()  # SIGKILL: no goodbye to the clients
        restartable.proc.wait()
        restartable.proc = None
        restartable.start()
        await until(lambda: nc.is_connected, what="the client to reconnect")
        await until_published(put, "after")
        await store.create(requested("after"))
        await until(lambda: "ns/after" in replica.state.workloads, 20, "the replica after")
        await until(lambda: book.get("after") is not None, 20, "the book after")
        await replica.stop()
        await book.stop()


async def until_published(put: object, name: str, timeout: float = 10.0) -> None:
    """Publish once JetStream answers again (it takes a moment after a restart)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await put(name)  # type: ignore[operator]
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_a_lease_is_invalid_on_its_holders_clock_once_past_its_deadline(
    nc: Client, topology: Topology
) -> None:
    kv = await leases_bucket(nc.jetstream(), topology, ttl=1.0)
    stop = asyncio.Event()
    old = Lease(kv, "actuator", "old", ttl=1.0)
    token = await old.acquire(stop)
    assert old.valid()
    assert old.check() == token
    assert await current_token(kv, "actuator") == token
    # It stops renewing (a paused process): past ttl - margin it knows, without asking.
    await until(lambda: not old.valid(), 2.0, "the old holder's deadline")
    with pytest.raises(Fenced):
        old.check()
    new = Lease(kv, "actuator", "new", ttl=1.0)
    new_token = await asyncio.wait_for(new.acquire(stop), 5)
    assert new_token is not None
    assert token is not None
    assert new_token > token
    assert await current_token(kv, "actuator") == new_token
    # The old holder's renewal finds another revision: lost for good.
    keeper = asyncio.ensure_future(old.keep(stop))
    await asyncio.wait_for(old.lost.wait(), 3)
    stop.set()
    await keeper


async def test_the_sim_refuses_a_token_that_is_not_the_current_leases(
    nc: Client, topology: Topology
) -> None:
    leases = await leases_bucket(nc.jetstream(), topology, ttl=5.0)
    sim = SimCluster(Publisher(nc, topology, "ingest"), termination_delay=60)
    await sim.follow_lease(nc, topology.leases_bucket)
    await sim.upsert(
        Workload(namespace="ns", name="v", uid="v-uid", pod_sets=(PodSet("main", 1, {"cpu": 1}),))
    )

    def request(token: int) -> simwire.EvictRequest:
        return simwire.EvictRequest(
            ref="Workload/ns/v",
            uid="v-uid",
            plan_id="p",
            preemptor="x",
            reason="r",
            fencing_token=token,
        )

    nobody = await sim.evict(request(1))
    assert nobody.fenced  # no holder at all
    stop = asyncio.Event()
    first = Lease(leases, "actuator", "first", ttl=5.0)
    token = await first.acquire(stop)
    assert token is not None
    await first.release()
    second = Lease(leases, "actuator", "second", ttl=5.0)
    newer = await second.acquire(stop)
    assert newer is not None
    await until(lambda: sim.lease_token == newer, what="the sim following the new lease")
    stale = await sim.evict(request(token))
    assert stale.fenced
    assert "lease's is" in stale.detail
    assert sim.evictions == {}
    await sim.close()


async def test_a_new_quota_holder_ends_the_old_holders_requests_and_their_writes_fail(
    nc: Client, topology: Topology
) -> None:
    """The old holder read a request and decided to confirm it, then stopped (a pause)
    before its write; the lease expired and a new holder took over the records: it
    expired the request, under its token, to ask again. The old write, when it comes,
    fails its compare-and-set, and read again it is refused: nobody confirms it."""
    js = nc.jetstream()
    store = RecordStore(await plans_bucket(js, topology))
    leases = await leases_bucket(js, topology, ttl=1.0)
    stop = asyncio.Event()
    old_lease = Lease(leases, "quota", "old", ttl=1.0)
    old_token = await old_lease.acquire(stop)
    assert old_token is not None
    rec = msgspec.structs.replace(requested("p-adopt"), quota_token=old_token)
    await store.create(rec)
    read = await store.get("p-adopt")
    assert read is not None
    decided = r.advance(
        read[0], r.CONFIRMED, by=r.QUOTA, now=NOW, proposal=proposal(), quota_token=old_token
    )
    # ...the old holder stops here; its lease expires on the server
    new_lease = Lease(leases, "quota", "new", ttl=1.0)
    new_token = await asyncio.wait_for(new_lease.acquire(stop), 10)
    assert new_token is not None
    assert new_token > old_token
    book = RecordBook(nc, topology)
    await book.start()
    confirmer = Confirmer(
        store,
        book,
        Flights(lambda *_: None, lambda: 0, new_token),
        Publisher(nc, topology, "quota"),
        lambda: NOW,
        "quota/new",
        new_lease,
    )
    assert await confirmer.adopt(new_token) == 1
    with pytest.raises(Conflict):  # the revision it read is gone
        await store.put(decided, read[1])
    with pytest.raises(r.IllegalMove):  # read again: ended, under a newer token
        await store.move(
            "p-adopt",
            lambda now: r.advance(
                now, r.CONFIRMED, by=r.QUOTA, now=NOW, proposal=proposal(), quota_token=old_token
            ),
        )
    after = await store.get("p-adopt")
    assert after is not None
    assert (after[0].state, after[0].quota_token) == (r.EXPIRED, new_token)
    assert await confirmer.adopt(new_token) == 0  # once is enough
    await book.stop()
    await new_lease.release()


def proposal() -> events.PlanProposed:
    return events.PlanProposed(
        id="proposed-p-adopt",
        occurred_at=NOW,
        plan_id="p-adopt",
        request_id="req-p-adopt",
        preemptor="Workload/ns/g",
        preemptor_uid="",
        cluster_queue="q",
        pod_sets=("main",),
        flavors={},
        victims=(events.PlannedVictim("Workload/ns/v", "v-uid", "1", "r", "q", 0),),
    )
