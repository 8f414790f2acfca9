"""The lone-pod dry run keeps each node's outcome between decisions (``dryrun.Verdicts``,
in the table's caches, reused while the node's room is the same): through any sequence
of changes taken in by a ``NodeIndex``, and on forks that hold room, it answers as the
dry run computed from nothing does (the same node, victims and nodes evaluated)."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.dryrun import Verdicts, dry_run
from tests.builders import NOW
from tests.unit.test_node_index import GPU, NODES, apply, histories

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROBES = (
    Pod("probe", "g1c2", {GPU: 1, "cpu": 2}),
    Pod("probe", "g2", {GPU: 2}),
    Pod("probe", "c5", {"cpu": 5}),
    Pod("probe", "g4c1", {GPU: 4, "cpu": 1}),
)
PRIORITIES = (45, 100)
LIMITS = (1, 2, 100)

Answer = tuple[tuple[int, list[str]] | None, int]


def answers(planner: NodePlanner, fresh: bool) -> list[Answer]:
    """Every probe's dry run at every priority and limit; ``fresh``: nothing kept from
    an earlier one (the table's caches emptied before each)."""
    out: list[Answer] = []
    for probe in PROBES:
        for priority in PRIORITIES:
            for limit in LIMITS:
                if fresh:
                    planner.table.derived.clear()
                found, looked = dry_run(
                    planner.cluster, planner.table, probe, priority, set(), limit
                )
                got = None if found is None else (found[0], [u.ref for u in found[1]])
                out.append((got, looked))
    return out


def fresh_answers(state: ClusterState, used: tuple[str, dict[str, int]] | None) -> Any:
    try:
        planner = NodePlanner(state, NOW)
    except InvalidInput as exc:
        return str(exc)
    if used is not None:
        planner.cluster.use(*used)
    return answers(planner, fresh=True)


def kept_answers(index: NodeIndex, used: tuple[str, dict[str, int]] | None) -> Any:
    try:
        planner = index.planner(NOW)
    except InvalidInput as exc:
        return str(exc)
    if used is not None:
        planner.cluster.use(*used)  # the fork's own room: the base keeps its own
    return answers(planner, fresh=False)


@SETTINGS
@given(
    histories(),
    st.lists(
        st.one_of(
            st.none(),
            st.tuples(
                st.sampled_from(NODES),
                st.fixed_dictionaries({GPU: st.integers(-2, 3), "cpu": st.integers(-3, 4)}),
            ),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_kept_verdicts_equal_a_dry_run_from_nothing(
    history: tuple[ClusterState, list[tuple[str, str, Any]]],
    uses: list[tuple[str, dict[str, int]] | None],
) -> None:
    state, changes = history
    state = msgspec.structs.replace(state)  # the test's own copy
    index = NodeIndex(state)
    with contextlib.suppress(InvalidInput):
        index.build(NOW)
    for kind, key, obj in [*changes, (None, "", None)]:
        # Decisions on the base, on forks holding room, on the base again: each against
        # the dry run from nothing on the same state and room.
        for used in [None, *uses, None]:
            assert kept_answers(index, used) == fresh_answers(state, used)
        if kind is not None:
            apply(state, index, kind, key, obj)


def test_verdicts_are_kept_and_dropped_with_the_table() -> None:
    """A second decision of the same shape reuses the first one's outcomes; a change to
    a pod drops them with the table's other caches."""
    state = ClusterState()
    for name in ("n0", "n1"):
        state.nodes[name] = Node(name, {GPU: 2, "pods": 10})
    for i, name in enumerate(("n0", "n1")):
        running = Pod("ns", f"r{i}", {GPU: 2}, node_name=name, priority=i, start_time=NOW)
        state.pods[running.key] = running
    index = NodeIndex(state)
    index.build(NOW)
    probe = PROBES[1]
    planner = index.planner(NOW)
    first = dry_run(planner.cluster, planner.table, probe, 100, set(), 100)
    kept = [v for v in planner.table.derived.values() if isinstance(v, Verdicts)]
    assert len(kept) == 1
    assert kept[0].valid.all()
    planner = index.planner(NOW)
    again = dry_run(planner.cluster, planner.table, probe, 100, set(), 100)
    assert [v for v in planner.table.derived.values() if isinstance(v, Verdicts)] == kept
    assert first[1] == again[1]
    assert first[0] is not None
    assert again[0] is not None
    assert (first[0][0], first[0][1]) == (again[0][0], again[0][1])
    assert first[0][0] == 0  # the lower-priority victim's node
    old = state.pods["ns/r0"]
    new = msgspec.structs.replace(old, priority=50)
    apply(state, index, "Pod", old.key, new)
    planner = index.planner(NOW)
    assert not any(isinstance(v, Verdicts) for v in planner.table.derived.values())
    after = dry_run(planner.cluster, planner.table, probe, 100, set(), 100)
    assert after[0] is not None
    assert after[0][0] == 1
