"""The chaos checker finds each violation it is for, and none in a clean run."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from gangpreempt import events
from gangpreempt.planning import records as r
from services.ingest.journal import EvictionEntry
from tests.chaos.checker import Evidence, Revision, violations

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rev(at: float, state: str, plan: str = "p1", token: int = 0) -> Revision:
    rec = r.new_record(plan, f"req-{plan}", "Workload/ns/g", "ns/g", T0)
    return Revision(at, msgspec.structs.replace(rec, state=state, fencing_token=token))


def eviction(
    at: float, plan: str = "p1", ref: str = "Workload/ns/v", token: int = 3
) -> EvictionEntry:
    return EvictionEntry(at, plan, ref, f"{ref}-uid", token, token)


def event(kind: type[events.Event], plan: str = "p1", **kw: object) -> events.Event:
    fields: dict[str, object] = {
        "id": f"{kind.__name__}-{plan}",
        "occurred_at": T0,
        "plan_id": plan,
    }
    fields["preemptor"] = kw.pop("preemptor", "Workload/ns/g")
    if kind is events.VictimActuated:
        fields |= {
            "victim": "Workload/ns/v",
            "victim_uid": "",
            "reason": "",
            "sink": "sim",
            "fencing_token": 3,
        }
    elif kind is events.PlanActuated:
        fields |= {"victims": ("Workload/ns/v",), "fencing_token": 3}
    elif kind is events.PlanDropped:
        fields |= {"reason": "stale"}
    return kind(**fields, **kw)


def clean() -> Evidence:
    return Evidence(
        decisions=[event(events.VictimActuated), event(events.PlanActuated)],
        revisions={"p1": [rev(1, r.REQUESTED), rev(2, r.CONFIRMED), rev(3, r.ACTUATING, token=3)]},
        evictions=[eviction(4)],
        acquisitions=[(0.5, 3)],
        settle_s=2.0,
        bound_s=30.0,
    )


def test_a_clean_run_has_no_violation() -> None:
    assert violations(clean()) == []


def test_each_violation_is_found() -> None:
    cases: dict[str, Evidence] = {}
    twice = clean()
    twice.evictions.append(eviction(5, plan="p2"))
    twice.revisions["p2"] = [rev(1, r.CONFIRMED, "p2"), rev(2, r.ACTUATING, "p2", 3)]
    cases["evicted twice"] = twice
    unconfirmed = clean()
    unconfirmed.revisions["p1"] = [
        rev(1, r.REQUESTED),
        rev(5, r.CONFIRMED),
        rev(6, r.ACTUATING, token=3),
    ]
    cases["without a durable confirmation"] = unconfirmed
    dropped = clean()
    dropped.revisions["p1"].append(rev(7, r.DROPPED))
    cases["which was dropped"] = dropped
    stale = clean()
    stale.acquisitions.append((3.5, 4))  # a newer holder before the eviction at 4
    cases["stale token"] = stale
    announced = clean()
    announced.decisions.append(event(events.PlanDropped))
    cases["which has a VictimActuated"] = announced
    duplicated = clean()
    duplicated.decisions.append(event(events.PlanActuated, plan="p2"))
    cases["2 actuated plans"] = duplicated
    slow = clean()
    slow.settle_s = 31.0
    cases["after the faults stopped"] = slow
    stuck = clean()
    stuck.settle_s = None
    cases["not every gang was running"] = stuck
    for expected, evidence in cases.items():
        found = violations(evidence)
        assert any(expected in v for v in found), (expected, found)
