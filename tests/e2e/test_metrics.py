"""``/metrics`` of the four services after a saga with one plan dropped and one actuated:
the counts that saga produced, and latency histograms with samples."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import nats.js.errors
import pytest
from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.model import kinds
from tests.e2e.harness import Services, of, quiet, wait_for
from tests.e2e.scenarios import PENDING, full_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]
SERVICES = ("ingest", "quota", "victims", "actuator")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def scrape(port: int) -> Samples:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    data = (await reader.read()).decode()
    writer.close()
    head, _, body = data.partition("\r\n\r\n")
    assert head.split()[1] == "200", head
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 when the series is not there."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == name and all((k, want) in ls for k, want in labels.items())
    )


async def victim_finished(nc: Client, topology: Topology, key: str, timeout: float = 30) -> None:
    """Until STATE says the Workload ``key`` holds no quota any more (the sim finished it)."""
    js = nc.jetstream()
    subject = topology.state_subject("Workload", key)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = await js.get_last_msg(topology.state_stream, subject)
        except nats.js.errors.NotFoundError:
            msg = None
        if msg is not None:
            event = events.decode(msg.data)
            if isinstance(event, events.ObjectDeleted):
                return
            if isinstance(event, events.ObjectUpserted):
                wl = kinds.decode_object("Workload", event.body)
                if not wl.holds_quota:
                    return
        await asyncio.sleep(0.05)
    raise AssertionError(f"Workload {key} still holds quota after {timeout}s")


async def test_metrics_count_the_saga(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    # gang's plan (victim low-2) is confirmed while no actuator runs; low-2 then
    # completes on its own, so the actuator, started after, finds the plan stale and
    # drops it. gang2 then arrives and preempts low-1: actuated, then admitted.
    full_cluster(
        scenario_dir,
        extra_timeline=(
            "- when: {event: PlanConfirmed, preemptor: Workload/ml/gang}\n"
            "  finish: Workload/ml/low-2\n"
            "- when: {event: PlanDropped, preemptor: Workload/ml/gang}\n"
            "  apply: gang2.yaml\n"
        ),
    )
    (scenario_dir / "gang2.yaml").write_text(
        PENDING.format(name="gang2", minute=5, priority=1000, cpus=4)
    )
    ports = {name: free_port() for name in SERVICES}
    for name in SERVICES[:3]:
        services.start(name, extra={"GANGPREEMPT_HEALTH_PORT": str(ports[name])})
    await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.PlanConfirmed, preemptor="Workload/ml/gang")),
        what="gang's plan confirmed",
    )
    await victim_finished(nc, topology, "ml/low-2")
    services.start("actuator", extra={"GANGPREEMPT_HEALTH_PORT": str(ports["actuator"])})
    evs = await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.Admitted, workload="Workload/ml/gang2")),
        timeout=60,
        what="gang2 admitted",
    )
    evs = await quiet(nc, topology)  # nothing more happens: the counts are final
    (dropped,) = of(evs, events.PlanDropped, preemptor="Workload/ml/gang")
    assert "stale" in dropped.reason
    (actuated,) = of(evs, events.VictimActuated, preemptor="Workload/ml/gang2")
    assert actuated.victim == "Workload/ml/low-1"

    scraped = {name: await scrape(port) for name, port in ports.items()}
    quota, victims, actuator, ingest = (
        scraped[n] for n in ("quota", "victims", "actuator", "ingest")
    )
    # What the stream holds, counted where each event is made. On a busy machine a
    # request may expire and be made again, so the saga has at least two of each.
    requested = len(of(evs, events.PreemptionRequested))
    proposed = len(of(evs, events.PlanProposed))
    confirmed = len(of(evs, events.PlanConfirmed))
    assert proposed >= 2
    assert confirmed >= 2

    # Plans by outcome; one dropped (stale) and one actuated.
    assert value(victims, "gangpreempt_plans_total", outcome="proposed") == proposed
    assert value(quota, "gangpreempt_plans_total", outcome="confirmed") == confirmed
    assert value(actuator, "gangpreempt_plans_total", outcome="dropped") == 1
    assert value(actuator, "gangpreempt_plans_total", outcome="actuated") == 1
    assert value(actuator, "gangpreempt_plans_dropped_total", reason="stale") == 1
    assert value(quota, "scheduler_preemption_attempts_total") == requested
    # Victims: one, by reason and kind, and Kueue's and kube-scheduler's counts of it.
    assert (
        value(actuator, "gangpreempt_victims_total", reason="InClusterQueue", kind="Workload") == 1
    )
    assert (
        value(
            actuator,
            "kueue_preempted_workloads_total",
            preempting_cluster_queue="research",
            reason="InClusterQueue",
        )
        == 1
    )
    assert value(actuator, "scheduler_preemption_victims_count") == 1
    assert value(quota, "kueue_admitted_workloads_total", cluster_queue="research") >= 2
    assert value(quota, "kueue_admission_attempts_total", result="inadmissible") >= 2
    # Latency per hop, each where the hop ends, with samples.
    hops = "gangpreempt_decision_hop_seconds_count"
    assert value(victims, hops, hop="requested_to_proposed") == proposed
    assert value(quota, hops, hop="proposed_to_confirmed") == confirmed
    assert value(actuator, hops, hop="confirmed_to_actuated") == 1
    assert value(quota, hops, hop="actuated_to_admitted") == 1
    assert value(quota, "gangpreempt_decision_hop_seconds_sum", hop="actuated_to_admitted") > 0
    searches = value(victims, "gangpreempt_core_call_seconds_count", call="victim_search")
    handled = total(victims, "gangpreempt_events_consumed_total", type="PreemptionRequested")
    assert proposed <= searches <= handled
    assert value(quota, "gangpreempt_quota_cycle_seconds_count") > 0
    assert value(quota, "gangpreempt_core_call_seconds_count", call="admission_pass") > 0
    # The bus: what each consumer handled, its lag, the events published; the lease.
    assert handled >= requested
    assert total(quota, "gangpreempt_events_consumed_total", type="PlanProposed") >= proposed
    assert any(n == "gangpreempt_consumer_lag" for n, _ in quota)
    assert value(ingest, "gangpreempt_events_published_total", type="StateComplete") >= 1
    assert value(ingest, "gangpreempt_ingest_relists_total", source="manifests") >= 1
    assert value(ingest, "gangpreempt_ingest_decode_seconds_count", source="manifests") >= 1
    assert value(actuator, "gangpreempt_lease_holder", service="actuator") == 1
    assert value(actuator, "gangpreempt_fencing_token", service="actuator") >= 1
    assert value(quota, "gangpreempt_state_objects", kind="Workload") >= 4
    assert total(quota, "gangpreempt_dead_letters_total") == 0
