"""Liveness when the plan record and the victims' STATE changes arrive in either order.

The order an actuator takeover makes: the victims are evicted under one token, their
holder dies before it writes ``actuated``, the victims terminate (their STATE changes
reach quota while the record still says ``actuating``), and only then does the next
holder, past the lease, write ``actuated``. Nothing else changes afterwards: the record
move alone must wake quota's cycle, which ends the flight and admits the gang.

The test plays the actuator itself (it holds the actuator's lease, so the sim takes its
evictions), to put the two streams in exactly this order.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Lease, Topology
from gangpreempt.bus.records import RecordStore
from gangpreempt.bus.status import ask_quota
from gangpreempt.planning.records import (
    ACTUATED,
    ACTUATING,
    ACTUATOR,
    CONFIRMED,
    PlanRecord,
    advance,
)
from gangpreempt.replica import StateReplica
from services import simwire
from tests.e2e.harness import FAST, Services, decisions, of, wait_for
from tests.e2e.scenarios import full_cluster
from tests.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
GANG = "Workload/ml/gang"


async def confirmed_plan(store: RecordStore, nc: Client, topology: Topology) -> PlanRecord:
    evs = await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.PlanConfirmed, preemptor=GANG)),
        what="the gang's plan confirmed",
    )
    (confirmed,) = of(evs, events.PlanConfirmed, preemptor=GANG)
    found = await store.get(confirmed.plan_id)
    assert found is not None
    assert found[0].state == CONFIRMED
    return found[0]


async def move(store: RecordStore, plan_id: str, to: str, **changes: object) -> PlanRecord:
    def mover(rec: PlanRecord) -> PlanRecord:
        return advance(rec, to, by=ACTUATOR, now=rec.updated_at, **changes)

    moved = await store.move(plan_id, mover)
    assert moved is not None
    return moved[0]


async def test_actuated_after_the_victims_left_wakes_quota(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir)
    services.start("ingest", "quota", "victims")  # no actuator: the test is the actuator
    js = nc.jetstream()
    store = RecordStore(await js.key_value(topology.plans_bucket))
    leases = await js.key_value(topology.leases_bucket)
    lease = Lease(leases, "actuator", "test", ttl=float(FAST["GANGPREEMPT_LEASE_TTL"]))
    stop = asyncio.Event()
    keeper: asyncio.Future[None] | None = None
    replica = StateReplica(nc, topology, "test")
    await replica.start()
    try:
        rec = await confirmed_plan(store, nc, topology)
        assert rec.proposal is not None
        (victim,) = rec.proposal.victims
        deadline = time.monotonic() + 30
        while True:
            if not lease.valid():  # (again, if a busy machine let it lapse)
                token = await lease.acquire(stop)
                assert token is not None
                keeper = asyncio.ensure_future(lease.keep(stop))
                await move(store, rec.plan_id, ACTUATING, fencing_token=token)
            request = simwire.EvictRequest(
                ref=victim.object,
                uid=victim.uid,
                plan_id=rec.plan_id,
                preemptor=GANG,
                reason=victim.reason,
                fencing_token=token,
                mode="kueue",
            )
            msg = await nc.request(topology.sim_evict, simwire.encode(request), timeout=5)
            reply = simwire.decode(msg.data, simwire.EvictReply)
            if reply.ok or not reply.fenced or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert reply.ok, reply.detail
        # The victim terminates and leaves its quota; quota sees it while the record
        # still says actuating, and has decided on it before the record moves.
        key = victim.object.split("/", 1)[1]
        await until(
            lambda: (wl := replica.state.workloads.get(key)) is not None and not wl.holds_quota,
            what="the victim gone from STATE",
        )
        seq = replica.seq

        async def quota_decided() -> bool:
            status = await ask_quota(nc, topology)
            return status is not None and status.idle and status.state_seq >= seq

        deadline = time.monotonic() + 15
        while not await quota_decided():
            assert time.monotonic() < deadline, "quota did not decide on the victim's leaving"
            await asyncio.sleep(0.05)
        assert not of(await decisions(nc, topology), events.Admitted, workload=GANG)
        # Now, and only now, the record says actuated; nothing else changes.
        await move(
            store,
            rec.plan_id,
            ACTUATED,
            fencing_token=token,
            actuated=(victim.object,),
            announced=True,
        )
        evs = await wait_for(
            nc,
            topology,
            lambda e: bool(of(e, events.Admitted, workload=GANG)),
            timeout=15,
            what="the gang admitted after the record alone moved",
        )
        assert of(evs, events.Admitted, workload=GANG)
    finally:
        stop.set()
        if keeper is not None:
            await keeper
        await lease.release()
        await replica.stop()
