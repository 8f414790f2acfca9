"""The lone-pod dry run's column work, against the plain computations it replaces:

- what a priority may take (``columns.Takeable``) is kept with the columns and rewritten
  row by row with them; through any sequence of changes a ``NodeIndex`` takes in (and
  the clock moving on), it equals one built from nothing on the same columns;
- the reprieve and the node scores, computed along the columns, equal the row-major
  computation (the reference below) on random rows, cell by cell.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.preemption.columns import Takeable
from gangpreempt.preemption.dryrun import SHIFT, _reprieve, _scores
from tests.builders import NOW
from tests.unit.test_node_index import PRIORITIES, RESOURCES, apply, histories

pytestmark = pytest.mark.unit
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def kept_takeables(index: NodeIndex) -> None:
    """Build what every priority may take on every resource set's columns (so that the
    changes after must keep them current)."""
    if index.stale:
        return
    assert index.table is not None
    for resources in RESOURCES:
        cols = index.table.columns_for(resources)
        for priority in PRIORITIES:
            _ = cols.takeable(priority).any


def assert_takeables_fresh(index: NodeIndex, now: Any) -> None:
    try:
        planner = index.planner(now)
    except InvalidInput:
        return
    table = planner.table
    for resources in RESOURCES:
        cols = table.columns_for(resources)
        for priority in PRIORITIES:
            kept = cols.takeable(priority)
            fresh = Takeable(cols, table.eligible_mask(priority))
            assert kept.mask.shape == cols.index.shape
            assert np.array_equal(kept.mask, fresh.mask), (resources, priority)
            assert np.array_equal(kept.freed, fresh.freed), (resources, priority)
            assert np.array_equal(kept.any, fresh.any), (resources, priority)


@SETTINGS
@given(histories(), st.integers(0, 3))
def test_kept_takeables_equal_ones_built_from_nothing(
    history: tuple[Any, list[tuple[str, str, Any]]], later: int
) -> None:
    state, changes = history
    state = msgspec.structs.replace(state)  # the test's own copy
    index = NodeIndex(state)
    with contextlib.suppress(InvalidInput):
        index.build(NOW)
    kept_takeables(index)
    for kind, key, obj in changes:
        apply(state, index, kind, key, obj)
        assert_takeables_fresh(index, NOW)
        kept_takeables(index)  # a priority first seen between changes
    assert_takeables_fresh(index, NOW + timedelta(minutes=later * 5))


# -- the reprieve and the scores ------------------------------------------------------------


def reference_reprieve(room: Any, live: Any, taken: Any, need: Any) -> Any:
    """The row-major reprieve: each column put back while the pod still fits."""
    free = np.ascontiguousarray(room.T)
    want = need[:, None]
    victim = np.zeros_like(live)
    for col in range(live.shape[1]):
        here = live[:, col]
        if not here.any():
            continue
        trial = free - taken[:, col, :].T
        back = here & (trial >= want).all(axis=0)
        free = np.where(back, trial, free)
        victim[:, col] = here & ~back
    return victim


def reference_scores(rows: Any, victim: Any, cols: Any) -> tuple[Any, Any, Any, Any]:
    prio = cols.priority[rows]
    pods = cols.pods[rows]
    highest = np.where(victim, prio, np.iinfo(np.int64).min).max(axis=1)
    total = ((prio + SHIFT) * pods * victim).sum(axis=1)
    n_pods = (pods * victim).sum(axis=1)
    top = victim & (prio == highest[:, None])
    earliest = np.where(top, cols.start[rows], np.inf).min(axis=1)
    return highest, total, n_pods, earliest


class Cells:
    """The per-cell arrays ``_scores`` reads (a stand-in for ``NodeColumns``)."""

    def __init__(self, priority: Any, pods: Any, start: Any) -> None:
        self.priority, self.pods, self.start = priority, pods, start


@st.composite
def grids(draw: st.DrawFn) -> tuple[Any, ...]:
    n = draw(st.integers(1, 12))
    width = draw(st.integers(1, 6))  # (no columns: the dry run stops before)
    n_res = draw(st.integers(1, 4))
    cell = st.integers(0, 6)
    taken = np.array(
        draw(st.lists(cell, min_size=n * width * n_res, max_size=n * width * n_res)),
        dtype=np.int64,
    ).reshape(n, width, n_res)
    live = np.array(
        draw(st.lists(st.booleans(), min_size=n * width, max_size=n * width)), dtype=np.bool_
    ).reshape(n, width)
    free = np.array(
        draw(st.lists(st.integers(-4, 8), min_size=n * n_res, max_size=n * n_res)),
        dtype=np.int64,
    ).reshape(n, n_res)
    need = np.array(draw(st.lists(st.integers(0, 8), min_size=n_res, max_size=n_res)))
    room = free + (taken * live[:, :, None]).sum(axis=1)
    # priorities in few levels (ties), an empty slot's priority among them
    priority = np.array(
        draw(
            st.lists(
                st.sampled_from([0, 5, 100, np.iinfo(np.int64).max]),
                min_size=n * width,
                max_size=n * width,
            )
        ),
        dtype=np.int64,
    ).reshape(n, width)
    pods = np.array(
        draw(st.lists(st.integers(0, 64), min_size=n * width, max_size=n * width)),
        dtype=np.int64,
    ).reshape(n, width)
    start = np.array(
        draw(st.lists(st.sampled_from([0.0, 1.5, 7.0]), min_size=n * width, max_size=n * width)),
        dtype=np.float64,
    ).reshape(n, width)
    rows = np.array(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1))), dtype=np.int64)
    return room, live, taken, need, Cells(priority, pods, start), rows


@SETTINGS
@given(grids())
def test_reprieve_and_scores_equal_the_row_major_reference(grid: tuple[Any, ...]) -> None:
    room, live, taken, need, cells, rows = grid
    sub = (room[rows], live[rows], taken[rows], need)
    victim = _reprieve(*sub)
    expected = reference_reprieve(*sub)
    assert victim.shape == expected.shape
    assert np.array_equal(victim, expected)
    assert not (victim & ~sub[1]).any()  # only live cells are victims
    got = _scores(rows, victim, cells)  # type: ignore[arg-type]
    want = reference_scores(rows, expected, cells)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)


def test_takeable_rows_follow_a_rewritten_row() -> None:
    """A row rewritten (``NodeColumns.set_rows``) carries the kept takeables' row along,
    the other rows untouched; a wider row (the columns widened) starts them again."""
    gpu = "nvidia.com/gpu"
    state = ClusterState()
    for name in ("n0", "n1"):
        state.nodes[name] = Node(name, {gpu: 4, "pods": 10})
    for name, node, gpus, priority in (
        ("r0", "n0", 2, 10),
        ("r1", "n1", 2, 10),
        ("r2", "n1", 1, 100),
    ):
        running = Pod("ns", name, {gpu: gpus}, node_name=node, priority=priority, start_time=NOW)
        state.pods[running.key] = running
    index = NodeIndex(state)
    index.build(NOW)
    assert index.table is not None
    resources = (gpu, "pods")
    cols = index.table.columns_for(resources)
    kept = cols.takeable(50)
    assert kept.freed.tolist() == [[2, 1], [2, 1]]  # priority 100 is not takeable at 50
    assert kept.any.tolist() == [True, True]
    old = state.pods["ns/r2"]
    apply(state, index, "Pod", old.key, msgspec.structs.replace(old, priority=0))
    assert index.table.columns_for(resources) is cols
    assert cols.takeable(50) is kept  # kept: row n1 rewritten, n0 as it was
    assert kept.freed.tolist() == [[2, 1], [3, 2]]
    assert kept.mask.sum(axis=1).tolist() == [1, 2]
    old = state.pods["ns/r0"]
    apply(state, index, "Pod", old.key, msgspec.structs.replace(old, priority=70))
    assert index.table.columns_for(resources) is cols
    assert kept.freed.tolist() == [[0, 0], [3, 2]]
    assert kept.any.tolist() == [False, True]
    # One not read between two rewrites is dropped (built again when next read).
    old = state.pods["ns/r0"]
    apply(state, index, "Pod", old.key, msgspec.structs.replace(old, priority=10))
    assert index.table.columns_for(resources) is cols
    old = state.pods["ns/r0"]
    apply(state, index, "Pod", old.key, msgspec.structs.replace(old, priority=20))
    assert index.table.columns_for(resources) is cols
    assert 50 not in cols.takeables
    kept = cols.takeable(50)
    assert kept.freed.tolist() == [[2, 1], [3, 2]]
    wider = Pod("ns", "r3", {gpu: 1}, node_name="n1", priority=0, start_time=NOW)
    apply(state, index, "Pod", wider.key, wider)
    again = index.table.columns_for(resources).takeable(50)
    assert again is not kept
    assert again.freed.tolist() == [[2, 1], [4, 3]]
