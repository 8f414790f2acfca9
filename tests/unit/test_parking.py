"""Parking (``planning.parking``): Kueue's inadmissible heads are parked, a parked
workload is requeued by exactly the changes that can let it be admitted or preempt (not
by the others, which Kueue would still react to), and a pass with parking decides as the
pass without it (on hand-built states, and over random traces through the replay, for
every policy, with the pods' parking too)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.manifests import load
from gangpreempt.model import kinds
from gangpreempt.model.cluster import ClusterState
from gangpreempt.planning.decisions import ADMIT, PENDING, Decision
from gangpreempt.planning.parking import Parking, parks, still_unfit
from gangpreempt.planning.quotacycle import cycle_decisions
from gangpreempt.quota.ledger import Ledger
from gangpreempt.simulation.replay import POLICIES, Replay, Settings
from gangpreempt.simulation.trace import Job
from gangpreempt.simulation.world import KUEUE, cluster_objects, job_objects

pytestmark = pytest.mark.unit
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _job(name: str, queue: str, priority: int, gpus: int) -> Job:
    return Job(name, 0, 3600, queue, priority, (gpus,))


class World:
    """Queues a and b (4 GPUs each, one cohort), two 8-GPU nodes; a ledger and a
    parking fed every change, as the replay and the quota service feed theirs."""

    def __init__(self, running: list[Job], pending: list[Job]) -> None:
        objects: list[dict[str, Any]] = cluster_objects({"a": 4, "b": 4}, 2, 8)
        node = 0
        for i, job in enumerate(running):
            at = T0 + timedelta(seconds=i)
            objects += job_objects(job, at, {0: f"node-{node:04d}"}, at)
            node = 1 - node
        for i, job in enumerate(pending):
            objects += job_objects(job, T0 + timedelta(seconds=100 + i))
        self.state: ClusterState = load([], objects, "test").state
        self.now = T0 + timedelta(hours=2)
        self.ledger = Ledger(self.state, self.now)
        self.parking = Parking(self.state)

    def change(self, kind: str, new: Any = None, key: str = "") -> None:
        if new is not None:
            old = kinds.get(self.state, kind, kinds.key_of(new))
            kinds.put(self.state, new)
        else:
            old = kinds.remove(self.state, kind, key)
        self.ledger.changed(kind, old, new)
        self.parking.changed(kind, old, new)

    def add(self, job: Job, running: bool = False) -> None:
        at = self.now
        objs = job_objects(job, at, {0: "node-0000"} if running else None, at)
        wl = load([], objs, "test", references=False).state.workloads
        self.change("Workload", next(iter(wl.values())))

    def finish(self, name: str) -> None:
        self.change("Workload", key=f"trace/{name}")

    def cycle(self) -> dict[str, Decision]:
        """One pass with parking, checked against the pass without it."""
        snapshot = self.ledger.current(self.now)
        plain = cycle_decisions(snapshot, frozenset(), None)
        parked = cycle_decisions(snapshot, frozenset(), None, parking=self.parking)
        assert _same(parked, plain)
        return {d.preemptor.removeprefix("Workload/trace/"): d for d in parked}


def _outcome(d: Decision) -> tuple[str, str, list[str], dict[str, str]]:
    return d.preemptor, d.outcome, [v.object for v in d.victims], d.placement


def _unconsidered(ds: list[Decision]) -> list[tuple[str, str, str]]:
    """The Workloads not considered (never a head: not reached, unavailable), with their
    queue and message, which parking must give exactly (a parked workload's standing
    decision names its flavors). Pods (``pod-immediate``) name no flavors."""
    return sorted(
        (d.preemptor, d.queue, d.message)
        for d in ds
        if not d.flavors and d.preemptor.startswith("Workload/")
    )


def _same(a: list[Decision], b: list[Decision]) -> bool:
    """The same decisions, the Admits and Preempts in the same order (a Pending one's
    place among its Kueue cycle's heads depends on its borrowing, which a stand-in does
    not compute; it changes nothing), the workloads not considered with the same
    messages."""
    acting = [_outcome(d) for d in a if d.outcome != PENDING]
    return (
        acting == [_outcome(d) for d in b if d.outcome != PENDING]
        and sorted(map(_outcome, a), key=repr) == sorted(map(_outcome, b), key=repr)
        and _unconsidered(a) == _unconsidered(b)
    )


def _blocked_world() -> World:
    """The cohort is full; b borrows 2 GPUs with priority 1000 only; w (a, priority 100,
    4 GPUs) would have to borrow and may preempt nothing: Preempt without victims."""
    running = [
        _job("a1", "a", 100, 2),
        _job("b1", "b", 1000, 4),
        _job("b2", "b", 1000, 2),
    ]
    return World(running, [_job("w", "a", 100, 4)])


def test_a_preempt_without_victims_is_parked_and_stays_parked_while_nothing_helps() -> None:
    world = _blocked_world()
    first = world.cycle()
    assert first["w"].outcome == PENDING
    assert first["w"].mode == "Preempt"
    assert parks(first["w"])
    assert "trace/w" in world.parking.parked
    world.add(_job("x", "b", 1000, 8))  # an arrival: Kueue requeues nothing either
    world.finish("b2")  # 2 GPUs free: Kueue requeues w, but 4 are needed
    world.add(_job("h", "a", 1000, 1), running=True)  # a higher-priority admission
    stood = world.parking.stood_in
    again = world.cycle()
    assert world.parking.stood_in == stood + 1  # not evaluated
    assert again["w"] == first["w"]  # its standing decision
    assert "trace/w" in world.parking.parked


def test_room_freed_for_it_requeues_it() -> None:
    world = _blocked_world()
    world.cycle()
    world.finish("b1")  # 4 GPUs free: it fits now
    stood = world.parking.stood_in
    after = world.cycle()
    assert world.parking.stood_in == stood
    assert after["w"].outcome == ADMIT
    assert "trace/w" not in world.parking.parked


def test_a_lower_priority_admission_in_its_cohort_requeues_it() -> None:
    """Kueue does not requeue on an admission; the pass would preempt the newcomer."""
    world = _blocked_world()
    world.cycle()
    world.finish("b2")
    world.add(_job("low", "b", 50, 2), running=True)  # b borrows with priority 50
    stood = world.parking.stood_in
    after = world.cycle()
    assert world.parking.stood_in == stood
    assert after["w"].outcome != PENDING or after["w"].mode == "Preempt"


def test_its_own_change_and_a_queue_change_requeue_it() -> None:
    world = _blocked_world()
    world.cycle()
    wl = world.state.workloads["trace/w"]
    world.change("Workload", msgspec.structs.replace(wl, resource_version="7"))
    assert "trace/w" not in world.parking.parked
    world.cycle()
    assert "trace/w" in world.parking.parked
    cq = world.state.cluster_queues["a"]
    world.change("ClusterQueue", cq)
    assert not world.parking.parked


def test_still_unfit_is_false_when_it_could_fit_or_preempt() -> None:
    world = _blocked_world()
    snapshot = world.ledger.current(world.now)
    wl = world.state.workloads["trace/w"]
    cq = snapshot.cqs["a"]
    assert still_unfit(snapshot, wl, cq, 100)
    assert not still_unfit(snapshot, wl, cq, 1001)  # b's borrowers are below it
    small = msgspec.structs.replace(
        wl, pod_sets=tuple(msgspec.structs.replace(ps, count=0) for ps in wl.pod_sets)
    )
    assert not still_unfit(snapshot, small, cq, 100)


def _queued_world() -> World:
    """The cohort is full (a at its nominal quota with priority 100, b with priority
    1000); five workloads of a (priority 100, 2 GPUs each) would have to borrow and may
    preempt nothing: each a Preempt without victims, parked one behind the other."""
    running = [_job("a1", "a", 100, 4), _job("b1", "b", 1000, 4)]
    return World(running, [_job(f"w{i}", "a", 100, 2) for i in range(1, 6)])


def test_stand_ins_behind_every_other_workload_are_left_out_of_the_pass() -> None:
    world = _queued_world()
    first = world.cycle()
    assert all(first[f"w{i}"].mode == "Preempt" for i in range(1, 6))
    assert {f"trace/w{i}" for i in range(1, 6)} <= world.parking.parked.keys()
    snapshot = world.ledger.current(world.now)
    stand_ins = world.parking.stand_ins(snapshot)
    assert len(stand_ins) == 5
    left_out = world.parking.leave_out(snapshot, stand_ins)
    # the first stays in the pass (where it is decided tells where the others would be)
    assert {k: [wl.key for wl in run] for k, run in left_out.items()} == {
        "trace/w1": [f"trace/w{i}" for i in range(2, 6)]
    }
    stood = world.parking.stood_in
    again = world.cycle()
    assert world.parking.stood_in == stood + 5
    assert all(again[f"w{i}"] == first[f"w{i}"] for i in range(1, 6))
    # one arrives behind them: they are no longer behind every other workload
    world.add(_job("w6", "a", 100, 2))
    snapshot = world.ledger.current(world.now)
    assert not world.parking.leave_out(snapshot, world.parking.stand_ins(snapshot))
    world.cycle()


def test_room_for_two_brings_back_two_of_the_queue() -> None:
    world = _queued_world()
    world.cycle()
    world.finish("b1")  # 4 GPUs free: two of them fit by borrowing, in queue order
    stood = world.parking.stood_in
    after = world.cycle()
    assert [after[f"w{i}"].outcome for i in range(1, 6)] == [ADMIT, ADMIT] + [PENDING] * 3
    assert world.parking.stood_in == stood + 3
    assert {f"trace/w{i}" for i in range(3, 6)} <= world.parking.parked.keys()


def test_stand_ins_left_out_behind_a_preemptor_are_not_reached() -> None:
    """A preemptor ahead of them blocks their queue: the pass without parking does not
    reach them, and says so of each (the message of the first, kept in the pass)."""
    world = _queued_world()
    world.cycle()
    world.add(_job("p", "a", 1000, 4))  # preempts a1 within a
    after = world.cycle()
    assert after["p"].outcome == "Preempt"
    for i in range(1, 6):
        assert after[f"w{i}"].message.startswith("waiting behind Workload/trace/p")


def test_stand_ins_of_two_local_queues_are_all_read() -> None:
    """What makes a workload unavailable is its LocalQueue's: the decision of the first
    tells nothing of a stand-in of another LocalQueue."""
    world = _queued_world()
    other = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"namespace": "trace", "name": "a2"},
        "spec": {"clusterQueue": "a"},
    }
    lq = load([], [other], "test", references=False).state.local_queues["trace/a2"]
    world.change("LocalQueue", lq)
    world.add(_job("v", "a2", 100, 2))  # behind w1..w5, of LocalQueue a2
    first = world.cycle()
    assert first["v"].mode == "Preempt"
    snapshot = world.ledger.current(world.now)
    stand_ins = world.parking.stand_ins(snapshot)
    assert len(stand_ins) == 6
    assert not world.parking.leave_out(snapshot, stand_ins)
    world.cycle()


# -- the replay with parking decides as the replay without it ----------------------------

job_st = st.builds(
    lambda i, submit, dur, queue, prio, pods: Job(f"j{i}", submit, dur, queue, prio, tuple(pods)),
    st.integers(0, 10**6),
    st.integers(0, 600),
    st.integers(30, 3000),
    st.sampled_from(["q1", "q2", "q3"]),
    st.sampled_from([50, 100, 100, 1000]),
    st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.lists(job_st, min_size=4, max_size=40, unique_by=lambda j: j.job_id),
    st.sampled_from([p for p in POLICIES if p != "optimal-victims"]),
    st.sampled_from(["", "lost-gpu-hours"]),
    st.sampled_from([0.0, 0.0, 45.0]),  # a minimum runtime: windows end with no event
)
def test_parking_decides_as_no_parking(
    jobs: list[Job], policy: str, cost: str, min_runtime: float
) -> None:
    jobs = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    s = Settings(
        2,
        8,
        {"q1": 6, "q2": 6, "q3": 4},
        T0,
        cycle_s=10,
        victim_cost=cost,
        min_runtime_s=min_runtime,
    )
    runs = []
    for park in (True, False):
        sim = Replay(policy, jobs, s, park=park)
        sim.decisions_seen = []
        log = sim.run()
        runs.append((log, sim.decisions_seen, sim.stats.decisions))
    (log, seen, n), (log0, seen0, n0) = runs
    assert log == log0
    assert n == n0
    assert [at for at, _ in seen] == [at for at, _ in seen0]
    assert all(_same(a, b) for (_, a), (_, b) in zip(seen, seen0, strict=True))
