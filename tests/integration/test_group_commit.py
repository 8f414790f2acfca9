"""Group commit on DECISIONS against a real nats-server: the events a publisher makes
while a send is in flight go together as one ``DecisionBatch`` message, and a consumer
handles each of them as if it had come alone: in order, once, its own trace, its own
dead letter, and a transient failure giving back only what was not handled."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gangpreempt import events
from gangpreempt.bus import Publisher, Topology
from gangpreempt.bus.consuming import Delivery
from gangpreempt.bus.publishing import HEADER_BATCH, MAX_BATCH, groups
from gangpreempt.bus.reading import read_subject
from gangpreempt.errors import InvalidInput, Transient
from gangpreempt.telemetry import setup_tracing
from tests.integration.running import consume_actuator_events

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def dropped(i: int, reason: str = "r") -> events.PlanDropped:
    return events.PlanDropped(
        id=f"d-{i}", occurred_at=NOW, plan_id=f"p{i}", preemptor="Workload/a/b", reason=reason
    )


def actuated(i: int) -> events.PlanActuated:
    return events.PlanActuated(
        id=f"a-{i}",
        occurred_at=NOW,
        plan_id=f"p{i}",
        preemptor="Workload/a/b",
        victims=(),
        fencing_token=1,
    )


async def stored(nc: Client, topology: Topology) -> list[Any]:
    return await read_subject(
        nc.jetstream(), topology.decisions_stream, topology.service_wildcard("actuator")
    )


async def settled(nc: Client, topology: Topology, durable: str) -> None:
    info = await nc.jetstream().consumer_info(topology.decisions_stream, durable)
    assert info.num_ack_pending == 0
    assert info.num_pending == 0


async def test_events_made_while_a_send_is_stored_go_as_one_batch_in_order(
    nc: Client, topology: Topology
) -> None:
    pub = Publisher(nc, topology, "actuator")
    first = await pub.send(dropped(0))  # alone: nothing was in flight
    rest = [await pub.send(dropped(i)) for i in range(1, 40)]
    mixed = [await pub.send(actuated(40)), await pub.send(dropped(41))]
    acks = await asyncio.wait_for(asyncio.gather(first, *rest, *mixed), 10)
    msgs = await stored(nc, topology)
    unpacked = [e.id for m in msgs for e in events.decode_all(m.data)]
    assert unpacked == [f"d-{i}" for i in range(40)] + ["a-40", "d-41"]
    assert len(msgs) < 42  # some went together
    batches = [m for m in msgs if m.headers.get(HEADER_BATCH)]
    assert batches
    assert pub.batches == len(batches)
    for m in batches:
        batch = events.decode(m.data)
        assert isinstance(batch, events.DecisionBatch)
        assert m.headers[HEADER_BATCH] == str(len(batch.items))
        kinds = {events.event_type(e) for e in events.unpack(batch)}
        assert kinds == {batch.kind}  # one type per batch, on that type's subject
        assert m.subject == topology.event_subject(type(events.unpack(batch)[0]))
    # every caller's ack is its message's
    assert [a.seq for a in acks] == sorted(a.seq for a in acks)


class W:
    def __init__(self, subject: str, size: int = 10, key: str | None = "g") -> None:
        self.subject = subject
        self.size = size
        self.key = key


def placed(ws: list[Any], budget: int = 10**9) -> list[list[int]]:
    return [[ws.index(w) for w in g] for g in groups(ws, budget)]


def test_groups_cut_by_size_and_count() -> None:
    ws: list[Any] = [W("a"), W("a"), W("a", 50), W("a")]
    assert placed(ws, budget=60) == [[0, 1], [2, 3]]
    many: list[Any] = [W("a", 1) for _ in range(MAX_BATCH + 5)]
    assert [len(g) for g in groups(many, budget=10**9)] == [MAX_BATCH, 5]
    big: list[Any] = [W("a", 100)]
    assert [len(g) for g in groups(big, budget=10)] == [1]  # sized alone before


def test_groups_keep_each_gangs_order_and_each_subjects() -> None:
    # two gangs' actuations interleaved: each gang's victim before its plan, and every
    # subject in order
    ws: list[Any] = [
        W("victim", key="g1"),
        W("plan", key="g1"),
        W("victim", key="g2"),
        W("plan", key="g2"),
    ]
    assert placed(ws) == [[0, 2], [1, 3]]
    # the same gang's events of one subject cannot pass its event of another
    ws = [W("a", key="g1"), W("b", key="g1"), W("a", key="g1")]
    assert placed(ws) == [[0], [1], [2]]
    # an event about no gang keeps its place against all
    ws = [W("a", key="g1"), W("b", key=None), W("a", key="g2"), W("b", key="g3")]
    assert placed(ws) == [[0], [1, 3], [2]]
    ws = [W("a", key="g1"), W("b", key="g2"), W("a", key=None)]
    assert placed(ws) == [[0], [1], [2]]


def test_groups_never_store_an_event_before_one_it_must_follow() -> None:
    import random

    rng = random.Random(7)
    for _ in range(300):
        ws: list[Any] = [
            W(rng.choice("abc"), rng.randint(1, 30), rng.choice(["g1", "g2", "g3", None]))
            for _ in range(rng.randint(1, 25))
        ]
        stored = [w for g in groups(ws, budget=60) for w in g]
        assert sorted(map(id, stored)) == sorted(map(id, ws))
        at = {id(w): n for n, w in enumerate(stored)}
        for i, early in enumerate(ws):
            for late in ws[i + 1 :]:
                bound = (
                    early.subject == late.subject
                    or early.key is None
                    or late.key is None
                    or early.key == late.key
                )
                if bound:
                    assert at[id(early)] < at[id(late)]


async def test_a_batch_is_handled_event_by_event_and_acknowledged_once(
    nc: Client, topology: Topology
) -> None:
    pub = Publisher(nc, topology, "actuator")
    await asyncio.gather(*[await pub.send(dropped(i)) for i in range(30)])
    assert pub.batches >= 1
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(ev: events.PlanDropped, d: Delivery) -> None:
        handled.append(ev.id)
        if len(handled) == 30:
            done.set()

    await consume_actuator_events(nc, topology, "c-batch", handler, done)
    assert handled == [f"d-{i}" for i in range(30)]
    await settled(nc, topology, "c-batch")


async def test_a_transient_failure_gives_back_only_what_was_not_handled(
    nc: Client, topology: Topology
) -> None:
    pub = Publisher(nc, topology, "actuator")
    await asyncio.gather(*[await pub.send(dropped(i)) for i in range(12)])
    calls: list[tuple[str, int]] = []
    done = asyncio.Event()

    async def handler(ev: events.PlanDropped, d: Delivery) -> None:
        calls.append((ev.id, d.num_delivered))
        if ev.id == "d-5" and d.num_delivered == 1:
            raise Transient("not yet")
        if ev.id == "d-5":
            done.set()

    await consume_actuator_events(nc, topology, "c-transient-batch", handler, done)
    handled = [eid for eid, _ in calls]
    # each event once, except the one that failed, handled again on redelivery
    assert sorted(handled, key=lambda e: int(e[2:])) == sorted(
        [f"d-{i}" for i in range(12)] + ["d-5"], key=lambda e: int(e[2:])
    )
    assert ("d-5", 1) in calls
    assert any(eid == "d-5" and n > 1 for eid, n in calls)
    await settled(nc, topology, "c-transient-batch")


async def test_an_invalid_event_of_a_batch_is_dead_lettered_alone(
    nc: Client, topology: Topology
) -> None:
    pub = Publisher(nc, topology, "actuator")
    reasons = ["fine"] * 10
    reasons[3] = "refuse me"
    sends = [await pub.send(dropped(i, reason=r)) for i, r in enumerate(reasons)]
    await asyncio.gather(*sends)
    # a hand-made batch whose second item is on the wrong subject, third not an event
    junk = msgspec.msgpack.encode({"type": "PlanDropped", "id": "x-2", "plan_id": 7})
    items = [events.encode(dropped(20)), events.encode(actuated(99)), junk]
    items.append(events.encode(dropped(21)))
    batch = events.DecisionBatch(
        id="hand-made",
        occurred_at=NOW,
        kind="PlanDropped",
        items=tuple(events.BatchItem(msgspec.Raw(body)) for body in items),
    )
    await nc.jetstream().publish(
        topology.event_subject(events.PlanDropped),
        events.encode(batch),
        headers={"Nats-Msg-Id": batch.id, HEADER_BATCH: "4"},
    )
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(ev: events.PlanDropped, d: Delivery) -> None:
        if ev.reason == "refuse me":
            raise InvalidInput(f"plan {ev.plan_id} names no victims")
        handled.append(ev.id)
        if ev.id == "d-21":
            done.set()

    await consume_actuator_events(nc, topology, "c-dlq-batch", handler, done)
    assert handled == [f"d-{i}" for i in range(10) if i != 3] + ["d-20", "d-21"]
    await settled(nc, topology, "c-dlq-batch")
    letters = await read_subject(nc.jetstream(), topology.dlq_stream, topology.dlq_subject("quota"))
    by_id = {m.headers["gp-dlq-id"]: m for m in letters}
    assert by_id["d-3"].headers["gp-dlq-reason"].startswith("invalid: plan p3 names no victims")
    assert events.decode(by_id["d-3"].data).id == "d-3"  # the event alone, not the batch
    assert "does not belong on" in by_id["a-99"].headers["gp-dlq-reason"]
    undecodable = by_id["x-2"]
    assert undecodable.data == junk  # its own bytes
    assert "cannot decode" in undecodable.headers["gp-dlq-reason"]
    assert "item 2" in undecodable.headers["gp-dlq-reason"]


async def test_an_event_sent_again_in_another_batch_is_handled_once(
    nc: Client, topology: Topology
) -> None:
    """A retry may compose a batch differently: the stream stores it, the consumer
    drops the events it handled."""
    pub = Publisher(nc, topology, "actuator")
    await asyncio.gather(*[await pub.send(dropped(i)) for i in range(5)])
    await asyncio.gather(*[await pub.send(dropped(i)) for i in range(3, 8)])
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(ev: events.PlanDropped, d: Delivery) -> None:
        handled.append(ev.id)
        if ev.id == "d-7":
            done.set()

    consumer = await consume_actuator_events(nc, topology, "c-dedupe", handler, done)
    assert handled == [f"d-{i}" for i in range(8)]
    assert consumer.duplicates == 2  # d-3 and d-4, or the whole repeat if sent alone
    await settled(nc, topology, "c-dedupe")


async def test_each_event_of_a_batch_keeps_its_own_trace(nc: Client, topology: Topology) -> None:
    exporter = InMemorySpanExporter()
    setup_tracing("test", SimpleSpanProcessor(exporter))
    pub = Publisher(nc, topology, "actuator")
    await asyncio.gather(*[await pub.send(dropped(i)) for i in range(6)])
    assert pub.batches >= 1
    done = asyncio.Event()
    seen: list[str] = []

    async def handler(ev: events.PlanDropped, d: Delivery) -> None:
        seen.append(ev.id)
        if len(seen) == 6:
            done.set()

    await consume_actuator_events(nc, topology, "c-trace-batch", handler, done)
    spans = [s for s in exporter.get_finished_spans() if topology.prefix in s.name]
    publishes = {
        s.attributes["messaging.message.id"]: s for s in spans if s.name.startswith("publish")
    }
    processes = {
        s.attributes["messaging.message.id"]: s for s in spans if s.name.startswith("process")
    }
    assert set(processes) == {f"d-{i}" for i in range(6)}
    for eid, process in processes.items():
        publish = publishes[eid]
        assert process.context.trace_id == publish.context.trace_id
        assert process.parent is not None
        assert process.parent.span_id == publish.context.span_id
    assert len({p.context.trace_id for p in processes.values()}) == 6
