"""The saga end to end: the four services as OS processes over a real nats-server."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import Services, decisions, of, read_stream, saga_of, sim_stats, wait_for
from tests.e2e.scenarios import full_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
GANG = "Workload/ml/gang"


def admitted(evs: list[events.Event], who: str) -> bool:
    return bool(of(evs, events.Admitted, workload=who))


async def test_happy_path(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir)
    services.start()
    evs = await wait_for(nc, topology, lambda e: admitted(e, GANG), what="the gang admitted")
    kinds = saga_of(evs, GANG)
    assert kinds == [
        "PreemptionRequested",
        "PlanProposed",
        "PlanConfirmed",
        "VictimActuated",
        "PlanActuated",
        "Admitted",
    ]
    (proposal,) = of(evs, events.PlanProposed, preemptor=GANG)
    assert [v.object for v in proposal.victims] == ["Workload/ml/low-2"]  # most recently admitted
    (actuated,) = of(evs, events.VictimActuated)
    assert actuated.victim == "Workload/ml/low-2"
    assert actuated.fencing_token >= 1
    stats = await sim_stats(nc, topology)
    assert stats.evictions == {"Workload/ml/low-2": 1}
    # The victim kept its quota until it terminated: the gang was admitted after that.
    assert of(evs, events.Admitted, workload=GANG)[0].occurred_at > actuated.occurred_at


async def test_rejected_plan_touches_nothing(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir, gang_at=None)
    services.start()
    await asyncio.sleep(2)  # let every service come up with nothing to do
    forged = events.PlanProposed(
        id="proposed-forged",
        occurred_at=datetime.now(UTC),
        plan_id="forged",
        request_id="nobody-asked",
        preemptor="Workload/ml/low-1",
        preemptor_uid="low-1-uid",
        cluster_queue="research",
        pod_sets=("main",),
        flavors={"main": {"cpu": "default"}},
        victims=(
            events.PlannedVictim(
                "Workload/ml/low-2", "low-2-uid", "2", "InClusterQueue", "research", 100
            ),
        ),
    )
    await nc.jetstream().publish(
        topology.subject_of(forged), events.encode(forged), headers={"Nats-Msg-Id": forged.id}
    )
    evs = await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.PlanDropped, plan_id="forged")),
        what="PlanDropped",
    )
    assert of(evs, events.PlanRejected, plan_id="forged")
    assert not of(evs, events.VictimActuated)
    assert (await sim_stats(nc, topology)).evictions == {}


async def test_stale_victim_drops_the_plan(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    # low-2 completes on its own just as the plan to preempt it is proposed.
    full_cluster(
        scenario_dir,
        extra_timeline="- when: {event: PlanProposed, preemptor: Workload/ml/gang}\n  finish: Workload/ml/low-2\n",
    )
    services.start()
    evs = await wait_for(nc, topology, lambda e: admitted(e, GANG), what="the gang admitted")
    (dropped,) = of(evs, events.PlanDropped, preemptor=GANG)
    assert "low-2" in dropped.reason
    assert not of(evs, events.VictimActuated)
    assert (await sim_stats(nc, topology)).evictions == {}


async def test_duplicated_request_actuates_each_victim_once(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir)
    services.start()
    evs = await wait_for(
        nc, topology, lambda e: bool(of(e, events.PreemptionRequested)), what="a request"
    )
    (request,) = of(evs, events.PreemptionRequested)
    js = nc.jetstream()
    for i in range(3):  # the same request again, past the stream's duplicate window
        await js.publish(
            topology.subject_of(request),
            events.encode(request),
            headers={"Nats-Msg-Id": f"again-{i}"},
        )
    evs = await wait_for(nc, topology, lambda e: admitted(e, GANG), what="the gang admitted")
    await asyncio.sleep(1.5)
    evs = await decisions(nc, topology)
    assert len(of(evs, events.PreemptionRequested)) == 4
    assert len(of(evs, events.PlanProposed)) == 1  # same request id -> same plan id -> deduplicated
    assert len(of(evs, events.VictimActuated)) == 1
    assert (await sim_stats(nc, topology)).evictions == {"Workload/ml/low-2": 1}


@pytest.mark.parametrize("point", ["before-actuation", "after-claim"])
async def test_actuator_killed_mid_plan_actuates_each_victim_once(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path, point: str
) -> None:
    full_cluster(scenario_dir)
    services.start("ingest", "quota", "victims")
    services.start("actuator", extra={"GANGPREEMPT_FAULT": point})
    assert services.wait_exit("actuator") == -signal.SIGKILL
    assert (await sim_stats(nc, topology)).evictions == {}
    services.start("actuator")  # a fresh instance: it waits out the lease, then gets the plan back
    evs = await wait_for(
        nc, topology, lambda e: admitted(e, GANG), timeout=45, what="the gang admitted"
    )
    assert len(of(evs, events.VictimActuated)) == 1
    assert (await sim_stats(nc, topology)).evictions == {"Workload/ml/low-2": 1}
    (actuated,) = of(evs, events.PlanActuated)
    assert actuated.fencing_token > 1  # the new holder's token


async def test_malformed_messages_go_to_dead_letters_and_services_live_on(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir, gang_at=4)
    services.start()
    await asyncio.sleep(2)
    js = nc.jetstream()
    subjects = [
        topology.event_subject(t)
        for t in (
            events.Admitted,
            events.Pending,
            events.PreemptionRequested,
            events.PlanConfirmed,
            events.PlanRejected,
            events.PlanProposed,
            events.PreemptionInfeasible,
            events.VictimActuated,
            events.PlanActuated,
            events.PlanDropped,
        )
    ]
    subjects.append(topology.state_subject("Workload", "ml/junk"))
    for i, subject in enumerate(subjects):
        await js.publish(subject, b"\xc1 junk", headers={"Nats-Msg-Id": f"junk-{i}"})
    await wait_for(
        nc, topology, lambda e: admitted(e, GANG), what="the gang admitted despite the junk"
    )
    assert all(services.alive().values()), services.alive()
    letters = await read_stream(nc, topology.dlq_stream, f"{topology.prefix}.dlq.>")
    by_service: dict[str, set[str]] = {}
    for m in letters:
        by_service.setdefault(m.subject.rsplit(".", 1)[1], set()).add(m.headers["gp-dlq-subject"])
    # Every consumer dead-lettered the junk on the subjects it reads.
    assert topology.event_subject(events.PreemptionRequested) in by_service["victims"]
    assert topology.event_subject(events.PlanProposed) in by_service["actuator"]
    assert topology.event_subject(events.PlanProposed) in by_service["quota"]
    assert set(subjects[:-1]) <= by_service["ingest"]
    for service in ("quota", "victims", "actuator"):
        assert topology.state_subject("Workload", "ml/junk") in by_service[service]
    assert all("cannot" in m.headers["gp-dlq-reason"] for m in letters)


async def test_sigterm_stops_every_service_cleanly(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir, gang_at=None)
    services.start()
    await asyncio.to_thread(services.wait_started)
    await asyncio.sleep(0.5)  # running, not just started
    codes = services.stop()
    assert codes == {"ingest": 0, "quota": 0, "victims": 0, "actuator": 0}
