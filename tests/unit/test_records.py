"""The plan record's moves, the actuator's decision on a record, and quota's flights
rebuilt from records (backoff, orphans, newest plan first)."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gangpreempt import events
from gangpreempt.bus import records as records_bus
from gangpreempt.bus.topology import Topology
from gangpreempt.planning import records as r
from services.quota.flights import ADMITTING, CONFIRMED, REQUESTED, Flight, Flights

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def proposal(plan_id: str = "p1") -> events.PlanProposed:
    return events.PlanProposed(
        id=f"proposed-{plan_id}",
        occurred_at=T0,
        plan_id=plan_id,
        request_id="req",
        preemptor="Workload/ns/gang",
        preemptor_uid="",
        cluster_queue="q",
        pod_sets=("main",),
        flavors={},
        victims=(events.PlannedVictim("Workload/ns/v", "v-uid", "1", "r", "q", 0),),
    )


def record(
    state: str = r.REQUESTED, plan_id: str = "p1", at: int = 0, **kw: object
) -> r.PlanRecord:
    when = T0 + timedelta(seconds=at)
    rec = r.new_record(plan_id, f"req-{plan_id}", "Workload/ns/gang", "ns/gang", when)
    return msgspec.structs.replace(rec, state=state, **kw)


def test_the_happy_path_moves_forward_by_each_role() -> None:
    rec = record()
    rec = r.advance(rec, r.CONFIRMED, by=r.QUOTA, now=T0, proposal=proposal())
    rec = r.advance(rec, r.ACTUATING, by=r.ACTUATOR, now=T0, fencing_token=3)
    rec = r.advance(rec, r.ACTUATING, by=r.ACTUATOR, now=T0, fencing_token=5)  # taken over
    rec = r.advance(rec, r.ACTUATED, by=r.ACTUATOR, now=T0, fencing_token=5, actuated=("x",))
    rec = r.advance(rec, r.CLOSED, by=r.QUOTA, now=T0, reason="admitted")
    assert rec.state == r.CLOSED
    assert rec.fencing_token == 5


@pytest.mark.parametrize(
    ("state", "to", "by", "changes"),
    [
        (r.REQUESTED, r.CONFIRMED, r.ACTUATOR, {"proposal": proposal()}),  # quota's move
        (r.REQUESTED, r.CONFIRMED, r.QUOTA, {}),  # without the plan
        (r.REQUESTED, r.ACTUATING, r.ACTUATOR, {"fencing_token": 1}),  # not confirmed
        (r.CONFIRMED, r.REJECTED, r.QUOTA, {}),  # answered already
        (r.ACTUATING, r.DROPPED, r.ACTUATOR, {}),  # once touched, only forward
        (r.ACTUATING, r.ACTUATING, r.ACTUATOR, {"fencing_token": 2}),  # not a newer token
        (r.ACTUATING, r.ACTUATED, r.ACTUATOR, {"fencing_token": 9}),  # not its token
        (r.DROPPED, r.ACTUATING, r.ACTUATOR, {"fencing_token": 9}),  # terminal
        (r.DROPPED, r.DROPPED, r.ACTUATOR, {"reason": "again"}),  # only to announce
        (r.CLOSED, r.CLOSED, r.QUOTA, {}),
        (r.EXPIRED, r.CONFIRMED, r.QUOTA, {"proposal": proposal()}),  # a late proposal
    ],
)
def test_illegal_moves_are_refused(
    state: str, to: str, by: str, changes: dict[str, object]
) -> None:
    rec = record(state, fencing_token=2)
    with pytest.raises(r.IllegalMove):
        r.advance(rec, to, by=by, now=T0, **changes)


def test_a_drop_is_announced_once() -> None:
    rec = r.advance(record(r.CONFIRMED), r.DROPPED, by=r.ACTUATOR, now=T0, reason="stale")
    assert r.actuator_owes(rec)
    announced = r.advance(rec, r.DROPPED, by=r.ACTUATOR, now=T0, announced=True)
    assert not r.actuator_owes(announced)
    with pytest.raises(r.IllegalMove):
        r.advance(announced, r.DROPPED, by=r.ACTUATOR, now=T0, announced=True)


@pytest.mark.parametrize(
    ("state", "token_on_record", "stale", "expected"),
    [
        (r.CONFIRMED, 0, None, r.START),
        (r.CONFIRMED, 0, "victim gone", r.DROP),
        (r.ACTUATING, 3, None, r.RESUME),
        (r.ACTUATING, 3, "victim gone", r.RESUME),  # touched: never dropped
        (r.ACTUATING, 2, None, r.TAKE_OVER),
        (r.ACTUATING, 4, None, r.FENCED),
        (r.ACTUATED, 3, None, r.NOTHING),
        (r.REQUESTED, 0, None, r.NOTHING),
        (r.REJECTED, 0, None, r.NOTHING),
    ],
)
def test_what_the_actuator_holding_token_3_does(
    state: str, token_on_record: int, stale: str | None, expected: str
) -> None:
    assert r.actuator_step(record(state, fencing_token=token_on_record), 3, stale) == expected


# -- quota's flights ---------------------------------------------------------------------------


class Book:
    def __init__(self) -> None:
        self.seq = 10
        self.changes: list[tuple[str, str | None, str | None]] = []
        self.flights = Flights(self.changed, lambda: self.seq)

    def changed(self, key: str, old: Flight | None, new: Flight | None) -> None:
        self.changes.append((key, old.status if old else None, new.status if new else None))


def test_flights_follow_the_records_and_take_holds_once_confirmed() -> None:
    b = Book()
    b.flights.learn(record())
    assert b.flights.by_preemptor["ns/gang"].status == REQUESTED
    b.flights.learn(record(r.CONFIRMED, proposal=proposal()))
    b.flights.learn(record(r.ACTUATING, proposal=proposal(), fencing_token=1))
    assert b.flights.by_preemptor["ns/gang"].status == CONFIRMED
    b.flights.learn(record(r.ACTUATED, proposal=proposal(), fencing_token=1))
    b.flights.admitting("ns/gang")
    assert b.flights.by_preemptor["ns/gang"].status == ADMITTING
    b.flights.learn(record(r.ACTUATED, proposal=proposal(), fencing_token=1))  # echo
    assert b.flights.by_preemptor["ns/gang"].status == ADMITTING
    b.flights.end("ns/gang", "admitted")
    (owed,) = b.flights.take_owed()
    assert (owed.plan_id, owed.source, owed.target) == ("p1", r.ACTUATED, r.CLOSED)
    assert b.changes[-1] == ("ns/gang", ADMITTING, None)
    assert "ns/gang" not in b.flights.failures  # it worked


def test_rebuilding_takes_the_newest_plan_and_owes_the_older_an_end() -> None:
    b = Book()
    b.flights.learn(record(r.ACTUATED, "old", at=0, proposal=proposal("old")))
    b.flights.learn(record(r.REQUESTED, "new", at=5))
    assert b.flights.by_preemptor["ns/gang"].plan_id == "new"
    b.flights.learn(record(r.ACTUATED, "old", at=0, proposal=proposal("old")))  # seen again
    b.flights.learn(record(r.REQUESTED, "older", at=-5))
    owed = {(o.plan_id, o.target) for o in b.flights.take_owed()}
    assert owed == {("old", r.CLOSED), ("older", r.EXPIRED)}


@pytest.mark.parametrize("late_first", [False, True], ids=["confirmed-first", "late-first"])
def test_a_late_request_of_an_older_holder_never_displaces_a_confirmed_plan(
    late_first: bool,
) -> None:
    """Holder 1 (token 1) wrote a request late, with a clock ahead of holder 2's, after
    holder 2 (token 2) requested again and confirmed; holder 3 adopts the late request
    (``quota_token`` 3) and rebuilds its flights from the records in either order."""
    confirmed = record(
        r.CONFIRMED, "mine", at=0, proposal=proposal("mine"), quota_token=2, requested_token=2
    )
    late = record(r.REQUESTED, "late", at=30, quota_token=3, requested_token=1)
    b = Book()
    b.flights.token = 3
    for rec in (late, confirmed) if late_first else (confirmed, late):
        b.flights.learn(rec)
    assert b.flights.by_preemptor["ns/gang"].plan_id == "mine"
    assert [(o.plan_id, o.target) for o in b.flights.take_owed()] == [("late", r.EXPIRED)]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(r.IN_FLIGHT | r.TERMINAL)),
            st.integers(0, 3),
            st.integers(-2, 2),
        ),
        min_size=1,
        max_size=5,
        unique_by=lambda x: x[1:],
    ),
    st.randoms(use_true_random=False),
)
def test_every_order_of_reading_picks_the_same_flight(
    made: list[tuple[str, int, int]], rnd: random.Random
) -> None:
    """Whatever order a holder reads a preemptor's records in, the flight it ends with
    is the same one: the in-flight record requested under the latest token, then the
    latest clock."""
    recs = [
        record(state, f"p{token}{at}", at=at, requested_token=token, quota_token=token)
        for state, token, at in made
    ]
    picked = set()
    for _ in range(4):
        rnd.shuffle(recs)
        b = Book()
        for rec in recs:
            b.flights.learn(rec)
        flight = b.flights.by_preemptor.get("ns/gang")
        picked.add(flight.plan_id if flight else None)
    in_flight = [x for x in recs if x.state in r.IN_FLIGHT]
    latest = max(in_flight, key=lambda x: (x.requested_token, x.requested_at), default=None)
    assert picked == {latest.plan_id if latest else None}


def test_a_failed_attempt_is_retried_when_the_state_moves_or_its_backoff_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = Book()
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    b.flights.learn(record())
    b.flights.learn(record(r.REJECTED, reason="victim gone"))
    assert "ns/gang" not in b.flights.by_preemptor
    assert not b.flights.may_request("ns/gang", 10)  # same state, backoff running
    assert b.flights.may_request("ns/gang", 11)  # the state changed
    assert b.flights.next_retry() == pytest.approx(1000.5)
    clock[0] += 0.5
    assert b.flights.may_request("ns/gang", 10)  # a quiet cluster retries too
    # Each failure in a row doubles the wait, up to a ceiling.
    for _ in range(10):
        b.flights.learn(record(r.REQUESTED, plan_id="again"))
        b.flights.learn(record(r.DROPPED, plan_id="again"))
    assert b.flights.failures["ns/gang"].retry_at - clock[0] == pytest.approx(10.0)


def test_a_request_unanswered_too_long_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    b = Book()
    clock = [50.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    b.flights.learn(record())
    assert b.flights.overdue(4.0) == []
    clock[0] += 5
    assert b.flights.overdue(4.0) == ["ns/gang"]
    b.flights.fail("ns/gang", "no proposal")
    (owed,) = b.flights.take_owed()
    assert (owed.source, owed.target) == (r.REQUESTED, r.EXPIRED)
    assert "ns/gang" in b.flights.failures


def test_a_quota_move_under_an_older_token_than_the_records_is_refused() -> None:
    rec = record(quota_token=7)
    with pytest.raises(r.IllegalMove, match="quota token 5 is stale"):
        r.advance(rec, r.CONFIRMED, by=r.QUOTA, now=T0, proposal=proposal(), quota_token=5)
    with pytest.raises(r.IllegalMove, match="stale"):
        r.advance(rec, r.EXPIRED, by=r.QUOTA, now=T0, quota_token=6)
    # the holder's own token (or a newer one) moves it
    moved = r.advance(rec, r.CONFIRMED, by=r.QUOTA, now=T0, proposal=proposal(), quota_token=7)
    assert moved.quota_token == 7
    # the actuator's moves keep quota's token
    actuating = r.advance(moved, r.ACTUATING, by=r.ACTUATOR, now=T0, fencing_token=2)
    assert actuating.quota_token == 7


def test_a_new_quota_holder_adopts_an_actuated_plan() -> None:
    rec = record(r.ACTUATED, quota_token=3, fencing_token=1)
    assert r.takeover_move(rec, 4) == r.ACTUATED
    assert r.takeover_move(rec, 3) is None  # already its own
    adopted = r.advance(rec, r.ACTUATED, by=r.QUOTA, now=T0, quota_token=4)
    assert (adopted.state, adopted.quota_token) == (r.ACTUATED, 4)
    with pytest.raises(r.IllegalMove, match="adopting it needs a quota token above 4"):
        r.advance(adopted, r.ACTUATED, by=r.QUOTA, now=T0, quota_token=4)
    # the older holder's move of the adopted record is refused
    with pytest.raises(r.IllegalMove, match="stale"):
        r.advance(adopted, r.CLOSED, by=r.QUOTA, now=T0, quota_token=3)


def test_a_new_quota_holder_expires_an_older_holders_request() -> None:
    rec = record(r.REQUESTED, quota_token=3)
    assert r.takeover_move(rec, 4) == r.EXPIRED
    assert r.takeover_move(rec, 3) is None  # its own: it may confirm it
    expired = r.advance(rec, r.EXPIRED, by=r.QUOTA, now=T0, quota_token=4)
    # the older holder's confirmation of it is refused: the request ended
    with pytest.raises(r.IllegalMove):
        r.advance(expired, r.CONFIRMED, by=r.QUOTA, now=T0, proposal=proposal(), quota_token=3)
    with pytest.raises(r.IllegalMove):  # and nobody adopts a request as it is any more
        r.advance(rec, r.REQUESTED, by=r.QUOTA, now=T0, quota_token=4)


@pytest.mark.parametrize("state", [r.CONFIRMED, r.ACTUATING, r.DROPPED, r.CLOSED])
def test_the_actuators_and_the_ended_records_are_not_adopted(state: str) -> None:
    assert not r.quota_adopts(record(state, quota_token=1), 9)


def test_a_request_an_older_holder_made_after_the_takeover_is_no_flight() -> None:
    seen: list[tuple[str, Flight | None, Flight | None]] = []
    flights = Flights(lambda k, o, n: seen.append((k, o, n)), lambda: 0, token=5)
    flights.learn(record(quota_token=5, plan_id="mine"))
    assert flights.by_preemptor["ns/gang"].plan_id == "mine"
    stale = record(quota_token=4, plan_id="theirs", at=1)  # newer, but under token 4
    flights.learn(stale)
    assert flights.by_preemptor["ns/gang"].plan_id == "mine"
    assert [(o.plan_id, o.target) for o in flights.take_owed()] == [("theirs", r.EXPIRED)]
    # one for a preemptor without a flight is expired too, not taken as its flight
    flights.learn(record(quota_token=4, plan_id="other", at=2, flight="ns/other"))
    assert "ns/other" not in flights.by_preemptor
    assert [o.plan_id for o in flights.take_owed()] == ["other"]


class _NoNats:
    def jetstream(self) -> None:
        return None


def test_a_record_books_delete_markers_are_forgotten_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(records_bus.time, "monotonic", lambda: clock[0])
    book = records_bus.RecordBook(_NoNats(), Topology("t"), keep_tombstones=60)  # type: ignore[arg-type]
    for i in range(5):
        book.learn(record(plan_id=f"p{i}"), 1)
        book.learn(None, 2, f"p{i}")  # deleted
        clock[0] += 20
    # each delete is remembered for 60 s, the oldest forgotten first: a follower that
    # never purges (the actuator, a standby) holds as many as a minute's worth
    assert list(book.tombstones) == ["p1", "p2", "p3", "p4"]  # p0 was 80 s old
    assert book.records == {}
