"""The bus contract against a real nats-server: dedup, nak redelivery, term to the dead
letters with the reason, oversized events refused with the connection still up, leases
with fencing tokens, the state replica, and trace context across a hop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from gangpreempt import events
from gangpreempt.bus import Consumer, Lease, Oversized, Publisher, Topology, leases_bucket
from gangpreempt.bus.consuming import Delivery
from gangpreempt.bus.leasing import parse_lease
from gangpreempt.bus.reading import read_subject
from gangpreempt.errors import InvalidInput, Transient
from gangpreempt.model import PodSet, Workload, kinds
from gangpreempt.replica import StateReplica
from gangpreempt.telemetry import setup_tracing
from tests.integration.running import consume_actuator_events

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def dropped(i: int, reason: str = "r") -> events.PlanDropped:
    return events.PlanDropped(
        id=f"d-{i}", occurred_at=NOW, plan_id=f"p{i}", preemptor="Workload/a/b", reason=reason
    )


async def stream_messages(
    nc: Client, stream: str, subject: str, want: int, timeout: float = 5.0
) -> list:
    js = nc.jetstream()
    got: list = []
    sub = await js.subscribe(
        subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, stream=stream
    )
    deadline = asyncio.get_running_loop().time() + timeout
    while len(got) < want and asyncio.get_running_loop().time() < deadline:
        try:
            got.append(await sub.next_msg(timeout=0.2))
        except Exception:
            continue
    await sub.unsubscribe()
    return got


async def test_a_retried_publish_is_dropped_by_the_stream(nc: Client, topology: Topology) -> None:
    pub = Publisher(nc, topology, "actuator")
    first = await pub.publish(dropped(1))
    again = await pub.publish(dropped(1))
    assert first.duplicate is None
    assert again.duplicate is True
    assert again.seq == first.seq
    info = await nc.jetstream().stream_info(topology.decisions_stream)
    assert info.state.messages == 1


async def test_sends_without_waiting_keep_their_order(nc: Client, topology: Topology) -> None:
    """The sim's STATE writer keeps many sends in flight; the stream must store them in
    the order they were sent, and every ack must arrive (one message per event: no
    group commit)."""
    pub = Publisher(nc, topology, "actuator", group_commit=False)
    acks = [await pub.send(dropped(100 + i)) for i in range(200)]
    stored = await asyncio.wait_for(asyncio.gather(*acks), 10)
    assert [a.seq for a in stored] == sorted(a.seq for a in stored)
    msgs = await stream_messages(
        nc, topology.decisions_stream, topology.event_subject(events.PlanDropped), want=200
    )
    assert [events.decode(m.data).id for m in msgs] == [f"d-{100 + i}" for i in range(200)]


async def test_transient_failure_is_redelivered_then_acked(nc: Client, topology: Topology) -> None:
    pub = Publisher(nc, topology, "actuator")
    await pub.publish(dropped(2))
    deliveries: list[int] = []
    done = asyncio.Event()

    async def handler(ev: object, d: Delivery) -> None:
        deliveries.append(d.num_delivered)
        if d.num_delivered == 1:
            raise Transient("not yet")
        done.set()

    await consume_actuator_events(nc, topology, "c-transient", handler, done)
    assert deliveries == [1, 2]
    info = await nc.jetstream().consumer_info(topology.decisions_stream, "c-transient")
    assert info.num_ack_pending == 0
    assert info.num_pending == 0


async def test_undecodable_and_invalid_messages_go_to_dead_letters(
    nc: Client, topology: Topology
) -> None:
    js = nc.jetstream()
    subject = topology.event_subject(events.PlanDropped)
    await js.publish(subject, b"\x93not an event", headers={"Nats-Msg-Id": "junk-1"})
    bad_field = msgspec.msgpack.encode(
        {"type": "PlanDropped", "id": "x-2", "occurred_at": "2026-01-01T00:00:00Z", "plan_id": 7}
    )
    await js.publish(subject, bad_field, headers={"Nats-Msg-Id": "junk-2"})
    pub = Publisher(nc, topology, "actuator")
    await pub.publish(dropped(3, reason="refuse me"))
    await pub.publish(dropped(4, reason="fine"))
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(ev: events.PlanDropped, d: Delivery) -> None:
        if ev.reason == "refuse me":
            raise InvalidInput("plan p3 names no victims")
        handled.append(ev.plan_id)
        done.set()

    await consume_actuator_events(nc, topology, "c-dlq", handler, done)
    assert handled == ["p4"]  # the loop survived three bad messages
    letters = await stream_messages(nc, topology.dlq_stream, topology.dlq_subject("quota"), 3)
    reasons = [m.headers["gp-dlq-reason"] for m in letters]
    assert len(letters) == 3
    assert "cannot decode" in reasons[0]
    assert "$.plan_id" in reasons[1]  # the decode error names the field
    assert letters[1].headers["gp-dlq-type"] == "PlanDropped"
    assert letters[1].headers["gp-dlq-id"] == "x-2"
    assert reasons[2].startswith("invalid: plan p3 names no victims")
    assert letters[2].headers["gp-dlq-id"] == "d-3"
    assert letters[0].data == b"\x93not an event"  # the original bytes are kept


async def test_ignored_event_types_are_acknowledged_unread(nc: Client, topology: Topology) -> None:
    """A consumer told which types its handler ignores acknowledges those without handing
    them over; other types, and a message whose type the headers do not say, go through
    as before (the latter to the dead letters when it does not decode)."""
    js = nc.jetstream()
    pub = Publisher(nc, topology, "actuator")
    await pub.publish(dropped(5))
    await pub.publish(
        events.PlanActuated(
            id="a-6",
            occurred_at=NOW,
            plan_id="p6",
            preemptor="Workload/a/b",
            victims=(),
            fencing_token=1,
        )
    )
    await js.publish(
        topology.event_subject(events.PlanDropped), b"\x93junk", headers={"Nats-Msg-Id": "j-7"}
    )
    await pub.publish(dropped(8))
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(ev: events.Event, d: Delivery) -> None:
        handled.append(ev.id)
        if ev.id == "d-8":
            done.set()

    consumer = Consumer(
        nc,
        topology,
        "quota",
        durable="c-ignores",
        stream=topology.decisions_stream,
        subjects=[topology.service_wildcard("actuator")],
        handler=handler,
        ignores=lambda etype: etype == "PlanActuated",
    )
    stop = asyncio.Event()
    task = asyncio.ensure_future(consumer.run(stop))
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        stop.set()
        await task
    assert handled == ["d-5", "d-8"]
    assert consumer.skipped == 1
    lag = REGISTRY.get_sample_value("gangpreempt_consumer_lag", {"consumer": "c-ignores"})
    assert lag is not None  # the skipped one reports the lag too
    info = await js.consumer_info(topology.decisions_stream, "c-ignores")
    assert info.num_ack_pending == 0
    assert info.num_pending == 0
    letters = await stream_messages(nc, topology.dlq_stream, topology.dlq_subject("quota"), 1)
    assert [m.data for m in letters] == [b"\x93junk"]


async def test_oversized_event_is_refused_and_the_connection_stays_up(
    nc: Client, topology: Topology
) -> None:
    pub = Publisher(nc, topology, "ingest")
    big = events.ObjectUpserted(
        id="big", occurred_at=NOW, kind="Workload", key="a/b", body=b"x" * (nc.max_payload - 50)
    )
    with pytest.raises(Oversized, match="max_payload"):
        await pub.publish(big)
    assert nc.is_connected
    ack = await pub.publish(dropped(5))
    assert ack.seq >= 1


async def test_lease_is_exclusive_and_its_token_grows(nc: Client, topology: Topology) -> None:
    # 2.5 s: the first lease (never renewed) must outlive the 0.4 s look at the standby
    # even when a busy machine stalls the test for a while.
    kv = await leases_bucket(nc.jetstream(), topology, ttl=2.5)
    stop = asyncio.Event()
    first = Lease(kv, "actuator", "one", ttl=2.5)
    second = Lease(kv, "actuator", "two", ttl=2.5)
    token1 = await first.acquire(stop)
    waiting = asyncio.ensure_future(second.acquire(stop))
    await asyncio.sleep(0.4)
    assert not waiting.done()  # the second holder stands by
    await first.release()
    token2 = await asyncio.wait_for(waiting, 3)
    assert token1 is not None
    assert token2 is not None
    assert token2 > token1
    # A holder that stops renewing loses the lease to the server-side expiry.
    third = Lease(kv, "actuator", "three", ttl=2.5)
    token3 = await asyncio.wait_for(third.acquire(stop), 10)
    assert token3 is not None
    assert token3 > token2
    keeper = asyncio.ensure_future(second.keep(stop))
    await asyncio.wait_for(second.lost.wait(), 3)
    stop.set()
    await keeper


async def test_lease_expiring_during_the_clients_create_is_acquired(
    nc: Client, topology: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's create re-reads the key after a conflict; if the old holder's lease
    expires in that instant the read says "not found". That is a free lease, not a
    failure: acquire tries again and gets it."""
    kv = await leases_bucket(nc.jetstream(), topology, ttl=1.0)
    real_create = kv.create
    calls = 0

    async def create_racing_the_expiry(key: str, value: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyNotFoundError
        return await real_create(key, value)

    monkeypatch.setattr(kv, "create", create_racing_the_expiry)
    token = await asyncio.wait_for(
        Lease(kv, "actuator", "one", ttl=1.0).acquire(asyncio.Event()), 3
    )
    assert calls == 2
    assert token is not None
    # The value names the holder and its token, for sinks that check the lease itself.
    assert parse_lease((await kv.get("actuator")).value) == ("one", token)


async def test_replica_rebuilds_and_follows_state(nc: Client, topology: Topology) -> None:
    pub = Publisher(nc, topology, "ingest")

    def upsert(name: str, rv: str) -> events.ObjectUpserted:
        wl = Workload(
            namespace="ns",
            name=name,
            resource_version=rv,
            pod_sets=(PodSet("main", 1, {"cpu": 1000}),),
        )
        return events.ObjectUpserted(
            id=f"{name}@{rv}",
            occurred_at=NOW,
            kind="Workload",
            key=wl.key,
            resource_version=rv,
            body=kinds.encode_object(wl),
        )

    await pub.publish(upsert("a.b", "1"))  # a dotted name gets its own subject
    await pub.publish(upsert("a", "1"))
    await pub.publish(upsert("a", "2"))
    replica = StateReplica(nc, topology, "test")
    await replica.start()
    await replica.caught_up()
    assert set(replica.state.workloads) == {"ns/a.b", "ns/a"}
    assert replica.state.workloads["ns/a"].resource_version == "2"
    await pub.publish(
        events.ObjectDeleted(id="del", occurred_at=NOW, kind="Workload", key="ns/a.b")
    )
    await replica.caught_up()
    assert set(replica.state.workloads) == {"ns/a"}


async def test_trace_context_crosses_the_bus(nc: Client, topology: Topology) -> None:
    exporter = InMemorySpanExporter()
    setup_tracing("test", SimpleSpanProcessor(exporter))
    pub = Publisher(nc, topology, "actuator")
    await pub.publish(dropped(6))
    done = asyncio.Event()

    async def handler(ev: object, d: Delivery) -> None:
        done.set()

    await consume_actuator_events(nc, topology, "c-trace", handler, done)
    spans = {s.name: s for s in exporter.get_finished_spans() if topology.prefix in s.name}
    publish = spans[f"publish {topology.prefix}.actuator.plan-dropped"]
    process = spans[f"process {topology.prefix}.actuator.plan-dropped"]
    assert process.context.trace_id == publish.context.trace_id
    assert process.parent is not None
    assert process.parent.span_id == publish.context.span_id


async def test_a_stream_read_is_whole_or_fails(nc: Client, topology: Topology) -> None:
    js = nc.jetstream()
    consumers = (await js.stream_info(topology.decisions_stream)).state.consumer_count
    pub = Publisher(nc, topology, "actuator", group_commit=False)
    for i in range(1200):  # more than one fetch
        await pub.send(dropped(i))
    await pub.publish(dropped(1200))
    subject = topology.event_subject(events.PlanDropped)
    msgs = await read_subject(js, topology.decisions_stream, subject)
    assert [events.decode(m.data).id for m in msgs] == [f"d-{i}" for i in range(1201)]
    # a subject with nothing on it is read at once, as nothing
    assert await read_subject(js, topology.decisions_stream, f"{topology.prefix}.quota.>") == []
    # a read that cannot finish in time says how far it got instead of returning part
    with pytest.raises(Transient, match=r"read \d+ of the 1201 messages"):
        await read_subject(js, topology.decisions_stream, subject, timeout=0.0)
    # and the reads leave no consumer behind
    info = await js.stream_info(topology.decisions_stream)
    assert info.state.consumer_count == consumers
