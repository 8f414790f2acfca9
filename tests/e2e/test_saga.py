"""The saga end to end: the four services as OS processes over a real nats-server."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.bus.reading import key_history
from gangpreempt.bus.records import decode_record
from gangpreempt.model import kinds
from gangpreempt.model.workloads import PodSet, Workload
from tests.e2e.harness import (
    Services,
    assert_saga,
    caught_up,
    decisions,
    of,
    read_stream,
    running,
    saga_of,
    sim_stats,
    state_has,
    wait_for,
)
from tests.e2e.scenarios import ADMITTED, CLUSTER, full_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
GANG = "Workload/ml/gang"


def admitted(evs: list[events.Event], who: str) -> bool:
    return bool(of(evs, events.Admitted, workload=who))


@pytest.mark.parametrize("state_chunk", ["256", "2"], ids=["objects", "chunks"])
async def test_happy_path(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path, state_chunk: str
) -> None:
    # "chunks": the starting state (and any burst of the sim's) goes in STATE chunks
    full_cluster(scenario_dir)
    services.start(extra={"GANGPREEMPT_STATE_CHUNK": state_chunk})
    evs = await wait_for(nc, topology, lambda e: admitted(e, GANG), what="the gang admitted")
    assert_saga(saga_of(evs, GANG))
    (proposal,) = of(evs, events.PlanProposed, preemptor=GANG)
    assert [v.object for v in proposal.victims] == ["Workload/ml/low-2"]  # most recently admitted
    (actuated,) = of(evs, events.VictimActuated)
    assert actuated.victim == "Workload/ml/low-2"
    assert actuated.fencing_token >= 1
    stats = await sim_stats(nc, topology)
    assert stats.evictions == {"Workload/ml/low-2": 1}
    # The victim kept its quota until it terminated: the gang was admitted after that.
    assert of(evs, events.Admitted, workload=GANG)[0].occurred_at > actuated.occurred_at
    # The plan record went through the saga in order (the stream need not: see assert_saga).
    history = await key_history(nc.jetstream(), topology.plans_bucket, proposal.plan_id)
    states = [decode_record(m.data).state for m in history if m.data]
    moves = [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]
    assert moves[:4] == ["requested", "confirmed", "actuating", "actuated"], states
    info = await nc.jetstream().stream_info(
        topology.state_stream, subjects_filter=topology.state_chunk_wildcard
    )
    assert bool(info.state.subjects) == (state_chunk == "2")


async def test_rejected_plan_touches_nothing(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir, gang_at=None)
    services.start()
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
        lambda e: bool(of(e, events.PlanRejected, plan_id="forged")),
        what="PlanRejected",
    )
    (rejected,) = of(evs, events.PlanRejected, plan_id="forged")
    assert rejected.reason == "no preemption request in flight with this id"
    # No record was ever made for it: the actuator has nothing it could act on.
    kv = await nc.jetstream().key_value(topology.plans_bucket)
    with pytest.raises(KeyNotFoundError):
        await kv.get("forged")
    assert not of(evs, events.VictimActuated)
    assert (await sim_stats(nc, topology)).evictions == {}


async def test_stale_victim_ends_the_plan(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    # low-2 completes on its own just as the plan to preempt it is proposed.
    full_cluster(
        scenario_dir,
        extra_timeline="- when: {event: PlanProposed, preemptor: Workload/ml/gang}\n  finish: Workload/ml/low-2\n",
    )
    services.start()
    evs = await wait_for(nc, topology, lambda e: admitted(e, GANG), what="the gang admitted")
    # Whoever sees the victim gone first ends the plan, touching nothing: quota when it
    # confirms (PlanRejected), or the actuator's live re-read (PlanDropped). Which one is
    # a race between the sim's STATE update and quota's confirmation.
    (ended,) = of(evs, events.PlanDropped, preemptor=GANG) + of(
        evs, events.PlanRejected, preemptor=GANG
    )
    assert "low-2" in ended.reason
    assert not of(evs, events.VictimActuated)
    assert not of(evs, events.PlanConfirmed, preemptor=GANG) or isinstance(
        ended, events.PlanDropped
    )
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
    for service in ("victims", "quota"):  # every copy of the request answered, or not
        await caught_up(nc, topology, service)
    evs = await decisions(nc, topology, distinct=False)  # every copy stored
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


async def test_ingest_killed_while_publishing_the_starting_state_completes_it(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path, tmp_path: Path
) -> None:
    # A first ingest published part of the cluster (low-1, not low-2) and died before
    # its journal said the starting state was stored whole.
    journal = tmp_path / "sim-journal.jsonl"
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "cluster.yaml").write_text(
        CLUSTER + ADMITTED.format(name="low-1", minute=0, priority=100, cpus=4)
    )
    (partial / "timeline.yaml").write_text("")
    first = {"GANGPREEMPT_SIM_JOURNAL": str(journal), "GANGPREEMPT_SCENARIO": str(partial)}
    services.start("ingest", extra=first)
    await state_has(nc, topology, "Workload", "ml/low-1")
    low_1 = topology.state_subject("Workload", "ml/low-1")
    before = (await nc.jetstream().get_last_msg(topology.state_stream, low_1)).seq
    services.procs["ingest"].kill()
    services.wait_exit("ingest")
    started = [line for line in journal.read_text().splitlines() if '"start"' in line]
    journal.write_text(started[0] + "\n")
    # The restarted ingest takes up the world STATE holds and publishes the rest.
    full_cluster(scenario_dir)
    services.start(extra={"GANGPREEMPT_SIM_JOURNAL": str(journal)})
    evs = await wait_for(nc, topology, lambda e: admitted(e, GANG), what="the gang admitted")
    (actuated,) = of(evs, events.VictimActuated)
    assert actuated.victim == "Workload/ml/low-2"  # published by the second ingest
    assert (await sim_stats(nc, topology)).evictions == {"Workload/ml/low-2": 1}
    # What STATE already had was not published again.
    assert (await nc.jetstream().get_last_msg(topology.state_stream, low_1)).seq == before
    assert '"event": "starting state completed"' in services.log("ingest")


async def test_malformed_messages_go_to_dead_letters_and_services_live_on(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir, gang_at=4)
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
    # A well-formed event on a subject it does not belong to.
    misplaced = events.ObjectUpserted(
        id="misplaced", occurred_at=datetime.now(UTC), kind="Pod", key="ml/p", body=b""
    )
    confirmed_subject = topology.event_subject(events.PlanConfirmed)
    await js.publish(confirmed_subject, events.encode(misplaced))
    # A state object that fails validation: a negative count and quantity.
    negative = Workload(
        namespace="ml",
        name="negative",
        uid="negative-uid",
        queue_name="jobs",
        priority=2000,
        pod_sets=(PodSet("main", -5, {"cpu": -1000}),),
    )
    bad_state = events.ObjectUpserted(
        id="negative",
        occurred_at=datetime.now(UTC),
        kind="Workload",
        key="ml/negative",
        body=kinds.encode_object(negative),
    )
    await js.publish(topology.subject_of(bad_state), events.encode(bad_state))
    services.start()
    evs = await wait_for(
        nc, topology, lambda e: admitted(e, GANG), what="the gang admitted despite the junk"
    )
    assert all(services.alive().values()), services.alive()
    assert not [e for e in evs if getattr(e, "workload", "") == "Workload/ml/negative"]
    letters = await read_stream(nc, topology.dlq_stream, f"{topology.prefix}.dlq.>")
    by_service: dict[str, set[str]] = {}
    reasons: dict[tuple[str, str], str] = {}
    for m in letters:
        service = m.subject.rsplit(".", 1)[1]
        by_service.setdefault(service, set()).add(m.headers["gp-dlq-subject"])
        reasons[service, m.headers["gp-dlq-id"]] = m.headers["gp-dlq-reason"]
    # Every consumer dead-lettered the junk on the subjects it reads.
    assert topology.event_subject(events.PreemptionRequested) in by_service["victims"]
    assert topology.event_subject(events.PlanProposed) in by_service["quota"]
    assert set(subjects[:-1]) <= by_service["ingest"]
    for service in ("quota", "victims", "actuator"):
        assert topology.state_subject("Workload", "ml/junk") in by_service[service]
        # The negative workload is refused by every replica, with the field that is wrong.
        assert ">= 0" in reasons[service, "negative"]
        assert "count" in reasons[service, "negative"] or "cpu" in reasons[service, "negative"]
    assert "does not belong on" in reasons["ingest", "misplaced"]


async def test_sigterm_stops_every_service_cleanly(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir, gang_at=None)
    services.start()
    await asyncio.to_thread(services.wait_started)
    await running(nc, topology)  # at work, not just started
    codes = services.stop()
    assert codes == {"ingest": 0, "quota": 0, "victims": 0, "actuator": 0}
