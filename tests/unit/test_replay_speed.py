"""What the replay keeps to go faster gives what it would compute without it:

- the column rows a change touches are rewritten when the columns are next read
  (``UnitTable.columns_for``), not at each change: the arrays are the same, widths too
  (the per-cell priority, pods and start where a unit is: an empty cell's are never
  read, each search masks them out);
- a replayed job's objects are its kind's, read once, with its name and arrival time put
  in (``jobstate._read``): the same objects as the manifest reader reads for it;
- ``NodePlanner.compose`` asks ``kueue_protected`` of the eligible units only: the same
  candidates as excluding the whole protected set;
- ``UnitTable.candidates`` sorts the eligible units when they are few: the same list as
  walking every unit in importance order; a unit's importance, found once, is the one
  found again;
- the nodes' room (``PodRoom``) kept change by change, and found once between changes:
  the room found from scratch."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod
from gangpreempt.model.workloads import (
    ADMITTED,
    EVICTED,
    PREEMPTED,
    QUOTA_RESERVED,
    Admission,
    Condition,
    Workload,
)
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.units import importance_of
from gangpreempt.simulation import jobstate
from gangpreempt.simulation.podroom import PodRoom
from gangpreempt.simulation.trace import Job
from tests.builders import NOW
from tests.unit.test_node_index import RESOURCES, apply, histories, prime

pytestmark = pytest.mark.unit
CHEAP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPU = "nvidia.com/gpu"
ARRAYS = ("index", "taken", "present", "priority", "pods", "start")


def _columns(index: NodeIndex) -> dict[tuple[str, ...], dict[str, Any]]:
    assert index.table is not None
    for resources in RESOURCES:
        index.table.columns_for(resources)
    return {
        resources: {name: getattr(cols, name) for name in ARRAYS}
        for resources, cols in index.table.node_columns.items()
    }


@CHEAP
@given(histories())
def test_column_rows_rewritten_late_are_the_rows_rewritten_at_each_change(
    history: tuple[ClusterState, list[tuple[str, str, Any]]],
) -> None:
    state, changes = history
    each, once = NodeIndex(state), NodeIndex(state)  # one state, both hear each change
    for index in (each, once):
        with contextlib.suppress(InvalidInput):
            index.build(NOW)
        prime(index, NOW)
    for kind, key, obj in changes:
        apply(state, _Both(each, once), kind, key, obj)  # type: ignore[arg-type]
        if each.table is not None:
            _columns(each)  # read after every change: rows rewritten change by change
    try:
        each.planner(NOW)
        once.planner(NOW)
    except InvalidInput:
        return
    for index in (each, once):
        assert index.table is not None
        assert all(u.importance() == importance_of(u) for u in index.table.ordered)
    a, b = _columns(each), _columns(once)
    assert a.keys() == b.keys()
    for resources in a:
        cells = a[resources]["present"]
        for name in ARRAYS:
            x, y = a[resources][name], b[resources][name]
            assert x.shape == y.shape, (resources, name)
            if name in ("index", "taken", "present"):
                assert np.array_equal(x, y), (resources, name)
            else:  # read only where a unit is (under the masks of the searches)
                assert np.array_equal(x[cells], y[cells]), (resources, name)


class _Both:
    """Two indexes hearing the same changes."""

    def __init__(self, *indexes: NodeIndex) -> None:
        self.indexes = indexes

    def changed(self, kind: str, old: Any, new: Any) -> None:
        for index in self.indexes:
            index.changed(kind, old, new)


# -- a job's objects ---------------------------------------------------------------------

jobs = st.builds(
    Job,
    job_id=st.one_of(
        st.from_regex(r"application_[0-9]{13}_[0-9]{1,5}", fullmatch=True),
        st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
        st.from_regex(r"[A-Za-z0-9._/-]{1,12}", fullmatch=True),
    ),
    submit_s=st.integers(0, 10**6),
    duration_s=st.integers(1, 10**6),
    queue=st.sampled_from(["vc1", "vc2", "6214e9"]),
    priority=st.sampled_from([0, 100, 1000]),
    pods=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4).map(tuple),
)


@CHEAP
@given(
    jobs,
    st.integers(0, 10**8).map(
        lambda us: datetime(2017, 10, 1, tzinfo=UTC) + timedelta(microseconds=us * 997)
    ),
    st.sampled_from([None, 1800, 60]),
)
def test_a_job_read_from_its_kind_is_the_job_read(
    job: Job, arrived: datetime, interval: int | None
) -> None:
    got = jobstate._read(job, arrived, interval)
    want = jobstate.read_job(job, arrived, interval)
    assert repr(got) == repr(want)
    assert got == want


# -- Kueue's protected units in compose --------------------------------------------------


@st.composite
def kueue_states(draw: st.DrawFn) -> tuple[ClusterState, frozenset[str] | None, str]:
    state = ClusterState()
    state.nodes["n0"] = Node("n0", {GPU: 64, "pods": 110})
    queues = ["a", "b", "c"]
    for i in range(draw(st.integers(0, 8))):
        name = f"w{i}"
        cq = draw(st.sampled_from(queues))
        admitted = draw(st.booleans())
        marks: list[Condition] = []
        if admitted:
            marks += [Condition(t, "True", t, NOW) for t in (QUOTA_RESERVED, ADMITTED)]
        preempted = draw(st.sampled_from([None, 10, 50, 120]))
        if preempted is not None:
            marks.append(Condition(PREEMPTED, "True", "", NOW - timedelta(minutes=preempted)))
        if draw(st.integers(0, 3)) == 0:
            marks.append(Condition(EVICTED, "True", PREEMPTED, NOW))
        state.workloads[f"ns/{name}"] = Workload(
            "ns",
            name,
            (),
            queue_name=cq,
            priority=draw(st.sampled_from([0, 10, 100])),
            admission=Admission(cq, ()) if admitted else None,
            conditions=tuple(marks),
        )
        for j in range(draw(st.integers(1, 2))):
            state.pods[f"ns/{name}-{j}"] = Pod(
                "ns",
                f"{name}-{j}",
                {GPU: 1},
                node_name="n0",
                priority=draw(st.sampled_from([0, 10, 100])),
                start_time=NOW,
                kueue_workload=f"ns/{name}" if draw(st.integers(0, 4)) else "",
            )
    for j in range(draw(st.integers(0, 2))):
        state.pods[f"ns/lone-{j}"] = Pod("ns", f"lone-{j}", {GPU: 1}, node_name="n0", priority=0)
    borrowing = draw(st.one_of(st.none(), st.frozensets(st.sampled_from(queues))))
    return state, borrowing, draw(st.sampled_from(queues))


@CHEAP
@given(kueue_states(), st.sampled_from([5, 50, 200]), st.sets(st.sampled_from(["w0", "w1"])))
def test_protected_asked_of_the_eligible_units_is_the_protected_set(
    case: tuple[ClusterState, frozenset[str] | None, str], priority: int, excluded: set[str]
) -> None:
    state, borrowing, queue = case
    planner = NodePlanner(state, NOW)
    planner.borrowing_queues = borrowing
    exclude = {f"Workload/ns/{w}" for w in excluded}
    now_ts = NOW.timestamp()
    got = [
        u.ref
        for u in planner.table.candidates(priority, exclude)
        if not planner._kueue_guarded(u.ref, queue, now_ts)
    ]
    want = [
        u.ref for u in planner.table.candidates(priority, exclude | planner.kueue_protected(queue))
    ]
    assert got == want


@st.composite
def busy_states(draw: st.DrawFn) -> ClusterState:
    state = ClusterState()
    for n in range(3):
        state.nodes[f"n{n}"] = Node(f"n{n}", {GPU: 64, "pods": 110})
    for i in range(draw(st.integers(0, 40))):
        state.pods[f"ns/p{i}"] = Pod(
            "ns",
            f"p{i}",
            {GPU: 1},
            node_name=draw(st.sampled_from(["n0", "n1", "n2"])),
            priority=draw(st.sampled_from([0, *[10] * 12, 100])),
            start_time=draw(st.sampled_from([None, NOW, NOW - timedelta(minutes=9)])),
            group=draw(st.sampled_from(["", "", "ns/g0"])),
        )
    return state


@CHEAP
@given(busy_states(), st.sampled_from([5, 10, 11, 50, 200]), st.sets(st.integers(0, 40)))
def test_the_few_candidates_sorted_are_the_candidates_in_order(
    state: ClusterState, priority: int, excluded: set[int]
) -> None:
    table = NodePlanner(state, NOW).table
    exclude = {f"Pod/ns/p{i}" for i in excluded}
    eligible = table.eligible(priority)
    want = [u for u in table.ordered if u.ref in eligible and u.ref not in exclude]
    assert table.candidates(priority, exclude) == want
    assert all(u.importance() == importance_of(u) for u in table.ordered)


# -- the nodes' room by priority ---------------------------------------------------------


@CHEAP
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d"]),
            st.one_of(
                st.none(),
                st.builds(
                    lambda node, gpus, prio, term: Pod(
                        "t", "x", {GPU: gpus}, node_name=node, priority=prio, terminating=term
                    ),
                    st.sampled_from(["", "n1", "n2", "n9"]),
                    st.integers(0, 8),
                    st.sampled_from([None, 0, 100, 1000]),
                    st.booleans(),
                ),
            ),
            st.sampled_from([None, 0, 100, 1000, 5000]),
        ),
        max_size=20,
    )
)
def test_the_room_found_once_between_changes_is_the_room_found_again(
    steps: list[tuple[str, Pod | None, int | None]],
) -> None:
    alloc = {"n1": 8, "n2": 8}
    room = PodRoom(alloc, GPU)
    pods: dict[str, Pod] = {}
    for name, pod, asked in steps:
        old = pods.pop(name, None)
        new = msgspec.structs.replace(pod, name=name) if pod is not None else None
        if new is not None:
            pods[name] = new
        room.changed(old, new)
        fresh = PodRoom(alloc, GPU)
        for p in pods.values():
            fresh.changed(None, p)
        assert room.most_free(asked) == fresh.most_free(asked)
        assert room.most_free() == fresh.most_free()
        assert room.free_total() == fresh.free_total()
        assert room.cannot_place([4, 4]) == fresh.cannot_place([4, 4])
