"""The node-level index kept current change by change (``planning.nodeindex``) equals one
built from scratch after any sequence of changes: the same nodes, room, gangs,
priorities, units in the same order, columns and eligibility; and a planner on it
decides every pending pod and gang as a planner built from the state does (one decision
at a time, and a whole pass where each decision holds room for the next)."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.errors import InvalidInput
from gangpreempt.model import kinds
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import (
    QUOTA_NAME_LABEL,
    UNIT_GROUP,
    UNIT_POD,
    ElasticQuota,
    LabelSelector,
    Node,
    Pod,
    PodDisruptionBudget,
    PodGroup,
)
from gangpreempt.model.queues import PriorityClass
from gangpreempt.model.workloads import Workload
from gangpreempt.placement.cluster import NodeCluster
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.planning.nodeplan import NodePlanner, node_decisions
from gangpreempt.preemption.jobquota import QuotaView
from gangpreempt.preemption.units import UnitTable
from tests.builders import NOW

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NODES = ("n0", "n1", "n2", "n3")
PODS = tuple(f"p{i}" for i in range(7))
GROUPS = ("g0", "g1", "g2")
RESOURCES = ((GPU, "pods"), ("cpu", "pods"), ("cpu", GPU, "pods"))
PRIORITIES = (10, 50, 100)


def node(draw: st.DrawFn, name: str) -> Node:
    return Node(
        name,
        {GPU: draw(st.sampled_from([4, 8])), "cpu": 16, "pods": draw(st.sampled_from([3, 110]))},
        labels={"zone": draw(st.sampled_from(["a", "b"]))},
    )


def pod(draw: st.DrawFn, name: str) -> Pod:
    where = draw(st.sampled_from(["pending", "n0", "n1", "n2", "n3", "n3", "gone"]))
    bound = where != "pending"
    return Pod(
        namespace="ns",
        name=name,
        requests={GPU: draw(st.integers(0, 4)), "cpu": draw(st.integers(0, 6))},
        uid=f"{name}-{draw(st.integers(0, 3))}",
        labels={
            "app": draw(st.sampled_from(["a", "b"])),
            **draw(st.sampled_from([{}, {}, {QUOTA_NAME_LABEL: "q0"}, {QUOTA_NAME_LABEL: "q1"}])),
        },
        node_name=where if bound else "",
        nominated_node="" if bound else draw(st.sampled_from(["", "", "n1"])),
        priority=draw(st.sampled_from([None, 0, 20, 40, 60])),
        priority_class_name=draw(st.sampled_from(["", "", "low", "tolerant"])),
        start_time=draw(st.sampled_from([None, NOW - timedelta(minutes=5), NOW]))
        if bound
        else None,
        scheduled_at=NOW - timedelta(minutes=3) if bound else None,
        terminating=bound and draw(st.integers(0, 5)) == 0,
        finished=draw(st.integers(0, 9)) == 0,
        group=draw(st.sampled_from(["", "ns/g0", "ns/g0", "ns/g1"])),
        kueue_workload=draw(st.sampled_from(["", "", "", "ns/w0"])),
    )


def quota(draw: st.DrawFn, name: str) -> ElasticQuota:
    hi = draw(st.integers(1, 12))
    return ElasticQuota(
        "ns",
        name,
        {GPU: draw(st.integers(0, hi))},
        {GPU: hi},
        parent="P" if name != "P" else "",
        is_parent=name == "P",
    )


def group(draw: st.DrawFn, name: str) -> PodGroup:
    return PodGroup(
        "ns",
        name,
        draw(st.integers(1, 3)),
        preemption_mode=draw(st.sampled_from([UNIT_GROUP, UNIT_POD])),
        priority_class_name=draw(st.sampled_from(["", "", "high"])),
    )


@st.composite
def change(draw: st.DrawFn) -> tuple[str, str, Any]:
    """(kind, key, object or None for a deletion)."""
    what = draw(
        st.sampled_from(
            ["pod"] * 8 + ["group", "workload", "node", "new-node", "pdb", "class", "quota"]
        )
    )
    delete = draw(st.integers(0, 4)) == 0
    if what == "pod":
        name = draw(st.sampled_from(PODS))
        return "Pod", f"ns/{name}", None if delete else pod(draw, name)
    if what == "group":
        name = draw(st.sampled_from(GROUPS))
        return "PodGroup", f"ns/{name}", None if delete else group(draw, name)
    if what == "workload":
        wl = Workload(
            namespace="ns",
            name="w0",
            queue_name="q",
            pod_sets=(),
            priority=draw(st.integers(0, 90)),
        )
        return "Workload", "ns/w0", None if delete else wl
    if what == "node":
        name = draw(st.sampled_from(NODES))
        return "Node", name, node(draw, name)
    if what == "new-node":
        return "Node", "n9", None if delete else node(draw, "n9")
    if what == "pdb":
        budget = PodDisruptionBudget(
            "ns", "pdb", LabelSelector({"app": "a"}), draw(st.integers(0, 2))
        )
        return "PodDisruptionBudget", "ns/pdb", None if delete else budget
    if what == "quota":
        name = draw(st.sampled_from(["q0", "q1", "P"]))
        return "ElasticQuota", f"ns/{name}", None if delete else quota(draw, name)
    low = PriorityClass("low", draw(st.sampled_from([5, 15])))
    return "PriorityClass", "low", low


@st.composite
def histories(draw: st.DrawFn) -> tuple[ClusterState, list[tuple[str, str, Any]]]:
    state = ClusterState()
    state.priority_classes["low"] = PriorityClass("low", 5)
    state.priority_classes["high"] = PriorityClass("high", 70)
    state.priority_classes["tolerant"] = PriorityClass(
        "tolerant",
        30,
        minimum_preemptable_priority=90,
        toleration_seconds=draw(st.sampled_from([-1, 60, 600])),
    )
    for name in NODES[: draw(st.integers(1, 4))]:
        state.nodes[name] = node(draw, name)
    for name in draw(st.lists(st.sampled_from(PODS), max_size=8, unique=True)):
        state.pods[f"ns/{name}"] = pod(draw, name)
    for name in draw(st.lists(st.sampled_from(GROUPS), max_size=3, unique=True)):
        state.pod_groups[f"ns/{name}"] = group(draw, name)
    for name in draw(st.lists(st.sampled_from(["q0", "q1", "P"]), max_size=3, unique=True)):
        state.elastic_quotas[f"ns/{name}"] = quota(draw, name)
    return state, draw(st.lists(change(), min_size=1, max_size=25))


def apply(state: ClusterState, index: NodeIndex, kind: str, key: str, obj: Any) -> None:
    """What the replica does: the state takes the change, then the listeners hear it."""
    old = kinds.get(state, kind, key)
    if obj is None:
        kinds.remove(state, kind, key)
    else:
        kinds.put(state, obj)
    if old is None and obj is None:
        return
    index.changed(kind, old, obj)


def nonzero(amounts: dict[str, int]) -> dict[str, int]:
    return {r: v for r, v in sorted(amounts.items()) if v}


def dump(cluster: NodeCluster, table: UnitTable) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    for resources in RESOURCES:
        cols = table.columns_for(resources)
        rows = []
        for i in range(len(cluster.nodes)):
            row = []
            for j in range(cols.index.shape[1]):
                slot = int(cols.index[i, j])
                if slot < 0:
                    assert not cols.present[i, j]
                    continue
                unit = cols.units[slot]
                assert unit is not None
                assert cols.present[i, j]
                assert int(cols.priority[i, j]) == unit.priority
                assert int(cols.pods[i, j]) == len(unit.pods)
                assert float(cols.start[i, j]) == unit.start.timestamp()
                row.append((unit.ref, cols.taken[i, j].tolist()))
            rows.append(row)
        columns[",".join(resources)] = rows
        for priority in PRIORITIES:
            mask = table.eligible_mask(priority)
            assert sorted(
                u.ref for s, u in enumerate(table.slots) if u is not None and mask[s]
            ) == sorted(table.eligible(priority))
    return {
        "nodes": [
            (v.name, v.node, nonzero(v.used), [p.key for p in v.pods]) for v in cluster.nodes
        ],
        "free": {",".join(r): cluster.free_rows_of(r).tolist() for r in RESOURCES},
        "members": {g: [p.key for p in ps] for g, ps in sorted(cluster.members.items()) if ps},
        "pod_priority": dict(sorted(cluster.pod_priority.items())),
        "group_priority": dict(sorted(cluster.group_priority.items())),
        "unbound": sorted(cluster.unbound),
        "nominated": sorted(cluster.nominated),
        "pending": sorted(cluster.pending),
        "kueue_pods": {k: sorted(v) for k, v in sorted(cluster.kueue_pods.items()) if v},
        "units": [
            (u.ref, u.priority, u.is_group, u.start, u.evicting, [p.key for p in u.pods])
            for u in table.ordered
        ],
        "on_node": {n: [(u.ref, t) for u, t in row] for n, row in sorted(table.on_node.items())},
        "nodes_of": dict(sorted(table.nodes_of.items())),
        "of_pod": {k: u.ref for k, u in sorted(table.of_pod.items())},
        "covering": dict(sorted(table.covering.items())),
        "eligible": {p: sorted(table.eligible(p)) for p in PRIORITIES},
        "columns": columns,
        "timed": sorted(table.timed),
    }


def quota_dump(view: QuotaView) -> dict[str, Any]:
    tree = view.tree
    return {
        "koordinator": view.koordinator,
        "members": {
            eq.key: sorted(p.key for p in view.members(eq))
            for eq in view.state.elastic_quotas.values()
        },
        "runtime": None if tree is None else dict(sorted(tree.runtime.items())),
        "request": None if tree is None else dict(sorted(tree.request.items())),
    }


def fresh_dump(state: ClusterState, now: Any) -> dict[str, Any] | str:
    try:
        cluster = NodeCluster(state)
        return dump(cluster, UnitTable(cluster, now))
    except InvalidInput as exc:
        return str(exc)


def prime(index: NodeIndex, now: Any) -> None:
    """Use the caches a decision builds, so the changes must keep them current."""
    if index.stale:
        return
    assert index.cluster is not None
    assert index.table is not None
    for resources in RESOURCES:
        index.table.columns_for(resources)
        index.cluster.free_rows_of(resources)
    for priority in PRIORITIES:
        index.table.eligible_mask(priority)
    _ = index.planner(now).quota_view().tree  # the quota view too, with its tree


def decisions(planner_of: Any, state: ClusterState) -> list[Any]:
    try:
        planner = planner_of()
        refs = [pre.ref for pre in planner.pending()]
        one_by_one = [planner_of().decide(planner_of().resolve(ref)) for ref in refs]
        return [one_by_one, node_decisions(planner_of())]
    except InvalidInput as exc:
        return [str(exc)]


@SETTINGS
@given(histories(), st.integers(0, 3))
def test_the_index_kept_current_equals_one_built_from_scratch(
    history: tuple[ClusterState, list[tuple[str, str, Any]]], later: int
) -> None:
    state, changes = history
    state = msgspec.structs.replace(state)  # the test's own copy
    index = NodeIndex(state)
    with contextlib.suppress(InvalidInput):
        index.build(NOW)
    prime(index, NOW)
    for kind, key, obj in changes:
        apply(state, index, kind, key, obj)
    now = NOW + timedelta(minutes=later * 5)  # toleration clocks run on
    expected = fresh_dump(state, now)
    try:
        planner = index.planner(now)
        got: dict[str, Any] | str = dump(planner.cluster, planner.table)
    except InvalidInput as exc:
        got = str(exc)
    assert got == expected
    if index.quotas is not None:
        assert quota_dump(index.quotas) == quota_dump(QuotaView(state))
    assert decisions(lambda: index.planner(now), state) == decisions(
        lambda: NodePlanner(state, now), state
    )


def test_a_pod_change_rebuilds_nothing() -> None:
    """The index is built once; pods bound, terminating and gone are taken in as changes
    (the property above checks they are taken in right)."""
    state = ClusterState()
    state.nodes["n0"] = Node("n0", {GPU: 8, "pods": 110})
    index = NodeIndex(state)
    index.planner(NOW)
    running = Pod("ns", "a", {GPU: 4}, node_name="n0", priority=0, start_time=NOW)
    apply(state, index, "Pod", "ns/a", Pod("ns", "a", {GPU: 4}, priority=0))
    apply(state, index, "Pod", "ns/a", running)
    apply(state, index, "Pod", "ns/a", msgspec.structs.replace(running, terminating=True))
    apply(state, index, "Pod", "ns/a", None)
    apply(state, index, "Pod", "ns/b", running.__class__("ns", "b", {GPU: 8}, node_name="n0"))
    planner = index.planner(NOW)
    assert index.builds == 1
    assert [u.ref for u in planner.table.ordered] == ["Pod/ns/b"]
    assert planner.cluster.by_name["n0"].avail[GPU] == 0
