"""The plan record protocol as a state machine, explored by hypothesis: quota, victims
and two actuators over a compare-and-set store and a fencing sink, with proposals
duplicated, reordered and redelivered (lost acks), every role crashing at any step
(losing all it held in memory), and a lease taken over while its old holder still runs
(a paused process). The roles take the same decisions as the services, through the
same pure functions (``records.advance``, ``records.actuator_step``); the invariants are
those the chaos checker applies to real runs."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gangpreempt import events
from gangpreempt.errors import Conflict
from gangpreempt.planning import records as r

pytestmark = pytest.mark.unit

PREEMPTORS = ("Workload/ns/a", "Workload/ns/b", "PodGroup/ns/c")
VICTIMS = ("Workload/ns/v1", "Workload/ns/v2", "Workload/ns/v3", "PodGroup/ns/v4")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# The protocol as the architecture states it (docs/architecture.md, the plan record).
LEGAL = {
    ("requested", "confirmed"),
    ("requested", "rejected"),
    ("requested", "infeasible"),
    ("requested", "expired"),
    ("confirmed", "actuating"),
    ("confirmed", "dropped"),
    ("actuating", "actuating"),
    ("actuating", "actuated"),
    ("actuated", "closed"),
    ("dropped", "dropped"),
}


class Store:
    """The KV bucket: one record per plan, a revision per write, compare-and-set."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[r.PlanRecord, int]] = {}
        self.clock = 0  # one global sequence for every write and every eviction
        self.history: dict[str, list[tuple[int, r.PlanRecord]]] = {}

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def get(self, plan_id: str) -> tuple[r.PlanRecord, int] | None:
        return self.records.get(plan_id)

    def create(self, rec: r.PlanRecord) -> None:
        if rec.plan_id in self.records:
            raise Conflict(rec.plan_id)
        self._write(rec)

    def put(self, rec: r.PlanRecord, revision: int) -> None:
        if self.records[rec.plan_id][1] != revision:
            raise Conflict(rec.plan_id)
        self._write(rec)

    def _write(self, rec: r.PlanRecord) -> None:
        at = self.tick()
        self.records[rec.plan_id] = (rec, at)
        self.history.setdefault(rec.plan_id, []).append((at, rec))


@dataclass
class Eviction:
    at: int
    plan_id: str
    victim: str
    token: int
    lease: int


@dataclass
class Sink:
    """The sim cluster: checks the token against the lease as it is now; idempotent per
    plan; a victim evicted by one plan is not running for another."""

    lease: int = 0
    evicted_by: dict[str, str] = field(default_factory=dict)
    log: list[Eviction] = field(default_factory=list)

    def evict(self, store: Store, plan_id: str, victim: str, token: int) -> str:
        if token != self.lease:
            return "fenced"
        if self.evicted_by.get(victim) == plan_id:
            return "ok"
        if victim in self.evicted_by:
            return "refused"
        self.evicted_by[victim] = plan_id
        self.log.append(Eviction(store.tick(), plan_id, victim, token, self.lease))
        return "ok"


@dataclass
class Job:
    """What an actuator holds in memory for one plan while it drives it."""

    rec: r.PlanRecord
    revision: int
    token: int  # the lease token the drive started under (the Driver keeps it too)
    phase: str = "read"  # read -> evicting -> finishing
    remaining: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)


class PlanMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = Store()
        self.sink = Sink()
        self.events: list[tuple[str, str]] = []  # (type, plan) as published, in order
        self.inbox: list[events.PlanProposed] = []  # quota's unacknowledged proposals
        self.flights: dict[str, str] = {}  # quota's memory: preemptor -> plan
        self.requests = 0
        self.tokens = 0
        self.actuators: dict[str, int] = {"a1": 0, "a2": 0}  # actuator -> its token
        self.jobs: dict[tuple[str, str], Job] = {}

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.store.clock)

    # -- quota -----------------------------------------------------------------------------
    def rebuild(self) -> None:
        """quota's flights from the records (what a restart does)."""
        self.flights = {}
        for rec, _ in sorted(self.store.records.values(), key=lambda x: x[0].requested_at):
            if rec.state in r.IN_FLIGHT:
                self.flights[rec.flight] = rec.plan_id

    @rule(preemptor=st.sampled_from(PREEMPTORS))
    def quota_requests(self, preemptor: str) -> None:
        if preemptor in self.flights:
            return  # a plan in flight: no new request
        self.requests += 1
        request_id = f"req-{self.requests}"
        plan_id = events.stable_id("plan", request_id)
        rec = r.new_record(plan_id, request_id, preemptor, preemptor, self.now())
        self.store.create(rec)
        self.flights[preemptor] = plan_id

    def in_state(self, *states: str) -> list[str]:
        return sorted(p for p, (rec, _) in self.store.records.items() if rec.state in states)

    def jobs_in(self, phase: str) -> list[tuple[str, str]]:
        return sorted(k for k, j in self.jobs.items() if j.phase == phase)

    @precondition(lambda self: bool(self.in_state(r.REQUESTED)))
    @rule(
        data=st.data(),
        victims=st.lists(st.sampled_from(VICTIMS), min_size=1, max_size=2, unique=True),
    )
    def victims_propose(self, data: st.DataObject, victims: list[str]) -> None:
        requested = sorted(
            p for p, (rec, _) in self.store.records.items() if rec.state == r.REQUESTED
        )
        if not requested:
            return
        plan_id = data.draw(st.sampled_from(requested))
        rec = self.store.records[plan_id][0]
        self.inbox.append(
            events.PlanProposed(
                id=f"proposed-{plan_id}",
                occurred_at=self.now(),
                plan_id=plan_id,
                request_id=rec.request_id,
                preemptor=rec.preemptor,
                preemptor_uid="",
                cluster_queue="q",
                pod_sets=(),
                flavors={},
                victims=tuple(events.PlannedVictim(v, "", "", "r", "q", 0) for v in victims),
            )
        )

    @precondition(lambda self: bool(self.inbox))
    @rule(data=st.data(), ack_lost=st.booleans(), duplicate=st.booleans())
    def quota_confirms(self, data: st.DataObject, ack_lost: bool, duplicate: bool) -> None:
        """A proposal delivered (any of those waiting: reordered); its ack may be lost
        (it is delivered again later) or it may be a duplicate."""
        i = data.draw(st.integers(0, len(self.inbox) - 1))
        p = self.inbox[i] if (ack_lost or duplicate) else self.inbox.pop(i)
        if duplicate:
            self.inbox.append(p)
        found = self.store.get(p.plan_id)
        if found is None or found[0].state != r.REQUESTED:
            return  # answered already: the record holds the answer
        rec, revision = found
        claimed = {
            v.object
            for other, _ in self.store.records.values()
            if other.plan_id != rec.plan_id
            and other.state in (r.CONFIRMED, r.ACTUATING, r.ACTUATED)
            and other.proposal is not None
            for v in other.proposal.victims
        }
        ok = self.flights.get(rec.flight) == rec.plan_id and not claimed & {
            v.object for v in p.victims
        }
        to = r.CONFIRMED if ok else r.REJECTED
        moved = r.advance(
            rec,
            to,
            by=r.QUOTA,
            now=self.now(),
            proposal=p if ok else None,
            reason="" if ok else "x",
        )
        self.store.put(moved, revision)
        if not ok and self.flights.get(rec.flight) == rec.plan_id:
            del self.flights[rec.flight]

    @precondition(lambda self: bool(self.in_state(r.REQUESTED, r.ACTUATED)))
    @rule(data=st.data(), end=st.sampled_from((r.EXPIRED, r.CLOSED)))
    def quota_ends(self, data: st.DataObject, end: str) -> None:
        source = r.REQUESTED if end == r.EXPIRED else r.ACTUATED
        plans = sorted(p for p, (rec, _) in self.store.records.items() if rec.state == source)
        if not plans:
            return
        rec, revision = self.store.records[data.draw(st.sampled_from(plans))]
        self.store.put(r.advance(rec, end, by=r.QUOTA, now=self.now(), reason="x"), revision)
        if self.flights.get(rec.flight) == rec.plan_id:
            del self.flights[rec.flight]

    @rule()
    def quota_restarts(self) -> None:
        self.rebuild()

    @rule()
    def quota_learns_the_actuators_ends(self) -> None:
        for preemptor, plan_id in list(self.flights.items()):
            if self.store.records[plan_id][0].state in r.TERMINAL:
                del self.flights[preemptor]

    # -- actuators -------------------------------------------------------------------------
    @rule(actuator=st.sampled_from(("a1", "a2")))
    def lease_taken(self, actuator: str) -> None:
        """``actuator`` acquires the lease; the other keeps running if it held it (a
        paused process that has not noticed yet)."""
        self.tokens += 1
        self.actuators[actuator] = self.tokens
        self.sink.lease = self.tokens

    @precondition(lambda self: any(r.actuator_owes(rec) for rec, _ in self.store.records.values()))
    @rule(actuator=st.sampled_from(("a1", "a2")), data=st.data())
    def actuator_reads(self, actuator: str, data: st.DataObject) -> None:
        owed = sorted(p for p, (rec, _) in self.store.records.items() if r.actuator_owes(rec))
        if not owed or not self.actuators[actuator]:
            return
        plan_id = data.draw(st.sampled_from(owed))
        rec, revision = self.store.records[plan_id]
        self.jobs[actuator, plan_id] = Job(rec, revision, self.actuators[actuator])

    def valid(self, job: Job) -> bool:
        """The lease check before a write: a holder whose lease was taken over has, by
        then, passed its own deadline (it can only be taken once it expired); one that
        acquired it again holds a newer token than the drive it is in."""
        return job.token == self.sink.lease

    @precondition(lambda self: bool(self.jobs_in("read")))
    @rule(data=st.data(), stale=st.booleans())
    def actuator_decides(self, data: st.DataObject, stale: bool) -> None:
        ready = sorted(k for k, j in self.jobs.items() if j.phase == "read")
        if not ready:
            return
        actuator, plan_id = data.draw(st.sampled_from(ready))
        job = self.jobs.pop((actuator, plan_id))
        token = job.token
        step = r.actuator_step(job.rec, token, "stale" if stale else None)
        if step in (r.NOTHING, r.FENCED) or not self.valid(job):
            return
        try:
            if step == r.DROP:
                dropped = r.advance(
                    job.rec, r.DROPPED, by=r.ACTUATOR, now=self.now(), reason="stale"
                )
                self.store.put(dropped, job.revision)
                self.events.append(("PlanDropped", plan_id))
                return
            if step == r.ANNOUNCE:
                self.events.append(("PlanDropped", plan_id))
                return
            rec = job.rec
            if step in (r.START, r.TAKE_OVER):
                rec = r.advance(
                    rec, r.ACTUATING, by=r.ACTUATOR, now=self.now(), fencing_token=token
                )
                self.store.put(rec, job.revision)
        except Conflict:
            return  # moved on meanwhile: decided again from a fresh read, later
        assert rec.proposal is not None
        self.jobs[actuator, plan_id] = Job(
            rec,
            self.store.records[plan_id][1],
            token,
            "evicting",
            [v.object for v in rec.proposal.victims],
        )

    @precondition(lambda self: bool(self.jobs_in("evicting")))
    @rule(data=st.data())
    def actuator_evicts(self, data: st.DataObject) -> None:
        evicting = sorted(k for k, j in self.jobs.items() if j.phase == "evicting")
        if not evicting:
            return
        _actuator, plan_id = key = data.draw(st.sampled_from(evicting))
        job = self.jobs[key]
        if not job.remaining:
            job.phase = "finishing"
            return
        victim = job.remaining.pop(0)
        answer = self.sink.evict(self.store, plan_id, victim, job.token)
        if answer == "fenced":
            del self.jobs[key]
        elif answer == "ok":
            job.done.append(victim)

    @precondition(lambda self: bool(self.jobs_in("finishing")))
    @rule(data=st.data())
    def actuator_finishes(self, data: st.DataObject) -> None:
        finishing = sorted(k for k, j in self.jobs.items() if j.phase == "finishing")
        if not finishing:
            return
        _actuator, plan_id = key = data.draw(st.sampled_from(finishing))
        job = self.jobs.pop(key)
        self.events += [("VictimActuated", plan_id)] * len(job.done)
        self.events.append(("PlanActuated", plan_id))
        if not self.valid(job):
            return
        actuated = r.advance(
            job.rec,
            r.ACTUATED,
            by=r.ACTUATOR,
            now=self.now(),
            fencing_token=job.token,
            actuated=tuple(job.done),
        )
        try:
            self.store.put(actuated, job.revision)
        except Conflict:
            return

    @rule(actuator=st.sampled_from(("a1", "a2")))
    def actuator_crashes(self, actuator: str) -> None:
        for key in [k for k in self.jobs if k[0] == actuator]:
            del self.jobs[key]

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def each_victim_is_evicted_once(self) -> None:
        victims = [e.victim for e in self.sink.log]
        assert len(victims) == len(set(victims)), self.sink.log

    @invariant()
    def evictions_follow_a_durable_confirmation_under_their_token(self) -> None:
        for e in self.sink.log:
            history = self.store.history[e.plan_id]
            before = [rec for at, rec in history if at < e.at]
            assert any(rec.state == r.CONFIRMED for rec in before)
            assert any(rec.state == r.ACTUATING and rec.fencing_token == e.token for rec in before)
            assert e.token == e.lease

    @invariant()
    def a_dropped_plan_evicts_nothing(self) -> None:
        dropped = {
            p for p, h in self.store.history.items() if any(x.state == r.DROPPED for _, x in h)
        }
        assert not dropped & {e.plan_id for e in self.sink.log}

    @invariant()
    def no_drop_is_announced_for_a_plan_that_touched_a_victim(self) -> None:
        touched = {p for kind, p in self.events if kind == "VictimActuated"}
        assert not {p for kind, p in self.events if kind == "PlanDropped"} & touched

    @invariant()
    def records_move_only_as_the_protocol_allows(self) -> None:
        for history in self.store.history.values():
            states = [rec.state for _, rec in history]
            assert states[0] == r.REQUESTED
            for a, b in itertools.pairwise(states):
                assert (a, b) in LEGAL, states

    @invariant()
    def no_victim_is_promised_to_two_plans(self) -> None:
        promised: list[str] = [
            v.object
            for rec, _ in self.store.records.values()
            if rec.state in (r.CONFIRMED, r.ACTUATING, r.ACTUATED) and rec.proposal is not None
            for v in rec.proposal.victims
        ]
        assert len(promised) == len(set(promised)), promised


# PLAN_MACHINE_EXAMPLES=5000 explores further (make test runs the default).
PlanMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("PLAN_MACHINE_EXAMPLES", "300")),
    stateful_step_count=80,
    deadline=None,
)
test_plan_protocol = PlanMachine.TestCase
