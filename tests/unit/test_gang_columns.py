"""The gang search's column path (``preemption.gang.ColumnSearch``) gives the same
decision as the general path, on generated clusters built to reach its corners: several
resources, nodes already short of room, pods nominated to nodes, node selectors, units
promised to other plans, gangs whose minCount is below their size, running units whose
node is not in the snapshot, and ties between nodes and units."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import UNIT_GROUP, UNIT_POD, Node, Pod, PodGroup
from gangpreempt.model.scheduling import SchedulingConstraints
from gangpreempt.planning.decisions import Decision
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.gang import GangSearch
from tests.builders import NOW

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw: st.DrawFn) -> tuple[ClusterState, str, set[str]]:
    state = ClusterState()
    n_nodes = draw(st.integers(1, 8))
    for i in range(n_nodes):
        pods_cap = draw(st.sampled_from([3, 4, 110]))
        zone = draw(st.sampled_from(["a", "b"]))
        state.nodes[f"n{i}"] = Node(
            f"n{i}", {GPU: 8, "cpu": 16, "pods": pods_cap}, labels={"zone": zone}
        )
    names = [*state.nodes, "gone"]  # "gone": a node the snapshot does not hold
    n_units = draw(st.integers(0, 12))
    units: list[str] = []
    for u in range(n_units):
        size = draw(st.integers(1, 3))
        prio = draw(st.sampled_from([0, 10, 10, 20, 30, 60]))
        mode = draw(st.sampled_from([UNIT_GROUP, UNIT_GROUP, UNIT_POD]))
        group = f"default/g{u}" if size > 1 else ""
        start = draw(st.sampled_from([5, 10, 10, 20]))
        for k in range(size):
            name = f"u{u}-{k}"
            state.pods[f"default/{name}"] = Pod(
                namespace="default",
                name=name,
                requests={GPU: draw(st.sampled_from([0, 1, 2, 4])), "cpu": draw(st.integers(0, 6))},
                node_name=draw(st.sampled_from(names)),
                priority=prio,
                start_time=NOW - timedelta(minutes=start),
                group=group,
                terminating=draw(st.integers(0, 9)) == 0,
            )
            units.append(f"Pod/default/{name}")
        if group:
            state.pod_groups[group] = PodGroup("default", f"g{u}", size, preemption_mode=mode)
            units.append(f"PodGroup/{group}")
    for k in range(draw(st.integers(0, 2))):  # pending pods nominated to a node
        state.pods[f"other/nom-{k}"] = Pod(
            "other",
            f"nom-{k}",
            {GPU: draw(st.integers(1, 4)), "cpu": 1},
            nominated_node=draw(st.sampled_from(names)),
            priority=draw(st.sampled_from([10, 50, 90])),
        )
    size = draw(st.integers(1, 4))
    min_count = draw(st.integers(1, size))
    state.pod_groups["pre/gang"] = PodGroup("pre", "gang", min_count)
    gpus = draw(st.integers(1, 8))
    cpu = draw(st.integers(1, 8))
    selector = draw(st.sampled_from([{}, {}, {"zone": "a"}]))
    for k in range(size):
        state.pods[f"pre/p{k}"] = Pod(
            "pre",
            f"p{k}",
            {GPU: gpus, "cpu": cpu},
            priority=50,
            scheduling=SchedulingConstraints(node_selector=selector),
            group="pre/gang",
        )
    promised = set(draw(st.lists(st.sampled_from(units), max_size=2))) if units else set()
    return state, "PodGroup/pre/gang", promised


def decide(
    state: ClusterState, ref: str, promised: set[str], columns: bool, search: bool = True
) -> Decision:
    planner = NodePlanner(state, NOW, priority_search=search)
    planner.use_columns = columns
    planner.promised.update(promised)
    return planner.decide(planner.resolve(ref))


@SETTINGS
@given(cases(), st.booleans())
def test_the_column_path_decides_as_the_general_path(
    case: tuple[ClusterState, str, set[str]], search: bool
) -> None:
    state, ref, promised = case
    general = decide(state, ref, promised, columns=False, search=search)
    columnar = decide(state, ref, promised, columns=True, search=search)
    assert columnar == general


def test_the_column_path_is_taken_for_one_shape_on_the_whole_cluster() -> None:
    """The comparison above means something only if the column path runs: a gang of one
    shape with no PDB, quota or forced victims goes through it."""
    state = ClusterState()
    state.nodes["n0"] = Node("n0", {GPU: 8, "cpu": 16, "pods": 110})
    state.pods["default/v"] = Pod(
        "default", "v", {GPU: 8, "cpu": 1}, node_name="n0", priority=0, start_time=NOW
    )
    state.pod_groups["pre/gang"] = PodGroup("pre", "gang", 1)
    state.pods["pre/p0"] = Pod("pre", "p0", {GPU: 8, "cpu": 1}, priority=50, group="pre/gang")
    planner = NodePlanner(state, NOW)
    taken: list[bool] = []
    original = GangSearch._columnar

    def spy(self: GangSearch, domain: object) -> bool:
        taken.append(original(self, domain))  # type: ignore[arg-type]
        return taken[-1]

    GangSearch._columnar = spy  # type: ignore[method-assign]
    try:
        d = planner.decide(planner.resolve("PodGroup/pre/gang"))
    finally:
        GangSearch._columnar = original  # type: ignore[method-assign]
    assert taken
    assert all(taken)
    assert [v.object for v in d.victims] == ["Pod/default/v"]
    assert d.placement == {"Pod/pre/p0": "n0"}
