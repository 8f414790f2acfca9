"""A flood of work against a real nats-server (issue 25): a batch that takes several
AckWaits is not redelivered while it is handled (its unsettled messages are kept alive),
batches shrink for a slow handler, a held message stays the handler's, and the victims
service's searches take turns with the rest of the event loop."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from gangpreempt import events
from gangpreempt.bus import HOLD, Consumer, Publisher, Topology, connected
from gangpreempt.bus.consuming import Delivery
from gangpreempt.bus.records import RecordStore
from gangpreempt.config import Settings
from services.runtime import ServiceContext
from services.victims.service import Victims
from tests.waiting import eventually, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def dropped(i: int) -> events.PlanDropped:
    return events.PlanDropped(
        id=f"d-{i}", occurred_at=NOW, plan_id=f"p{i}", preemptor="Workload/a/b", reason="r"
    )


class Recording(Consumer):
    """A consumer that notes the size of every batch it fetched."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []

    async def _process_batch(self, msgs: list[Msg], stop: asyncio.Event) -> None:
        self.batches.append(len(msgs))
        await super()._process_batch(msgs, stop)


def consumer(
    nc: Client, topology: Topology, durable: str, handler: Any, **options: Any
) -> Recording:
    return Recording(
        nc,
        topology,
        "quota",
        durable=durable,
        stream=topology.decisions_stream,
        subjects=[topology.service_wildcard("actuator")],
        handler=handler,
        **options,
    )


async def publish_dropped(nc: Client, topology: Topology, n: int) -> None:
    pub = Publisher(nc, topology, "actuator")
    for i in range(n):
        await pub.publish(dropped(i))


async def run_until(c: Consumer, check: Any, timeout: float, what: str) -> None:
    stop = asyncio.Event()
    task = asyncio.ensure_future(c.run(stop))
    try:
        await until(check, timeout, what)
    finally:
        stop.set()
        await task


class OtherReplica:
    """A second replica on the same durable consumer, with its own thread, event loop and
    connection (as another process would be: replica A blocking its loop does not stop
    this one fetching)."""

    def __init__(self, url: str, topology: Topology, durable: str, ack_wait: float) -> None:
        self.url = url
        self.topology = topology
        self.durable = durable
        self.ack_wait = ack_wait
        self.handled: list[tuple[str, str, int]] = []
        self.fetching = threading.Event()
        self.quit = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self.main()), daemon=True)

    async def main(self) -> None:
        async def handle(ev: events.PlanDropped, d: Delivery) -> None:
            self.handled.append(("b", ev.plan_id, d.num_delivered))

        async with connected(self.url, "replica-b") as nc:
            c = consumer(nc, self.topology, self.durable, handle, ack_wait=self.ack_wait)
            stop = asyncio.Event()
            task = asyncio.ensure_future(c.run(stop))
            await c.ready.wait()
            self.fetching.set()
            while not self.quit.is_set():
                await asyncio.sleep(0.02)
            stop.set()
            await task

    async def start(self) -> None:
        self.thread.start()
        await until(self.fetching.is_set, 15, "replica b fetching")

    async def stop(self) -> None:
        self.quit.set()
        await asyncio.to_thread(self.thread.join, 15)


@pytest.mark.parametrize("work", ["blocking", "awaiting"])
async def test_a_batch_longer_than_ack_wait_is_not_redelivered(
    nc: Client, nats_url: str, topology: Topology, work: str
) -> None:
    """12 messages in one batch of replica A, each taking 0.25 s (holding the event loop,
    or awaiting): 3 s of work against an AckWait of 1 s, while replica B fetches from the
    same durable consumer. Kept alive, nothing is redelivered to B: each message is
    handled once, by A."""
    n = 12
    durable = "c-keepalive"
    await publish_dropped(nc, topology, n)
    handled: list[tuple[str, str, int]] = []

    async def handle(ev: events.PlanDropped, d: Delivery) -> None:
        if work == "blocking":
            time.sleep(0.25)  # a synchronous search: the loop is blocked meanwhile
        else:
            await asyncio.sleep(0.25)
        handled.append(("a", ev.plan_id, d.num_delivered))

    a = consumer(nc, topology, durable, handle, batch=n, ack_wait=1.0)
    other = OtherReplica(nats_url, topology, durable, ack_wait=1.0)
    js = nc.jetstream()
    redelivered: list[int] = []

    async def drained() -> bool:
        info = await js.consumer_info(topology.decisions_stream, durable)
        redelivered.append(info.num_redelivered)
        return len(handled) >= n and not info.num_pending and not info.num_ack_pending

    stop = asyncio.Event()
    task = asyncio.ensure_future(a.run(stop))
    try:
        await until(lambda: bool(a.batches), 15, "replica a's first batch")
        await other.start()
        await eventually(drained, 30, "every message handled and acknowledged")
    finally:
        stop.set()
        await task
        await other.stop()
    assert a.batches[0] == n  # one batch, 3 AckWaits long
    assert sorted(handled + other.handled) == sorted(("a", f"p{i}", 1) for i in range(n))
    info = await js.consumer_info(topology.decisions_stream, durable)
    assert max(redelivered) == 0
    assert info.delivered.consumer_seq == n  # no delivery beyond the first of each
    assert a.kept_alive > 0


async def test_a_slow_handler_gets_smaller_batches(nc: Client, topology: Topology) -> None:
    """AckWait 2 s: a batch should take 0.2 s. At 50 ms a message the first batch (20,
    nothing measured yet) is followed by batches of at most 4; a fast handler keeps the
    whole batch."""
    await publish_dropped(nc, topology, 40)
    slow_seen: list[str] = []

    async def slow(ev: events.PlanDropped, d: Delivery) -> None:
        await asyncio.sleep(0.05)
        slow_seen.append(ev.plan_id)

    c = consumer(nc, topology, "c-slow", slow, batch=20, ack_wait=2.0)
    await run_until(c, lambda: len(slow_seen) >= 40, 30, "40 messages handled slowly")
    assert c.batches[0] == 20
    assert len(c.batches) > 3
    assert all(1 <= b <= 4 for b in c.batches[1:]), c.batches
    assert c.per_message is not None
    assert c.per_message >= 0.05
    assert c.fetch_size() <= 4

    fast_seen: list[str] = []

    async def fast(ev: events.PlanDropped, d: Delivery) -> None:
        fast_seen.append(ev.plan_id)

    f = consumer(nc, topology, "c-fast", fast, batch=20, ack_wait=2.0)
    await run_until(f, lambda: len(fast_seen) >= 40, 30, "40 messages handled fast")
    assert f.batches[:2] == [20, 20]
    assert f.fetch_size() == 20


async def test_the_ack_wait_of_a_bound_consumer_is_the_servers(
    nc: Client, topology: Topology
) -> None:
    """A service binds to the consumer an admin provisioned (victims: AckWait 30 s); its
    keep-alive and batch budget follow that, not the constructor's default."""
    seen: list[str] = []

    async def handler(ev: Any, d: Delivery) -> None:
        seen.append(ev.id)

    c = Consumer(
        nc,
        topology,
        "ingest",
        durable=topology.durable("ingest"),
        stream=topology.decisions_stream,
        subjects=topology.decision_subjects,
        handler=handler,
        bind=True,
        ack_wait=99.0,
    )
    await publish_dropped(nc, topology, 1)
    await run_until(c, lambda: bool(seen), 15, "the message handled")
    assert c.ack_wait == 10.0  # bus/consumers.py: ingest's


async def test_a_held_message_is_the_handlers_to_keep(nc: Client, topology: Topology) -> None:
    """The keep-alive stops when the handler returns HOLD: a message held and never
    settled comes back after AckWait (1 s); the handler settles the second delivery."""
    await publish_dropped(nc, topology, 1)
    deliveries: list[int] = []

    async def handler(ev: events.PlanDropped, d: Delivery) -> object:
        deliveries.append(d.num_delivered)
        if d.num_delivered > 1:
            await d.msg.ack()
        return HOLD

    c = consumer(nc, topology, "c-hold", handler, ack_wait=1.0)
    await run_until(c, lambda: len(deliveries) >= 2, 15, "the held message back")
    assert deliveries == [1, 2]
    info = await nc.jetstream().consumer_info(topology.decisions_stream, "c-hold")
    assert info.num_ack_pending == 0


async def test_victims_searches_take_turns_with_the_loop(
    nc: Client, topology: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    """32 requests handled 16 at a time, each search holding the loop for 10 ms: between
    any two searches the loop turns (a ticking task gets in), so a STATE change never
    waits for a run of searches."""
    stop = asyncio.Event()
    ctx = ServiceContext("victims", Settings(prefix=topology.prefix), nc, stop)
    victims = Victims(ctx)
    trail: list[str] = []

    def search(req: events.PreemptionRequested) -> events.Event:
        trail.append("search")
        time.sleep(0.01)
        return events.PreemptionInfeasible(
            id=f"infeasible-{req.request_id}",
            occurred_at=NOW,
            request_id=req.request_id,
            preemptor=req.workload,
            message="stub",
        )

    monkeypatch.setattr(victims, "answer", search)
    pub = Publisher(nc, topology, "quota")
    n = 32
    for i in range(n):
        await pub.publish(
            events.PreemptionRequested(
                id=f"req-{i}",
                occurred_at=NOW,
                request_id=f"r{i}",
                workload=f"PodGroup/ns/g{i}",
                uid="",
                resource_version="1",
                cluster_queue="",
                priority=1000,
                flavors={},
            )
        )

    async def tick() -> None:
        while True:
            trail.append("tick")
            await asyncio.sleep(0)

    async def run() -> None:
        victims.store = RecordStore(await nc.jetstream().key_value(topology.plans_bucket))
        await victims.consumer.run(stop)

    ticker = asyncio.ensure_future(tick())
    task = asyncio.ensure_future(run())
    try:
        await until(lambda: trail.count("search") >= n, 30, "every request searched")
    finally:
        stop.set()
        await task
        ticker.cancel()
    searches = [i for i, step in enumerate(trail) if step == "search"]
    assert len(searches) == n
    back_to_back = [a for a, b in itertools.pairwise(searches) if b == a + 1]
    assert not back_to_back, f"{len(back_to_back)} searches ran right after another"
