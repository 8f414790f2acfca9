"""The live ledger equals a snapshot built from scratch after any sequence of changes;
scratch sections and plan holds are undone exactly."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model import ClusterState, Workload
from gangpreempt.model.workloads import Condition
from gangpreempt.planning import admission_pass
from gangpreempt.planning.inflight import PlanInFlight
from gangpreempt.quota import Snapshot
from gangpreempt.quota.ledger import Ledger
from tests.builders import NOW, admitted, cluster_queue, pending, quota, state
from tests.unit.test_properties import clusters

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fingerprint(snap: Snapshot) -> dict[str, Any]:
    nodes = {f"cq/{n}": cq.node for n, cq in snap.cqs.items()} | {
        f"cohort/{n}": c for n, c in snap.cohorts.items()
    }
    return {
        "usage": {
            name: sorted((fr, v) for fr, v in node.usage.items() if v)
            for name, node in nodes.items()
        },
        "admitted": sorted(snap.admitted),
        "pinned": sorted(snap.pinned),
        "index": {
            name: {k: [aw.key for aw in lst] for k, lst in cq._index.items() if lst}
            for name, cq in snap.cqs.items()
        },
    }


def with_change(
    st_: ClusterState, key: str, change: str
) -> tuple[Workload | None, Workload | None]:
    """Apply one change to workload ``key`` in the state; return (old, new)."""
    old = st_.workloads.get(key)
    if old is None:
        return None, None
    if change == "release":
        new = msgspec.structs.replace(
            old, admission=None, conditions=(Condition("QuotaReserved", "False"),)
        )
    elif change == "evict":
        new = msgspec.structs.replace(
            old, conditions=(*old.conditions, Condition("Evicted", "True", "Preempted", NOW))
        )
    elif change == "delete":
        del st_.workloads[key]
        return old, None
    else:  # "bump": an unrelated update
        new = msgspec.structs.replace(old, resource_version=old.resource_version + "x")
    st_.workloads[key] = new
    return old, new


@SETTINGS
@given(
    clusters(),
    st.lists(
        st.tuples(st.integers(0, 20), st.sampled_from(["release", "evict", "delete", "bump"])),
        max_size=12,
    ),
)
def test_incremental_ledger_equals_a_rebuild(
    case: tuple[ClusterState, str], changes: list[tuple[int, str]]
) -> None:
    st_, _ = case
    ledger = Ledger(st_, NOW)
    keys = sorted(st_.workloads)
    for i, change in changes:
        if not keys:
            break
        old, new = with_change(st_, keys[i % len(keys)], change)
        ledger.changed("Workload", old, new)
    assert fingerprint(ledger.current(NOW)) == fingerprint(Snapshot.build(st_, NOW))


@SETTINGS
@given(clusters())
def test_a_scratch_admission_pass_leaves_the_ledger_as_it_was(
    case: tuple[ClusterState, str],
) -> None:
    st_, _ = case
    snap = Ledger(st_, NOW).current(NOW)
    before = fingerprint(snap)
    pinned = sorted(snap.admitted)[:2]
    with snap.scratch():
        for key in pinned:
            snap.pin(key)
        decisions = admission_pass(snap)
    assert fingerprint(snap) == before
    # ...and it decided what the same pass on a fresh snapshot decides.
    fresh = Snapshot.build(st_, NOW)
    for key in pinned:
        fresh.pin(key)
    assert decisions == admission_pass(fresh)


def test_a_held_plan_keeps_its_victims_out_until_it_ends() -> None:
    cq = cluster_queue("q", {"default": {"cpu": quota(4000)}}, within="LowerPriority")
    victim = admitted("v", "q", {"cpu": ("default", 4000)}, priority=1)
    st_ = state([cq], [victim])
    gang = pending("g", "q", {"cpu": 4000}, priority=9)
    st_.workloads[gang.key] = gang
    ledger = Ledger(st_, NOW)
    base = fingerprint(ledger.current(NOW))
    plan = PlanInFlight("p1", gang.key, "q", {"main": {"cpu": "default"}}, (victim.key,))
    ledger.hold(plan)
    held = fingerprint(ledger.current(NOW))
    assert held["admitted"] == []  # the victim is leaving: not a candidate for anyone
    assert held["usage"]["cq/q"] == [(("default", "cpu"), 4000)]  # the gang's quota is held
    # The victim's own updates (it is evicted, then terminates) do not bring it back.
    old, new = with_change(st_, victim.key, "evict")
    ledger.changed("Workload", old, new)
    assert fingerprint(ledger.current(NOW))["admitted"] == []
    old, new = with_change(st_, victim.key, "release")
    ledger.changed("Workload", old, new)
    # The gang is admitted: its real usage replaces the held one, exactly once.
    admitted_gang = admitted("g", "q", {"cpu": ("default", 4000)}, priority=9)
    old = st_.workloads[gang.key]
    st_.workloads[gang.key] = admitted_gang
    ledger.changed("Workload", old, admitted_gang)
    assert fingerprint(ledger.current(NOW))["usage"]["cq/q"] == [(("default", "cpu"), 4000)]
    ledger.unhold("p1")
    assert fingerprint(ledger.current(NOW)) == fingerprint(Snapshot.build(st_, NOW))
    # A plan that ends without running (dropped) gives everything back.
    ledger2 = Ledger(state([cq], [victim, gang]), NOW)
    ledger2.hold(plan)
    ledger2.unhold("p1")
    assert fingerprint(ledger2.current(NOW)) == base
