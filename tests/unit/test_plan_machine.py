"""The plan record protocol as a state machine, explored by hypothesis: two quota
instances, victims and two actuators over a compare-and-set store and a fencing sink,
with proposals duplicated, reordered and redelivered (lost acks), every role crashing
at any step (losing all it held in memory), and each lease (quota's, the actuator's)
taken over while its old holder still runs (a paused process). A quota instance decides
only while it holds its lease, but a write it decided on may land later (a pause
between its lease check and the write): those writes are queued and land at any later
step. The roles take the same decisions as the services, through the same pure
functions (``records.advance``, ``records.actuator_step``, ``records.takeover_move``);
the invariants are those the chaos checker applies to real runs."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gangpreempt import events
from gangpreempt.errors import Conflict
from gangpreempt.planning import records as r

# 300 runs of 80 steps take about 5 s on an idle core; a fresh-clone run beside the
# services, a control plane and busy loops once took it past the default 120 s.
pytestmark = [pytest.mark.unit, pytest.mark.timeout(600)]

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
    ("actuated", "actuated"),  # adopted by a new quota lease holder
}
QUOTAS = ("q1", "q2")


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
class Write:
    """A quota write decided under the lease, on its way to the store."""

    rec: r.PlanRecord
    revision: int | None  # None: a create
    quota: str


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
        # each quota instance's memory: preemptor -> plan
        self.flights: dict[str, dict[str, str]] = {q: {} for q in QUOTAS}
        # each quota instance's holds of the confirmations it decided whose write has not
        # landed yet (the service takes the holds before it awaits the write)
        self.confirming: dict[str, dict[str, set[str]]] = {q: {} for q in QUOTAS}
        self.quota_tokens: dict[str, int] = {q: 0 for q in QUOTAS}
        self.quota_lease = 0  # the token of whoever holds quota's lease now
        self.writes: list[Write] = []  # quota writes on their way
        self.requests = 0
        self.tokens = 0
        self.actuators: dict[str, int] = {"a1": 0, "a2": 0}  # actuator -> its token
        self.jobs: dict[tuple[str, str], Job] = {}

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.store.clock)

    # -- quota -----------------------------------------------------------------------------
    def holder(self) -> str | None:
        """The quota instance that holds the lease (its check before a write passes)."""
        return next((q for q, t in self.quota_tokens.items() if t and t == self.quota_lease), None)

    def rebuild(self, q: str) -> None:
        """``q``'s flights from the records (what a restart or a takeover does)."""
        flights: dict[str, r.PlanRecord] = {}
        for rec, _ in self.store.records.values():
            if rec.state == r.REQUESTED and rec.quota_token < self.quota_tokens[q]:
                continue  # made by an older holder after this one adopted the requests
            current = flights.get(rec.flight)
            if rec.state in r.IN_FLIGHT and (current is None or r.supersedes(rec, current)):
                flights[rec.flight] = rec
        self.flights[q] = {key: rec.plan_id for key, rec in flights.items()}
        self.confirming[q] = {}

    def send(self, write: Write, now: bool) -> None:
        """A write decided by the holder: stored now, or later (paused before it)."""
        if now:
            self.land(write)
        else:
            self.writes.append(write)

    def land(self, w: Write) -> None:
        try:
            if w.revision is None:
                self.store.create(w.rec)
            else:
                self.store.put(w.rec, w.revision)
        except Conflict:
            pass  # a compare-and-set that lost: the holder decides again from a read
        if w.rec.state == r.CONFIRMED:  # stored, or lost: the record says which now
            self.confirming[w.quota].pop(w.rec.plan_id, None)

    @precondition(lambda self: bool(self.writes))
    @rule(data=st.data())
    def a_quota_write_lands(self, data: st.DataObject) -> None:
        self.land(self.writes.pop(data.draw(st.integers(0, len(self.writes) - 1))))

    @rule(quota=st.sampled_from(QUOTAS))
    def quota_lease_taken(self, quota: str) -> None:
        """``quota`` acquires the lease (the other may still run, paused, with writes on
        their way); it writes every record whose next move is quota's under its token
        (an actuated plan adopted, a request expired), then rebuilds."""
        self.tokens += 1
        token = self.quota_tokens[quota] = self.quota_lease = self.tokens
        for _plan_id, (rec, revision) in sorted(self.store.records.items()):
            move = r.takeover_move(rec, token)
            if move is not None:
                moved = r.advance(rec, move, by=r.QUOTA, now=self.now(), quota_token=token)
                self.store.put(moved, revision)
        self.rebuild(quota)

    @rule(preemptor=st.sampled_from(PREEMPTORS), now=st.booleans(), ahead=st.integers(0, 3))
    def quota_requests(self, preemptor: str, now: bool, ahead: int = 0) -> None:
        """The holder requests a plan; its clock may run ``ahead`` of the store's (two
        quota instances on two machines)."""
        q = self.holder()
        if q is None or preemptor in self.flights[q]:
            return  # a plan in flight: no new request
        self.requests += 1
        request_id = f"req-{self.requests}"
        plan_id = events.stable_id("plan", request_id)
        at = self.now() + timedelta(seconds=ahead)
        rec = r.new_record(
            plan_id, request_id, preemptor, preemptor, at, quota_token=self.quota_lease
        )
        self.flights[q][preemptor] = plan_id
        self.send(Write(rec, None, q), now)

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

    def claimed(self, q: str, but: str) -> set[str]:
        """The victims of the plans ``q`` holds (confirmed, actuating, actuated), and of
        those it decided to confirm whose write is on its way."""
        held = {
            v.object
            for plan_id in self.flights[q].values()
            if plan_id != but
            and (found := self.store.records.get(plan_id)) is not None
            and found[0].state in (r.CONFIRMED, r.ACTUATING, r.ACTUATED)
            and found[0].proposal is not None
            for v in found[0].proposal.victims
        }
        for plan_id, victims in self.confirming[q].items():
            if plan_id != but and plan_id in self.flights[q].values():
                held |= victims
        return held

    @precondition(lambda self: bool(self.inbox))
    @rule(data=st.data(), ack_lost=st.booleans(), duplicate=st.booleans(), now=st.booleans())
    def quota_confirms(
        self, data: st.DataObject, ack_lost: bool, duplicate: bool, now: bool
    ) -> None:
        """A proposal delivered to the holder (any of those waiting: reordered); its ack
        may be lost (it is delivered again later) or it may be a duplicate."""
        q = self.holder()
        if q is None:
            return
        i = data.draw(st.integers(0, len(self.inbox) - 1))
        p = self.inbox[i] if (ack_lost or duplicate) else self.inbox.pop(i)
        if duplicate:
            self.inbox.append(p)
        found = self.store.get(p.plan_id)
        if found is None or found[0].state != r.REQUESTED:
            return  # answered already: the record holds the answer
        rec, revision = found
        ok = self.flights[q].get(rec.flight) == rec.plan_id and not self.claimed(q, rec.plan_id) & {
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
            quota_token=self.quota_lease,
        )
        if not ok and self.flights[q].get(rec.flight) == rec.plan_id:
            del self.flights[q][rec.flight]
        if ok:  # the holds first, then the write (services.quota.confirming.decide)
            self.confirming[q][rec.plan_id] = {v.object for v in p.victims}
        self.send(Write(moved, revision, q), now)

    @precondition(lambda self: bool(self.in_state(r.REQUESTED, r.ACTUATED)))
    @rule(data=st.data(), end=st.sampled_from((r.EXPIRED, r.CLOSED)), now=st.booleans())
    def quota_ends(self, data: st.DataObject, end: str, now: bool) -> None:
        q = self.holder()
        source = r.REQUESTED if end == r.EXPIRED else r.ACTUATED
        plans = sorted(p for p, (rec, _) in self.store.records.items() if rec.state == source)
        if q is None or not plans:
            return
        rec, revision = self.store.records[data.draw(st.sampled_from(plans))]
        moved = r.advance(
            rec, end, by=r.QUOTA, now=self.now(), reason="x", quota_token=self.quota_lease
        )
        if self.flights[q].get(rec.flight) == rec.plan_id:
            del self.flights[q][rec.flight]
        self.send(Write(moved, revision, q), now)

    @rule(quota=st.sampled_from(QUOTAS))
    def quota_restarts(self, quota: str) -> None:
        """A process restart: all it held in memory is lost. The holder takes its lease
        again, under a new token (its writes still on their way are then refused)."""
        if self.holder() == quota:
            self.quota_lease_taken(quota)
        else:
            self.rebuild(quota)

    @rule()
    def quota_learns_the_records(self) -> None:
        """The holder follows the records: a flight whose plan ended ends; a request an
        older holder made after the takeover is no flight (it is expired)."""
        q = self.holder()
        if q is None:
            return
        for preemptor, plan_id in list(self.flights[q].items()):
            found = self.store.records.get(plan_id)
            if found is not None and found[0].state in r.TERMINAL:
                del self.flights[q][preemptor]
        for plan_id, (rec, revision) in sorted(self.store.records.items()):
            if rec.state == r.REQUESTED and rec.quota_token < self.quota_lease:
                if self.flights[q].get(rec.flight) == plan_id:
                    del self.flights[q][rec.flight]
                expired = r.advance(
                    rec, r.EXPIRED, by=r.QUOTA, now=self.now(), quota_token=self.quota_lease
                )
                self.store.put(expired, revision)

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
    def quota_never_moves_a_record_under_an_older_token(self) -> None:
        for history in self.store.history.values():
            tokens = [rec.quota_token for _, rec in history]
            assert tokens == sorted(tokens), tokens

    @invariant()
    def two_quota_instances_never_both_confirm(self) -> None:
        """Confirmations, in the order they were stored, under tokens that never go down."""
        confirms = sorted(
            (at, rec.quota_token)
            for history in self.store.history.values()
            for at, rec in history
            if rec.state == r.CONFIRMED
        )
        tokens = [t for _, t in confirms]
        assert tokens == sorted(tokens), confirms

    @invariant()
    def a_preemptor_has_one_plan_in_flight(self) -> None:
        held = [
            rec.preemptor
            for rec, _ in self.store.records.values()
            if rec.state in (r.CONFIRMED, r.ACTUATING, r.ACTUATED)
        ]
        assert len(held) == len(set(held)), held

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


class Draws:
    """Stands for hypothesis's ``data`` in a sequence written out by hand: each draw
    takes the next value given."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def draw(self, _strategy: object) -> object:
        return self.values.pop(0)


@pytest.mark.parametrize("skew", [0, 5], ids=["same-instant", "clock-ahead"])
def test_a_late_request_of_an_older_holder_never_takes_a_confirmed_plans_place(
    skew: int,
) -> None:
    """A request written under an older quota token lands after the preemptor's next
    plan was confirmed, at the same instant by the clock (or earlier, by a skewed one);
    a third holder adopts it. Its preemptor's flight is the confirmed plan, whatever the
    clocks say: the late request is no flight, and is never confirmed. (Found by the
    state machine on a fresh clone.)"""
    m = PlanMachine()
    m.quota_lease_taken("q1")
    m.quota_requests("Workload/ns/a", now=False)  # on its way: the holder pauses
    late = events.stable_id("plan", "req-1")
    paused = m.writes[0].rec  # its clock may run ahead of the next holder's
    m.writes[0].rec = msgspec.structs.replace(
        paused, requested_at=paused.requested_at + timedelta(seconds=skew)
    )
    m.quota_lease_taken("q1")  # its lease again, under a new token: nothing to adopt
    m.quota_requests("Workload/ns/a", now=True)
    current = events.stable_id("plan", "req-2")
    assert m.store.records[current][0].requested_at <= m.writes[0].rec.requested_at
    m.victims_propose(Draws(current), victims=["Workload/ns/v1"])
    m.quota_confirms(Draws(0), ack_lost=False, duplicate=False, now=True)
    m.a_quota_write_lands(Draws(0))  # the paused holder's request lands
    m.victims_propose(Draws(late), victims=["Workload/ns/v2"])  # and victims answer it
    m.quota_lease_taken("q2")  # expires the late request, rebuilds its flights
    assert m.flights["q2"] == {"Workload/ns/a": current}
    m.quota_confirms(Draws(0), ack_lost=False, duplicate=False, now=True)
    assert m.store.records[late][0].state == r.EXPIRED  # by the takeover: never confirmed
    m.a_preemptor_has_one_plan_in_flight()


def test_a_holder_never_promises_a_victim_it_is_confirming_for_another_plan() -> None:
    """Found by the state machine: one holder confirmed two plans sharing a victim, the
    first confirmation's write still on its way when the second was decided. The service
    takes a confirmation's holds before it awaits the write; so does the model now."""
    m = PlanMachine()
    m.quota_lease_taken("q1")
    m.quota_requests("Workload/ns/a", now=True)
    m.quota_requests("Workload/ns/b", now=True)
    first = events.stable_id("plan", "req-1")
    second = events.stable_id("plan", "req-2")
    m.victims_propose(Draws(first), victims=["Workload/ns/v1"])
    m.victims_propose(Draws(second), victims=["Workload/ns/v1"])
    m.quota_confirms(Draws(0), ack_lost=False, duplicate=False, now=False)  # on its way
    m.quota_confirms(Draws(0), ack_lost=False, duplicate=False, now=False)
    m.a_quota_write_lands(Draws(0))
    m.a_quota_write_lands(Draws(0))
    assert m.store.records[first][0].state == r.CONFIRMED
    assert m.store.records[second][0].state == r.REJECTED
    m.no_victim_is_promised_to_two_plans()
