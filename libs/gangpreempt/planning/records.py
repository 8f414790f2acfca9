"""The plan record: one durable record per plan, moved forward only by compare-and-set.

::

    requested --quota--> confirmed --actuator--> actuating --actuator--> actuated --quota--> closed
        |                    |                     |    ^                     |  ^
        |                    +--actuator--> dropped +----+  a newer actuator   +--+ a newer quota
        |                                                   takes over              adopts it
        +--quota--> rejected | infeasible | expired (also: a newer quota holder's, at takeover)

quota creates the record (``requested``) when it asks for a plan, and answers the
proposal on it (``confirmed`` with the whole proposal, or ``rejected``); the actuator
drops a confirmed plan or moves it to ``actuating`` under its fencing token **before it
touches any victim**, and to ``actuated`` once every victim was evicted; quota closes
an actuated plan when its preemptor is admitted (or gone). Quota and the actuator each
run under a lease whose token fences their writes: the actuator's token is written with
``actuating``; quota's (``quota_token``) with every record it creates or moves, and a
quota instance that takes the lease over first writes again, under its own token, every
record whose next move is quota's, so a write an older holder still has on its way
fails its compare-and-set, and ``advance`` refuses any quota move under an older token
than the record's. ``rejected``,
``infeasible``, ``expired``, ``dropped`` and ``closed`` are terminal. A drop is only
ever written on a ``confirmed`` record, so once a victim is touched the plan can only
roll forward.

This module is pure: the moves and the decisions each role takes on a record. The bus
(``gangpreempt.bus.records``) stores records in a KV bucket, one key per plan, and
writes each move with the revision it read (compare-and-set).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from gangpreempt import events
from gangpreempt.errors import Conflict

REQUESTED = "requested"
CONFIRMED = "confirmed"
REJECTED = "rejected"
INFEASIBLE = "infeasible"
EXPIRED = "expired"
ACTUATING = "actuating"
ACTUATED = "actuated"
DROPPED = "dropped"
CLOSED = "closed"

QUOTA = "quota"
ACTUATOR = "actuator"

# state -> {next state: the role that may write it}
MOVES: dict[str, dict[str, str]] = {
    REQUESTED: {
        CONFIRMED: QUOTA,
        REJECTED: QUOTA,
        INFEASIBLE: QUOTA,
        EXPIRED: QUOTA,
    },
    CONFIRMED: {ACTUATING: ACTUATOR, DROPPED: ACTUATOR},
    ACTUATING: {ACTUATING: ACTUATOR, ACTUATED: ACTUATOR},
    ACTUATED: {ACTUATED: QUOTA, CLOSED: QUOTA},  # actuated -> actuated: adopted, as above
    DROPPED: {DROPPED: ACTUATOR},  # only to mark the PlanDropped event as published
}
# The states whose next move is quota's: a new quota lease holder moves these first.
QUOTA_OWES = frozenset({REQUESTED, ACTUATED})
TERMINAL = frozenset({REJECTED, INFEASIBLE, EXPIRED, DROPPED, CLOSED})
# The plan holds its preemptor's place (and its victims) in these states.
IN_FLIGHT = frozenset({REQUESTED, CONFIRMED, ACTUATING, ACTUATED})
STATES = frozenset(MOVES) | TERMINAL


class IllegalMove(Conflict):
    """A move the record's current state does not allow (it moved on meanwhile)."""


class PlanRecord(msgspec.Struct, frozen=True, kw_only=True):
    plan_id: str
    request_id: str
    preemptor: str  # the preemptor's ref, as requested (Workload/ns/name, PodGroup/...)
    flight: str  # quota's key for the preemptor (namespace/name, or the ref on nodes)
    requested_at: datetime
    updated_at: datetime
    state: str = REQUESTED
    state_seq: int = 0  # the STATE sequence the request was made at
    proposal: events.PlanProposed | None = None  # the plan itself, from confirmation on
    fencing_token: int = 0  # the actuator's lease token (actuating and after)
    # quota's lease token when it created or last moved the record: a quota instance
    # whose token is older may move it no more
    quota_token: int = 0
    # quota's lease token when it created the record (adoption leaves it): which of two
    # plans for one preemptor is the later, whatever the instances' clocks say
    requested_token: int = 0
    actuated: tuple[str, ...] = ()  # victims evicted (actuated)
    reason: str = ""  # why rejected, infeasible, expired, dropped or closed
    announced: bool = False  # the actuator's PlanDropped / PlanActuated is published
    writer: str = ""  # the instance that wrote this revision
    # W3C trace context of the decision (its quota cycle): the actuator's work and the
    # admission continue that trace.
    trace: dict[str, str] = msgspec.field(default_factory=dict)
    # The disruption budget (planning/budget.py): what the plan cost when quota confirmed
    # it, in the budget's unit, from which scope's budget, and when ("" / None: no budget)
    disruption: float = 0.0
    disruption_scope: str = ""
    confirmed_at: datetime | None = None


def new_record(
    plan_id: str,
    request_id: str,
    preemptor: str,
    flight: str,
    now: datetime,
    state_seq: int = 0,
    writer: str = "",
    quota_token: int = 0,
) -> PlanRecord:
    return PlanRecord(
        plan_id=plan_id,
        request_id=request_id,
        preemptor=preemptor,
        flight=flight,
        requested_at=now,
        updated_at=now,
        state_seq=state_seq,
        writer=writer,
        quota_token=quota_token,
        requested_token=quota_token,
    )


def supersedes(new: PlanRecord, current: PlanRecord) -> bool:
    """Whether ``new`` takes ``current``'s place as its preemptor's one plan in flight
    (two records for one preemptor: a request an older quota holder wrote late, a plan
    whose flight quota ended before it came back). The later request wins: the one made
    under the later lease token, then the later by the clock, then by plan id, so every
    holder picks the same one in any order it reads them. Adoption rewrites
    ``quota_token`` but not ``requested_token``, so a late request an older holder made
    never displaces a plan confirmed since, even when two instances' clocks disagree."""
    if new.state not in IN_FLIGHT:
        return False
    return (new.requested_token, new.requested_at, new.plan_id) > (
        current.requested_token,
        current.requested_at,
        current.plan_id,
    )


def advance(rec: PlanRecord, to: str, *, by: str, now: datetime, **changes: Any) -> PlanRecord:
    """``rec`` moved to ``to`` by ``by`` (a role), or ``IllegalMove``."""
    allowed = MOVES.get(rec.state, {}).get(to)
    if allowed != by:
        raise IllegalMove(f"plan {rec.plan_id}: {by} may not move it from {rec.state} to {to}")
    token = changes.get("fencing_token", rec.fencing_token)
    if to == CONFIRMED and changes.get("proposal") is None:
        raise IllegalMove(f"plan {rec.plan_id}: a confirmation carries the proposal")
    if to == ACTUATING and token <= (rec.fencing_token if rec.state == ACTUATING else 0):
        raise IllegalMove(
            f"plan {rec.plan_id}: actuating under token {token} needs a token above "
            f"{rec.fencing_token}"
        )
    if to == ACTUATED and token != rec.fencing_token:
        raise IllegalMove(
            f"plan {rec.plan_id}: actuated under token {token}, but it is actuating under "
            f"{rec.fencing_token}"
        )
    if rec.state == DROPPED and (rec.announced or not changes.get("announced")):
        raise IllegalMove(f"plan {rec.plan_id}: dropped is terminal")
    if by == QUOTA:
        quota_token = changes.get("quota_token", rec.quota_token)
        if quota_token < rec.quota_token:
            raise IllegalMove(
                f"plan {rec.plan_id}: quota token {quota_token} is stale: the record was "
                f"written under quota token {rec.quota_token}"
            )
        if to == rec.state and quota_token <= rec.quota_token:
            raise IllegalMove(
                f"plan {rec.plan_id}: adopting it needs a quota token above {rec.quota_token}"
            )
    return msgspec.structs.replace(rec, state=to, updated_at=now, **changes)


# -- what the actuator does with a record ---------------------------------------------------

DROP = "drop"  # validate failed: confirmed -> dropped
START = "start"  # confirmed -> actuating under our token, then evict
TAKE_OVER = "take-over"  # actuating under an older token -> ours, then evict again
RESUME = "resume"  # actuating under our token: evict (idempotent) and finish
ANNOUNCE = "announce"  # dropped, its event not yet published
FENCED = "fenced"  # actuating under a newer token than ours: another holder acts
NOTHING = "nothing"


def actuator_step(rec: PlanRecord, token: int, stale: str | None = None) -> str:
    """What the actuator holding lease ``token`` does next with ``rec``; ``stale`` is why
    a confirmed plan no longer matches the live objects (None: it does)."""
    if rec.state == CONFIRMED:
        return DROP if stale is not None else START
    if rec.state == ACTUATING:
        if rec.fencing_token < token:
            return TAKE_OVER
        return RESUME if rec.fencing_token == token else FENCED
    if rec.state == DROPPED and not rec.announced:
        return ANNOUNCE
    return NOTHING


def takeover_move(rec: PlanRecord, token: int) -> str | None:
    """What a quota instance that took the lease with ``token`` writes on ``rec`` before
    it acts, under its token, so that a write an older holder still has on the way fails
    its compare-and-set: an actuated plan is adopted (written again as it is: its victims
    are evicted, quota closes it once its preemptor is admitted); a request of an older
    holder is expired, and the new holder asks again. A request holds nothing and nobody
    touched a victim for it, so ending it costs one more round of victims; adopting it
    would make a request of unknown provenance the new holder's (one an older holder
    wrote late, after another holder had asked again for the same preemptor), and two
    plans for one preemptor could then both be confirmed. None: nothing to write."""
    if rec.quota_token >= token:
        return None
    if rec.state == REQUESTED:
        return EXPIRED
    if rec.state == ACTUATED:
        return ACTUATED
    return None


def quota_adopts(rec: PlanRecord, token: int) -> bool:
    """Whether a new quota lease holder writes ``rec`` before it acts."""
    return takeover_move(rec, token) is not None


def actuator_owes(rec: PlanRecord) -> bool:
    """Whether the actuator still has work on this record."""
    return rec.state in (CONFIRMED, ACTUATING) or (rec.state == DROPPED and not rec.announced)


__all__ = [
    "ACTUATED",
    "ACTUATING",
    "ACTUATOR",
    "ANNOUNCE",
    "CLOSED",
    "CONFIRMED",
    "DROP",
    "DROPPED",
    "EXPIRED",
    "FENCED",
    "INFEASIBLE",
    "IN_FLIGHT",
    "MOVES",
    "NOTHING",
    "QUOTA",
    "QUOTA_OWES",
    "REJECTED",
    "REQUESTED",
    "RESUME",
    "START",
    "STATES",
    "TAKE_OVER",
    "TERMINAL",
    "IllegalMove",
    "PlanRecord",
    "actuator_owes",
    "actuator_step",
    "advance",
    "new_record",
    "quota_adopts",
    "supersedes",
    "takeover_move",
]
