"""The replay on small traces built by hand, where the right numbers are known: an
unnecessary eviction, a partial gang and a thrash loop appear exactly where built, under
the policy that makes them and not under gangpreempt; and the replay's decisions are the
ones ``plan`` gives on the replay's own state (a property over random traces)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model.cluster import ClusterState
from gangpreempt.planning import plan
from gangpreempt.simulation.outcomes import EVICTED, Outcomes, Record, outcomes
from gangpreempt.simulation.replay import POLICIES, Replay, Settings
from gangpreempt.simulation.trace import Job

pytestmark = pytest.mark.unit
T0 = datetime(2025, 1, 1, tzinfo=UTC)
LONG = 10**6


def replay(
    policy: str, jobs: list[Job], nodes: int, gpus: int, quotas: dict[str, int]
) -> tuple[Outcomes, list[Record]]:
    sim = Replay(policy, jobs, Settings(nodes, gpus, quotas, T0, cycle_s=10))
    log = sim.run()
    return outcomes(log, 10, 1800), log


def evicted(log: list[Record]) -> list[tuple[float, str, str]]:
    return [(r.at, r.job, r.preemptor) for r in log if r.kind == EVICTED]


def test_quota_alone_evicts_where_the_gang_cannot_go() -> None:
    """Queue b borrows 4 GPUs with three 4-GPU jobs on two 8-GPU nodes; a's 8-GPU job
    reclaims. On quota alone the victim is b's most recently admitted job, which frees
    4 GPUs beside another b job: a cannot be placed, and waits for a job to finish. With
    the nodes, the victims are the two that share a node, and a starts once they left."""
    jobs = [
        Job("b3", 0, LONG, "b", 100, (4,)),
        Job("b1", 1, LONG, "b", 100, (4,)),
        Job("b2", 2, LONG, "b", 100, (4,)),
        Job("a1", 100, 600, "a", 1000, (8,)),
    ]
    quotas = {"a": 8, "b": 8}
    blind, blind_log = replay("gang-unconfirmed", jobs, 2, 8, quotas)
    assert (blind.evictions, blind.unnecessary_evictions) == (1, 1)
    start = next(r.at for r in blind_log if r.kind == "started" and r.job == "a1")
    assert start >= LONG  # only once a b job finished
    ours, log = replay("gangpreempt", jobs, 2, 8, quotas)
    assert (ours.evictions, ours.unnecessary_evictions) == (2, 0)
    assert {job for _at, job, by in evicted(log)} <= {"b1", "b2", "b3"}
    start = next(r.at for r in log if r.kind == "started" and r.job == "a1")
    assert start == 100 + 30  # evicted at 100, gone after the termination delay


def test_a_pod_on_its_own_breaks_a_gang() -> None:
    """A 2-pod gang of 4 GPUs each on two 4-GPU nodes; a high-priority 4-GPU pod arrives.
    kube-scheduler without gangs evicts one pod of the gang (a partial-gang eviction);
    gangpreempt evicts the whole gang."""
    jobs = [Job("low", 0, 10**5, "q", 100, (4, 4)), Job("high", 100, 600, "q", 1000, (4,))]
    pods, _ = replay("pod-immediate", jobs, 2, 4, {"q": 8})
    assert (pods.evictions, pods.victim_pods, pods.partial_gang_evictions) == (1, 1, 1)
    gang, _ = replay("gangpreempt", jobs, 2, 4, {"q": 8})
    assert (gang.evictions, gang.victim_pods, gang.partial_gang_evictions) == (1, 2, 0)


def test_a_thrash_loop_and_the_guard_against_it() -> None:
    """One 8-GPU node; a long low-priority job is evicted by a high one, restarts when it
    ends, and a second high one arrives within the hour: without a guard it is evicted
    again (thrash); gangpreempt does not preempt it again within the hour."""
    jobs = [
        Job("L", 0, 10**5, "q", 100, (8,)),
        Job("H1", 100, 600, "q", 1000, (8,)),
        Job("H2", 1000, 600, "q", 1000, (8,)),
    ]
    pods, log = replay("pod-immediate", jobs, 1, 8, {"q": 8})
    assert (pods.evictions, pods.thrash) == (2, 1)
    assert evicted(log) == [(100, "L", "H1"), (1000, "L", "H2")]
    ours, log = replay("gangpreempt", jobs, 1, 8, {"q": 8})
    assert ours.thrash == 0
    assert evicted(log)[0] == (100, "L", "H1")
    assert all(at - 100 > 3600 for at, _job, _by in evicted(log)[1:])
    none, _ = replay("no-preemption", jobs, 1, 8, {"q": 8})
    assert (none.evictions, none.jobs_finished) == (0, 3)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_finishes_every_job_when_room_comes(policy: str) -> None:
    jobs = [
        Job(f"j{i}", i * 50, 300 + 37 * i, "ab"[i % 2], (100, 1000)[i % 3 == 0], (4,) * (1 + i % 2))
        for i in range(12)
    ]
    result, log = replay(policy, jobs, 3, 8, {"a": 12, "b": 12})
    assert result.jobs_finished == len(jobs)
    assert [r.job for r in log if r.kind == "arrived"] == [j.job_id for j in jobs]


# -- the replay decides as ``plan`` does on the replay's state ------------------------------


def copy_of(state: ClusterState) -> ClusterState:
    return ClusterState(**{f: dict(getattr(state, f)) for f in ClusterState.__struct_fields__})


class Probe(Replay):
    """Takes, at every quiet cycle (no plan in flight), the state the cycle decides on."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.decisions_seen = []
        self.states: dict[int, ClusterState] = {}

    def _kueue_cycle(self, at: float) -> None:
        quiet = not self.flights and not self.evicting
        if quiet:
            self.states[len(self.decisions_seen)] = copy_of(self.state)
        super()._kueue_cycle(at)


JOBS = st.lists(
    st.tuples(
        st.integers(0, 3000),  # submit
        st.integers(30, 4000),  # duration
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from([100, 1000]),
        st.sampled_from([(1,), (2,), (4,), (8,), (8, 8), (4, 4), (8, 8, 8)]),
    ),
    min_size=1,
    max_size=18,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JOBS, st.integers(2, 4))
def test_the_replay_decides_as_plan_does_on_its_state(rows, nodes) -> None:  # type: ignore[no-untyped-def]
    jobs = [
        Job(f"j{i}", submit, duration, queue, priority, pods)
        for i, (submit, duration, queue, priority, pods) in enumerate(sorted(rows))
    ]
    probe = Probe(
        "gangpreempt", jobs, Settings(nodes, 8, {"a": 8, "b": 8, "c": 8 * nodes - 16}, T0)
    )
    probe.run()
    compared = 0
    for i, state in probe.states.items():
        at, ours = probe.decisions_seen[i]
        now = probe.origin.__class__.fromtimestamp(probe.origin.timestamp() + at, UTC)
        theirs = {d.preemptor: d for d in plan(state, now).decisions}
        for d in ours:
            other = theirs[d.preemptor]
            assert (d.outcome, d.placement) == (other.outcome, other.placement), d.preemptor
            assert [v.object for v in d.victims] == [v.object for v in other.victims]
            compared += 1
    assert compared > 0


def test_jobs_are_the_objects_plan_reads() -> None:
    """The replay's objects in each state equal what the manifest reader makes of the
    same job in that state (admitted: ``world.job_objects`` with a placement)."""
    from gangpreempt.manifests import load
    from gangpreempt.simulation.jobstate import JobObjects
    from gangpreempt.simulation.world import job_objects

    job = Job("j1", 0, 60, "a", 100, (8, 4))
    objs = JobObjects(job, T0, kueue=True)
    wl = objs.admitted(T0)
    pods = [objs.bound(0, "n0", T0), objs.bound(1, "n1", T0)]
    read = load([], job_objects(job, T0, {0: "n0", 1: "n1"}, T0), "replay", references=False).state
    strip = {"resource_version": ""}
    assert msgspec.structs.replace(wl, **strip) == read.workloads["trace/j1"]
    for pod in pods:
        assert msgspec.structs.replace(pod, **strip) == read.pods[pod.key]


def test_a_minimum_runtime_holds_a_preemption_back_until_the_victim_has_run_it() -> None:
    """One 8-GPU node; a low job runs, a high one arrives 100 s later. Without a minimum
    runtime the low job is evicted at once; with 600 s it is evicted once it has run
    600 s, and the high job waits that long."""
    jobs = [Job("L", 0, 10**5, "q", 100, (8,)), Job("H", 100, 600, "q", 1000, (8,))]

    def evictions(min_runtime_s: float) -> list[float]:
        sim = Replay(
            "gangpreempt",
            jobs,
            Settings(1, 8, {"q": 8}, T0, cycle_s=10, min_runtime_s=min_runtime_s),
        )
        return [at for at, job, _by in evicted(sim.run()) if job == "L"]

    assert evictions(0) == [100]
    (at,) = evictions(600)[:1]
    assert 600 <= at <= 600 + 10  # the first cycle after its window ends
