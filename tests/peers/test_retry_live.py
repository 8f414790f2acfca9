"""Room held for a plan, against the real control plane: a borrower of another
ClusterQueue that Kueue reserves in the room a plan freed gets gangpreempt's ``Retry``
(Kueue releases the reservation at once), and is admitted later, once the room is free.

The cohort has two managed ClusterQueues: ``cq`` with 16 nominal GPUs, where two 8-GPU
Jobs run on the cluster's two nodes, and ``cq-b`` with none, which borrows. A Job of
``cq-b`` waits (the cohort is full). A 16-GPU Job of higher priority arrives in ``cq``:
gangpreempt evicts both running Jobs, which finish their work in their grace period:
one at once, the other later (a victim slow to terminate). Kueue meanwhile sees 8 free
GPUs in the cohort: too few for the newcomer, enough for the borrower, which it
reserves; gangpreempt answers ``Retry``, since that room is held for the newcomer's plan
(Kueue #13662 is this loop inside Kueue: the freed room taken by another, the preemptor
preempting again). When the last victim is gone the newcomer is admitted on both nodes;
when it completes, the borrower is admitted and runs."""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.model.checks import RETRY
from tests.e2e.harness import Services, decisions
from tests.peers.cluster import (
    KUEUE_API,
    Cluster,
    deployed,
    eventually,
    start_services,
)
from tests.peers.control_plane import KUEUE, ControlPlane

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]


async def workload_of(cluster: Cluster, job: str) -> dict[str, Any] | None:
    listing = await cluster.call("GET", f"{KUEUE_API}/namespaces/{cluster.ns}/workloads")
    for wl in listing.get("items") or []:
        if wl["metadata"]["name"].startswith(f"job-{job}-"):
            return dict(wl)
    return None


async def retries(cluster: Cluster, job: str) -> int:
    """How many times Kueue counted gangpreempt's Retry on ``job``'s Workload."""
    wl = await workload_of(cluster, job)
    checks = ((wl or {}).get("status") or {}).get("admissionChecks") or []
    return max((c.get("retryCount") or 0 for c in checks), default=0)


def condition(wl: dict[str, Any] | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in ((wl or {}).get("status") or {}).get("conditions") or []
    )


async def all_running(cluster: Cluster, job: str, count: int) -> list[dict[str, Any]] | None:
    """The ``count`` pods of ``job`` once they all run."""
    pods = [
        p
        for p in await cluster.pods()
        if p["metadata"].get("labels", {}).get("job-name") == job
        and not p["metadata"].get("deletionTimestamp")
    ]
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return running if len(running) == count else None


async def test_a_borrower_in_the_room_held_for_a_plan_gets_retry_and_is_admitted_later(
    control_plane: ControlPlane,
    cluster: Cluster,
    services: Services,
    nc: Client,
    topology: Topology,
) -> None:
    await cluster.queue("lq-b", f"cq-b-{cluster.suffix}", gpus=0)
    start_services(services, deployed(control_plane))
    await cluster.job("low", "low")
    await cluster.job("mid", "mid")
    low = await eventually(lambda: cluster.running("low"), 120, "low running", cluster)
    mid = await eventually(lambda: cluster.running("mid"), 120, "mid running", cluster)

    borrower = f"Workload/{cluster.ns}/job-borrower-"
    train = f"Workload/{cluster.ns}/job-train-"

    async def decided(kind: type[events.Event], prefix: str) -> list[Any]:
        return [
            e
            for e in await decisions(nc, topology)
            if isinstance(e, kind) and getattr(e, "workload", "").startswith(prefix)
        ]

    await cluster.job("borrower", "low", queue="lq-b")
    # The cohort is full and cq-b's policy preempts nothing: gangpreempt says so.
    await eventually(
        lambda: decided(events.Pending, borrower), 60, "gangpreempt's decision", cluster
    )
    assert not await decided(events.PreemptionRequested, borrower)

    # Both victims finish their work in their grace period (their Workloads are not
    # requeued): low at once, mid only when the test lets it.
    cluster.finishing.add("low")
    cluster.lingering.add("mid")
    await cluster.job("train", "high", pods=2)

    async def retried() -> list[events.CheckDecided]:
        return [e for e in await decided(events.CheckDecided, borrower) if e.state == RETRY]

    # low is gone, mid still terminates: 8 GPUs of the cohort are free, too few for
    # train, enough for the borrower, which Kueue reserves; gangpreempt's check sends
    # the reservation back at once, naming whom the room is held for.
    (retry, *_) = await eventually(retried, 120, "the borrower's Retry", cluster)
    assert retry.requeue_after_s >= 0
    assert f"room is held for {train}" in retry.message, retry.message
    assert await cluster.pod_of("low") is None
    assert await cluster.running("mid") is not None
    assert await cluster.pod_of("borrower") is None  # never unsuspended into held room
    assert not condition(await workload_of(cluster, "borrower"), "Admitted")

    cluster.finishing.add("mid")  # mid's pod is done: the last victim leaves
    released = time.monotonic()
    gang = await eventually(
        lambda: all_running(cluster, "train", 2), 180, "train's two pods running", cluster
    )
    print(
        f"train running {time.monotonic() - released:.1f} s after its last victim left; "
        f"the borrower sent back {await retries(cluster, 'borrower')} times by then"
    )
    assert {p["spec"]["nodeName"] for p in gang} == {
        low["spec"]["nodeName"],
        mid["spec"]["nodeName"],
    }
    assert await cluster.pod_of("borrower") is None  # the cohort is full again
    assert not condition(await workload_of(cluster, "borrower"), "Admitted")

    # train completes: the borrower is admitted, with the quota cq lends, and runs.
    await cluster.finish("train")
    ran = await eventually(
        lambda: cluster.running("borrower"), 180, "the borrower running", cluster
    )
    assert ran["spec"]["nodeName"] in cluster.nodes
    wl = await workload_of(cluster, "borrower")
    assert condition(wl, "Admitted")
    assert not condition(wl, "Preempted")  # sent back by the check, never preempted
    rounds = await retries(cluster, "borrower")
    assert rounds >= 1
    print(f"the borrower's reservations sent back while room was held: {rounds}")

    # Kueue preempted nothing on its own: every Preempted condition is gangpreempt's.
    for name in ("low", "mid"):
        evicted = await workload_of(cluster, name)
        messages = [
            c.get("message", "")
            for c in ((evicted or {}).get("status") or {}).get("conditions") or []
            if c.get("type") == "Preempted" and c.get("status") == "True"
        ]
        assert messages, name
        assert all("gangpreempt plan" in m for m in messages), (name, messages)
    assert control_plane.audit_events(KUEUE)  # Kueue did its part


async def test_a_gang_gets_its_room_though_kueue_requeues_its_victims_at_once(
    control_plane: ControlPlane, cluster: Cluster, services: Services
) -> None:
    """Two victims of one gang in its own ClusterQueue, which Kueue requeues as soon as
    each is stopped, one after the other (the second slow to terminate): each time Kueue
    reserves one of them in the room held for the gang, the reservation is sent back and
    Kueue waits before it reserves that workload again, so the gang, first in Kueue's
    order, is reserved as soon as the last victim has left (two workloads taking turns
    used to hold the room every time Kueue tried the gang)."""
    start_services(services, deployed(control_plane))
    await cluster.job("low", "low")
    await cluster.job("mid", "mid")
    low = await eventually(lambda: cluster.running("low"), 120, "low running", cluster)
    mid = await eventually(lambda: cluster.running("mid"), 120, "mid running", cluster)

    cluster.lingering.add("mid")
    await cluster.job("train", "high", pods=2)
    # low is stopped and requeued at once; Kueue reserves it again in the room it left,
    # which is held for train: sent back.
    await eventually(
        lambda: retries_at_least(cluster, "low", 1), 120, "low sent back once", cluster
    )
    assert await cluster.pod_of("low") is None
    cluster.lingering.discard("mid")  # mid stops too, and is requeued at once
    released = time.monotonic()
    gang = await eventually(
        lambda: all_running(cluster, "train", 2), 120, "train's two pods running", cluster
    )
    print(
        f"train running {time.monotonic() - released:.1f} s after its last victim left; "
        f"sent back by then: low {await retries(cluster, 'low')}, "
        f"mid {await retries(cluster, 'mid')}"
    )
    assert {p["spec"]["nodeName"] for p in gang} == {
        low["spec"]["nodeName"],
        mid["spec"]["nodeName"],
    }
    for job in ("low", "mid"):  # never admitted into the held room
        assert await cluster.pod_of(job) is None

    await cluster.finish("train")
    for job in ("low", "mid"):  # the victims run again once the room is free
        await eventually(
            functools.partial(cluster.running, job), 120, f"{job} running again", cluster
        )


async def retries_at_least(cluster: Cluster, job: str, count: int) -> bool:
    return await retries(cluster, job) >= count
