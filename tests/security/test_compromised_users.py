"""The attack suite's NATS part: each service's user as a compromised service would use
it, against a real nats-server on the generated configuration. Each service may publish
its own events and dead letters, use its own consumer and buckets, and nothing else:
forged events of another service, plan record and lease writes it does not own, consumer
creation, widening or redirection, a whole-bucket purge or roll-up, reading the dead
letters (the admin's alone), asking victims to explain, filling the streams past their
limits: each is refused. (The rogue route: ``test_rogue_route.py``; a lying ingest:
``test_lying_ingest.py``; forged plans: ``test_forged_plans.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Awaitable, Iterator
from datetime import UTC, datetime
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy, DiscardPolicy

from gangpreempt import events
from gangpreempt.bus import SERVICES, NatsServer, Topology, connected, provision
from gangpreempt.bus.consumers import consumer_config, consumer_subjects
from gangpreempt.bus.explainwire import explain_subject
from gangpreempt.bus.following import Follower
from gangpreempt.bus.permissions import ADMIN, inbox_prefix, server_authorization
from gangpreempt.bus.provisioning import LIMITS, StreamLimits
from gangpreempt.bus.records import RecordStore
from gangpreempt.planning import records as r
from tests.waiting import eventually, until

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


async def first_followed(nc: Client, bucket: str) -> str:
    """The subject of the first message an ordered consumer on ``bucket`` delivers (a
    ``Follower``, as the services' record books use)."""
    seen: list[str] = []

    async def took(msg: Msg) -> None:
        seen.append(msg.subject)

    follower = Follower(nc, f"KV_{bucket}", f"$KV.{bucket}.>", took)
    await follower.start()
    try:
        await until(lambda: bool(seen), what=f"a message of {bucket}")
    finally:
        await follower.stop()
    return seen[0]


async def test_the_plan_records_are_written_by_quota_and_the_actuator_only(
    provisioned: str,
) -> None:
    for service in ("quota", "actuator"):
        async with as_service(provisioned, service) as nc:  # type: ignore[attr-defined]
            kv = await nc.jetstream().key_value(TOPOLOGY.plans_bucket)
            await kv.put(f"probe-{service}", b"1")
            assert (await kv.get(f"probe-{service}")).value == b"1"
            # ...and follow them (an ordered consumer on the bucket's stream, as the
            # services' record books do)
            seen = await first_followed(nc, TOPOLOGY.plans_bucket)
            assert seen.startswith(f"$KV.{TOPOLOGY.plans_bucket}.probe-")
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


async def subject_count(url: str, stream: str, subject: str) -> int:
    """How many messages ``stream`` holds on ``subject`` (the admin asks)."""
    async with connected(url, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
        info = await nc.jetstream().stream_info(stream, subjects_filter=subject)
        return int((info.state.subjects or {}).get(subject, 0))


async def test_quota_cannot_purge_the_plans_bucket_but_retires_its_own_records(
    provisioned: str,
) -> None:
    """The review's finding: quota purged the whole bucket. Now no service can purge it
    at all, by the API (filtered or not) or by a roll-up header; quota retires an old
    record with expiring delete markers, which remove that key's messages only."""
    stream, bucket = f"KV_{TOPOLOGY.plans_bucket}", TOPOLOGY.plans_bucket
    now = datetime.now(UTC)
    async with as_service(provisioned, "quota") as nc:  # type: ignore[attr-defined]
        js = nc.jetstream()
        store = RecordStore(await js.key_value(bucket))
        for plan_id in ("kept", "retired"):
            await store.create(
                r.new_record(plan_id, f"req-{plan_id}", "Workload/ns/g", "ns/g", now)
            )
        found = await store.get("retired")
        assert found is not None
        await store.delete("retired", found[1])
        await denied(js.purge_stream(stream))  # the whole bucket
        await denied(js.purge_stream(stream, subject=f"$KV.{bucket}.kept"))  # nor one key
        with pytest.raises(nats.js.errors.APIError, match="rollup"):  # nor a roll-up
            await js.publish(f"$KV.{bucket}.kept", b"", headers={"Nats-Rollup": "all"})
        await store.purge("retired", ttl=1.0)
        assert await store.get("retired") is None
    async with as_service(provisioned, "actuator") as nc:  # type: ignore[attr-defined]
        await denied(nc.jetstream().purge_stream(stream))

    async def retired() -> bool:
        return await subject_count(provisioned, stream, f"$KV.{bucket}.retired") == 0

    await eventually(retired, 20.0, "every message of the retired record gone")
    assert await subject_count(provisioned, stream, f"$KV.{bucket}.kept") == 1
    async with as_service(provisioned, "victims") as nc:  # type: ignore[attr-defined]
        kept = await RecordStore(await nc.jetstream().key_value(bucket)).get("kept")
        assert kept is not None


async def test_a_service_cannot_find_read_or_repoint_another_services_consumer(
    provisioned: str,
) -> None:
    """The actuator follows STATE with an ordered consumer. Even given its name (which
    only the admin can list), quota cannot read it, list it, or turn its deliveries to
    itself; and the actuator keeps receiving."""
    stream = TOPOLOGY.state_stream
    got: list[str] = []

    async def took(msg: Msg) -> None:
        got.append(msg.subject)

    async with as_service(provisioned, "actuator") as actuator:  # type: ignore[attr-defined]
        follower = Follower(actuator, stream, TOPOLOGY.state_wildcard, took, DeliverPolicy.NEW)
        await follower.start()
        async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
            js = nc.jetstream()
            infos = [await js.consumer_info(stream, n) for n in await consumer_names(nc, stream)]
            (leaked,) = [
                i
                for i in infos
                if (i.config.deliver_subject or "").startswith(inbox_prefix("actuator"))
            ]
        async with as_service(provisioned, "quota") as quota:  # type: ignore[attr-defined]
            await denied(quota.request(f"$JS.API.CONSUMER.NAMES.{stream}", b"{}"))
            await denied(quota.request(f"$JS.API.CONSUMER.LIST.{stream}", b"{}"))
            await denied(quota.request(f"$JS.API.CONSUMER.INFO.{stream}.{leaked.name}", b""))
            await denied(quota.request(f"$JS.API.CONSUMER.DELETE.{stream}.{leaked.name}", b""))
            # The same consumer, delivering to quota's inbox: the one create subject quota
            # has takes a name in its body, and the server refuses the change.
            config = leaked.config.as_dict()
            config["name"] = leaked.name
            config["deliver_subject"] = f"{inbox_prefix('quota')}.stolen"
            answer = await quota.request(
                f"$JS.API.CONSUMER.CREATE.{stream}",
                json.dumps({"stream_name": stream, "config": config}).encode(),
                timeout=5.0,
            )
            assert "error" in json.loads(answer.data), answer.data
            # By the name in the subject: not quota's to use.
            await denied(
                quota.request(
                    f"$JS.API.CONSUMER.CREATE.{stream}.{leaked.name}",
                    json.dumps({"stream_name": stream, "config": config}).encode(),
                )
            )
        async with as_service(provisioned, "ingest") as ingest:  # type: ignore[attr-defined]
            subject = TOPOLOGY.state_subject("Pod", "ns/after")
            await ingest.jetstream().publish(subject, b"x", timeout=5.0)
        await until(lambda: subject in got, what="the actuator still following STATE")
        await follower.stop()


async def consumer_names(nc: Client, stream: str) -> list[str]:
    answer = await nc.request(f"$JS.API.CONSUMER.NAMES.{stream}", b"{}", timeout=5.0)
    return list(json.loads(answer.data).get("consumers") or [])


@pytest.mark.parametrize("service", ["victims", "ingest"])
async def test_a_service_follows_only_the_buckets_it_needs(provisioned: str, service: str) -> None:
    """victims reads records by key and ingest reads no record: neither may create a
    consumer on the plans bucket's stream (quota and the actuator follow it)."""
    async with as_service(provisioned, service) as nc:  # type: ignore[attr-defined]
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream().subscribe(
                f"$KV.{TOPOLOGY.plans_bucket}.>",
                stream=f"KV_{TOPOLOGY.plans_bucket}",
                ordered_consumer=True,
            )


async def test_the_streams_are_bounded(provisioned: str) -> None:
    async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
        js = nc.jetstream()
        dlq = (await js.stream_info(TOPOLOGY.dlq_stream)).config
        decisions = (await js.stream_info(TOPOLOGY.decisions_stream)).config
        state = (await js.stream_info(TOPOLOGY.state_stream)).config
        plans = (await js.stream_info(f"KV_{TOPOLOGY.plans_bucket}")).config
        leases = (await js.stream_info(f"KV_{TOPOLOGY.leases_bucket}")).config
    assert (dlq.max_bytes, dlq.discard) == (LIMITS.dlq_bytes, DiscardPolicy.OLD)
    assert (decisions.max_bytes, decisions.discard) == (LIMITS.decisions_bytes, DiscardPolicy.OLD)
    assert (state.max_bytes, state.discard) == (LIMITS.state_bytes, DiscardPolicy.NEW)
    assert state.max_consumers == LIMITS.state_consumers
    assert state.consumer_limits is not None
    assert state.consumer_limits.inactive_threshold == LIMITS.follower_inactive
    for bucket, size in ((plans, LIMITS.plans_bytes), (leases, LIMITS.leases_bytes)):
        assert (bucket.max_bytes, bucket.discard) == (size, DiscardPolicy.NEW)
        assert bucket.max_consumers == LIMITS.bucket_consumers
        assert not bucket.allow_rollup_hdrs
        assert bucket.allow_msg_ttl


async def test_a_service_hits_the_limits(provisioned: str) -> None:
    """With small limits: a loop of dead letters keeps only the newest (discard old),
    and a service gets no consumer on STATE beyond its maximum, nor one that would
    outlive its inactivity threshold."""
    async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
        js = nc.jetstream()
        present = (await js.stream_info(TOPOLOGY.state_stream)).state.consumer_count or 0
        small = StreamLimits(dlq_bytes=64 << 10, state_consumers=present + 2)
        await provision(js, TOPOLOGY, lease_ttl=2.0, limits=small)
    try:
        async with as_service(provisioned, "victims") as nc:  # type: ignore[attr-defined]
            js = nc.jetstream()
            letter = b"x" * 2048
            for i in range(100):  # 200 KiB of dead letters into 64 KiB
                await js.publish(TOPOLOGY.dlq_subject("victims"), letter + str(i).encode())
            subs = [
                await js.subscribe(
                    TOPOLOGY.state_wildcard, stream=TOPOLOGY.state_stream, ordered_consumer=True
                )
                for _ in range(2)
            ]
            with pytest.raises(nats.js.errors.APIError, match="maximum consumers"):
                await js.subscribe(
                    TOPOLOGY.state_wildcard, stream=TOPOLOGY.state_stream, ordered_consumer=True
                )
            for sub in subs:
                await sub.unsubscribe()
            lasting = ConsumerConfig(inactive_threshold=3600.0)
            with pytest.raises(nats.js.errors.APIError, match="inactive threshold"):
                await js.subscribe(
                    TOPOLOGY.state_wildcard,
                    stream=TOPOLOGY.state_stream,
                    ordered_consumer=True,
                    config=lasting,
                )
        async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
            dlq = (await nc.jetstream().stream_info(TOPOLOGY.dlq_stream)).state
            assert dlq.bytes <= 64 << 10
            assert dlq.first_seq > 1  # the oldest went
            newest = await nc.jetstream().get_last_msg(
                TOPOLOGY.dlq_stream, TOPOLOGY.dlq_subject("victims")
            )
            assert newest.data == letter + b"99"
    finally:
        async with connected(provisioned, "admin", user=ADMIN, password=PASSWORDS[ADMIN]) as nc:
            await provision(nc.jetstream(), TOPOLOGY, lease_ttl=2.0)  # the usual limits
