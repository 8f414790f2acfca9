"""Per-service NATS users against a real nats-server: each service may publish its own
events and dead letters, use its own consumer and buckets, and nothing else; nobody but
the admin reads the dead letters."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Iterator
from datetime import UTC, datetime
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerConfig

from gangpreempt import events
from gangpreempt.bus import SERVICES, NatsServer, Topology, connected, provision
from gangpreempt.bus.consumers import consumer_config, consumer_subjects
from gangpreempt.bus.explainwire import explain_subject
from gangpreempt.bus.permissions import ADMIN, inbox_prefix, server_authorization

pytestmark = pytest.mark.integration
TOPOLOGY = Topology("perm")
PASSWORDS = {user: secrets.token_urlsafe(12) for user in (ADMIN, *SERVICES)}


@pytest.fixture(scope="module")
def secured_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    auth = server_authorization(TOPOLOGY, PASSWORDS)
    server = NatsServer(str(tmp_path_factory.mktemp("nats-auth")), extra_config=auth).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
async def provisioned(secured_url: str) -> str:
    """The streams, consumers and buckets, created by the admin (idempotent)."""
    async with connected(secured_url, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
        await provision(nc.jetstream(), TOPOLOGY, lease_ttl=2.0)
    return secured_url


def as_service(url: str, service: str) -> object:
    return connected(
        url,
        service,
        user=service,
        password=PASSWORDS[service],
        inbox_prefix=inbox_prefix(service),
    )


def pending(workload: str) -> events.Pending:
    return events.Pending(
        id=f"pending-{secrets.token_hex(4)}",
        occurred_at=datetime.now(UTC),
        workload=workload,
        uid="",
        cluster_queue="q",
        mode="NoFit",
        message="m",
    )


def proposed() -> events.PlanProposed:
    return events.PlanProposed(
        id=f"proposed-{secrets.token_hex(4)}",
        occurred_at=datetime.now(UTC),
        plan_id="p",
        request_id="r",
        preemptor="Workload/ns/w",
        preemptor_uid="",
        cluster_queue="q",
        pod_sets=(),
        flavors={},
        victims=(),
    )


async def publish(nc: Client, event: events.Event, timeout: float = 5.0) -> None:
    await nc.jetstream().publish(TOPOLOGY.subject_of(event), events.encode(event), timeout=timeout)


async def test_a_service_publishes_its_own_events(provisioned: str) -> None:
    async with as_service(provisioned, "quota") as nc:  # type: ignore[attr-defined]
        await publish(nc, pending("Workload/ns/w"))
    async with as_service(provisioned, "victims") as nc:  # type: ignore[attr-defined]
        await publish(nc, proposed())


@pytest.mark.parametrize(
    ("service", "event"),
    [
        ("quota", proposed()),  # a victims event
        ("victims", pending("Workload/ns/w")),  # a quota event
        ("actuator", pending("Workload/ns/w")),
        (
            "victims",
            events.ObjectDeleted(
                id="x", occurred_at=datetime.now(UTC), kind="Pod", key="ns/p"
            ),  # state is ingest's
        ),
    ],
)
async def test_a_service_cannot_publish_another_services_events(
    provisioned: str, service: str, event: events.Event
) -> None:
    async with as_service(provisioned, service) as nc:  # type: ignore[attr-defined]
        with pytest.raises(nats.errors.TimeoutError):
            await publish(nc, event, timeout=1.0)


async def test_dead_letters_are_written_by_each_service_and_read_by_the_admin_only(
    provisioned: str,
) -> None:
    async with as_service(provisioned, "victims") as nc:  # type: ignore[attr-defined]
        js = nc.jetstream(timeout=1.0)
        await js.publish(TOPOLOGY.dlq_subject("victims"), b"bad", timeout=5.0)
        with pytest.raises(nats.errors.TimeoutError):  # not quota's dead letters
            await js.publish(TOPOLOGY.dlq_subject("quota"), b"bad", timeout=1.0)
        with pytest.raises(nats.errors.TimeoutError):  # no reading them
            await js.subscribe(
                TOPOLOGY.dlq_subject("victims"), stream=TOPOLOGY.dlq_stream, ordered_consumer=True
            )
    async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
        info = await nc.jetstream().stream_info(TOPOLOGY.dlq_stream)
        assert info.state.messages == 1


async def denied(call: Awaitable[object]) -> None:
    """A call the server refuses for lack of permission: it gets no answer (an allowed
    call is given the client's default time, which a busy machine may need)."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(call, 1.0)


async def test_the_plan_records_are_written_by_quota_and_the_actuator_only(
    provisioned: str,
) -> None:
    for service in ("quota", "actuator"):
        async with as_service(provisioned, service) as nc:  # type: ignore[attr-defined]
            kv = await nc.jetstream().key_value(TOPOLOGY.plans_bucket)
            await kv.put(f"probe-{service}", b"1")
            assert (await kv.get(f"probe-{service}")).value == b"1"
            # ...and follow them (ordered consumers on the bucket's stream)
            watcher = await kv.watchall()
            # The client may put its "nothing pending" marker before the entries the
            # server already sent (a busy machine): skip markers, wait for an entry.
            entry = None
            while entry is None:
                entry = await watcher.updates(timeout=5)
            assert entry.key.startswith("probe-")
            await watcher.stop()
    async with as_service(provisioned, "victims") as nc:  # type: ignore[attr-defined]
        kv = await nc.jetstream().key_value(TOPOLOGY.plans_bucket)
        assert (await kv.get("probe-quota")).value == b"1"  # victims reads a record
        await denied(kv.put("probe-victims", b"1"))
    async with as_service(provisioned, "ingest") as nc:  # type: ignore[attr-defined]
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream(timeout=1.0).key_value(TOPOLOGY.plans_bucket)


async def test_ingest_reads_the_leases_and_each_holder_writes_only_its_own(
    provisioned: str,
) -> None:
    async with as_service(provisioned, "actuator") as nc:  # type: ignore[attr-defined]
        kv = await nc.jetstream().key_value(TOPOLOGY.leases_bucket)
        await kv.put("actuator", b"holder 7")
    async with as_service(provisioned, "quota") as nc:  # type: ignore[attr-defined]
        kv = await nc.jetstream().key_value(TOPOLOGY.leases_bucket)
        await kv.put("quota", b"quota-holder 9")  # its own lease
        assert (await kv.get("quota")).value == b"quota-holder 9"
        await denied(kv.put("actuator", b"quota 10"))  # never the actuator's
    async with as_service(provisioned, "ingest") as nc:  # type: ignore[attr-defined]
        kv = await nc.jetstream().key_value(TOPOLOGY.leases_bucket)
        assert (await kv.get("actuator")).value == b"holder 7"  # the sim checks tokens
        assert (await kv.get("quota")).value == b"quota-holder 9"  # and admissions'
        await denied(kv.put("actuator", b"ingest 8"))
        await denied(kv.put("quota", b"ingest 8"))
    async with as_service(provisioned, "victims") as nc:  # type: ignore[attr-defined]
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream(timeout=1.0).key_value(TOPOLOGY.leases_bucket)


@pytest.mark.parametrize("service", ["ingest", "quota", "victims"])
async def test_a_service_binds_its_consumer_and_cannot_create_or_widen_one(
    provisioned: str, service: str
) -> None:
    durable = TOPOLOGY.durable(service)
    async with as_service(provisioned, service) as nc:  # type: ignore[attr-defined]
        js = nc.jetstream()
        psub = await js.pull_subscribe_bind(durable=durable, stream=TOPOLOGY.decisions_stream)
        with contextlib.suppress(nats.errors.TimeoutError):
            await psub.fetch(1, timeout=0.2)
        await psub.unsubscribe()  # else the connection's drain waits for it (30 s)
        wider = consumer_config(TOPOLOGY, service)
        wider.filter_subjects = [f"{TOPOLOGY.prefix}.>"]
        with pytest.raises(nats.errors.TimeoutError):  # its own, with a wider filter
            await js.add_consumer(TOPOLOGY.decisions_stream, wider, timeout=1.0)
        other = consumer_config(TOPOLOGY, service)
        other.durable_name = f"{durable}-other"
        with pytest.raises(nats.errors.TimeoutError):  # a second durable consumer
            await js.add_consumer(TOPOLOGY.decisions_stream, other, timeout=1.0)
        named = ConsumerConfig(durable_name=f"{service}-x", filter_subject=TOPOLOGY.state_wildcard)
        with pytest.raises(nats.errors.TimeoutError):  # a durable consumer on STATE
            await js.add_consumer(TOPOLOGY.state_stream, named, timeout=1.0)
        # What it may do on STATE: follow it with an ordered (ephemeral) consumer.
        sub = await js.subscribe(
            TOPOLOGY.state_wildcard, stream=TOPOLOGY.state_stream, ordered_consumer=True
        )
        await sub.unsubscribe()
    async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
        info = await nc.jetstream().consumer_info(TOPOLOGY.decisions_stream, durable)
        assert info.config.filter_subjects == consumer_subjects(TOPOLOGY, service)


async def test_only_the_admin_asks_victims_to_explain(provisioned: str) -> None:
    """victims answers on the explain subject; the admin may ask, a service may not."""
    subject = explain_subject(TOPOLOGY)
    async with as_service(provisioned, "victims") as victims:  # type: ignore[attr-defined]

        async def answer(msg: Any) -> None:
            await msg.respond(b"explained")

        sub = await victims.subscribe(subject, queue="victims", cb=answer)
        await victims.flush()
        async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as admin:
            reply = await admin.request(subject, b"{}", timeout=5.0)
            assert reply.data == b"explained"
        async with as_service(provisioned, "quota") as quota:  # type: ignore[attr-defined]
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await quota.request(subject, b"{}", timeout=0.5)
        await sub.unsubscribe()
