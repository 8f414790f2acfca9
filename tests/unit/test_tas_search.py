"""Kueue's topology-aware domain search (``placement.topology``): Kueue's own search table
(``TestFindTopologyAssignments`` rows a manifest can express, in ``tas_kueue_rows``),
each giving Kueue's answer; and the rules it rests on, by hand: BestFit for required
and preferred, LeastFreeCapacity for unconstrained (KEP-2724's examples), a preferred
level climbing up, slices kept whole, the room that admitted assignments and non-TAS
pods hold, and ``simulate_empty``."""

from __future__ import annotations

import re

import pytest

from gangpreempt.model.pods import Node
from gangpreempt.model.scheduling import SchedulingConstraints, Taint, Toleration
from gangpreempt.model.topology import (
    Topology,
    TopologyAssignment,
    TopologyDomain,
    TopologyRequest,
)
from gangpreempt.placement.topology import NotFit, TopologyNodes, find_assignment
from tests.unit.tas_kueue_rows import ROWS, Row

pytestmark = pytest.mark.unit
BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
CPU = "cpu"


def node(name: str, cpu: int, rack: str = "r1", block: str = "b1", pods: int = 10) -> Node:
    labels = {BLOCK: block, RACK: rack, HOST: name}
    return Node(name, {CPU: cpu * 1000, "pods": pods}, labels)


def hosts(assignment: TopologyAssignment) -> dict[str, int]:
    return {d.values[-1]: d.count for d in assignment.domains}


def test_best_fit_fills_the_largest_then_the_tightest_for_the_rest() -> None:
    """KEP-2724: nodes of 3, 3, 2 and 1 in one rack, 7 pods: 3 + 3, then the 1."""
    nodes = TopologyNodes(
        Topology("t", (RACK, HOST)), [node(n, c) for n, c in zip("abcd", (3, 3, 2, 1), strict=True)]
    )
    got = find_assignment(nodes, TopologyRequest(required=RACK), 7, {CPU: 1000})
    assert hosts(got) == {"a": 3, "b": 3, "d": 1}
    assert got.levels == (HOST,)


def test_least_free_capacity_fills_the_smallest_first() -> None:
    """KEP-2724: unconstrained, the same nodes: 1, 2, 3, then 1 of the other 3."""
    nodes = TopologyNodes(
        Topology("t", (RACK, HOST)), [node(n, c) for n, c in zip("abcd", (3, 3, 2, 1), strict=True)]
    )
    got = find_assignment(nodes, TopologyRequest(unconstrained=True), 7, {CPU: 1000})
    assert hosts(got) == {"d": 1, "c": 2, "a": 3, "b": 1}


def test_required_takes_the_tightest_rack_and_fails_with_kueues_message() -> None:
    topo = Topology("t", (BLOCK, RACK, HOST))
    nodes = TopologyNodes(
        topo,
        [node("x1", 4, "r1"), node("x2", 4, "r1"), node("y1", 2, "r2"), node("y2", 2, "r2")],
    )
    got = find_assignment(nodes, TopologyRequest(required=RACK), 3, {CPU: 1000})
    assert hosts(got) == {"y1": 2, "y2": 1}  # r2 (4) is tighter than r1 (8)
    with pytest.raises(NotFit) as err:
        find_assignment(nodes, TopologyRequest(required=RACK), 9, {CPU: 1000})
    assert str(err.value) == 'topology "t" allows to fit only 8 out of 9 pod(s)'


def test_preferred_climbs_up_and_takes_several_racks_at_the_top() -> None:
    topo = Topology("t", (RACK, HOST))
    nodes = TopologyNodes(topo, [node("x1", 4, "r1"), node("y1", 2, "r2"), node("z1", 3, "r3")])
    got = find_assignment(nodes, TopologyRequest(preferred=RACK), 6, {CPU: 1000})
    assert hosts(got) == {"x1": 4, "y1": 2}  # the largest, then the tightest for the 2 left


def test_slices_stay_whole_within_their_domain() -> None:
    topo = Topology("t", (RACK, HOST))
    nodes = TopologyNodes(
        topo, [node("a1", 3, "r1"), node("a2", 3, "r1"), node("b1", 2, "r2"), node("b2", 1, "r2")]
    )
    request = TopologyRequest(preferred=RACK, slice_level=RACK, slice_size=3)
    got = find_assignment(nodes, request, 6, {CPU: 1000})
    assert hosts(got) == {"a1": 3, "a2": 3}  # r2 holds one slice of 3, r1 two
    with pytest.raises(NotFit, match=r"allows to fit only 3 out of 4 slice\(s\)"):
        find_assignment(nodes, request, 12, {CPU: 1000})


def test_admitted_assignments_and_non_tas_pods_hold_room_unless_simulating_empty() -> None:
    topo = Topology("t", (RACK, HOST))
    nodes = TopologyNodes(topo, [node("x1", 4), node("x2", 4)])
    nodes.add_assignment(TopologyAssignment((HOST,), (TopologyDomain(("x1",), 3),)), {CPU: 1000})
    nodes.add_pod("x2", {CPU: 2000})
    request = TopologyRequest(required=RACK)
    with pytest.raises(NotFit, match="allows to fit only 3 out of 4"):
        find_assignment(nodes, request, 4, {CPU: 1000})
    got = find_assignment(nodes, request, 4, {CPU: 1000}, simulate_empty=True)
    assert hosts(got) == {"x1": 4}  # only the TAS usage is left out, not x2's pod


def test_a_hostname_leaf_the_pod_set_cannot_use_is_excluded_and_said() -> None:
    tainted = Node(
        "x2", {CPU: 4000, "pods": 10}, {RACK: "r1", HOST: "x2"}, (Taint("gpu", "NoSchedule", "a"),)
    )
    nodes = TopologyNodes(Topology("t", (RACK, HOST)), [node("x1", 1), tainted])
    with pytest.raises(NotFit) as err:
        find_assignment(nodes, TopologyRequest(required=RACK), 3, {CPU: 1000})
    assert str(err.value) == (
        'topology "t" allows to fit only 1 out of 3 pod(s). Total nodes: 2; '
        'excluded: taint "gpu=a:NoSchedule": 1'
    )
    tolerating = SchedulingConstraints(tolerations=(Toleration("gpu", "Exists"),))
    got = find_assignment(nodes, TopologyRequest(required=RACK), 3, {CPU: 1000}, tolerating)
    assert hosts(got) == {"x2": 3}


# -- Kueue's own table ----------------------------------------------------------------------
def _topology_name(row: Row) -> str:
    found = re.search(r'topology "([^"]*)"', row.want_reason)
    return found.group(1) if found else "default"


def _run(row: Row) -> TopologyAssignment:
    nodes = [
        Node(
            n.name,
            dict(n.allocatable),
            dict(n.labels),
            tuple(Taint(k, e, v) for k, v, e in n.taints),
            n.unschedulable,
        )
        for n in row.nodes
        if n.ready
    ]
    tree = TopologyNodes(Topology(_topology_name(row), row.levels), nodes, row.flavor_node_labels)
    for pod in row.pods:
        if pod.phase not in ("Succeeded", "Failed"):
            tree.add_pod(pod.node, pod.requests)
    request = TopologyRequest(
        required=row.required,
        preferred=row.preferred,
        unconstrained=row.unconstrained,
        implied=row.implied,
        slice_level=row.slice_level,
        slice_size=row.slice_size,
    )
    scheduling = SchedulingConstraints(
        node_selector=dict(row.node_selector),
        tolerations=tuple(Toleration(k, op or "Equal", v, e) for k, op, v, e in row.tolerations),
    )
    return find_assignment(tree, request, row.count, row.requests, scheduling)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_kueues_find_topology_assignments_row(row: Row) -> None:
    if row.want_reason:
        with pytest.raises(NotFit) as err:
            _run(row)
        assert str(err.value) == row.want_reason
        return
    got = _run(row)
    assert got.levels == row.want_levels
    assert [(d.values, d.count) for d in got.domains] == [(tuple(v), n) for v, n in row.want]
