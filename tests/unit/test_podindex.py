"""The replica's pods by node and by gang (``model/podindex.py``) stay what a scan of the
state gives, through any sequence of pods added, moved, regrouped and deleted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.model.pods import Pod

pytestmark = pytest.mark.unit

changes = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),  # pod name
        st.sampled_from(["", "n1", "n2"]),  # node ("" pending)
        st.sampled_from(["", "ns/g1", "ns/g2"]),  # gang
        st.booleans(),  # deleted
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(changes, changes)
def test_the_index_is_what_a_scan_gives(before: list, after: list) -> None:
    state = ClusterState()
    for name, node, group, gone in before:  # a state the index starts from
        if not gone:
            pod = Pod("ns", name, {"cpu": 1}, node_name=node, group=group)
            state.pods[pod.key] = pod
    index = PodIndex(state)
    for name, node, group, gone in after:  # then change by change, as the replica applies
        key = f"ns/{name}"
        old = state.pods.get(key)
        new = None if gone else Pod("ns", name, {"cpu": 1}, node_name=node, group=group)
        if new is None:
            state.pods.pop(key, None)
        else:
            state.pods[key] = new
        index.changed("Pod", old, new)
        index.changed("Node", None, None)  # other kinds change nothing
    for node in ("n1", "n2", ""):
        scan = sorted(p.key for p in state.pods.values() if node and p.node_name == node)
        assert [p.key for p in index.on_node(node)] == scan
    for group in ("ns/g1", "ns/g2"):
        scan = sorted(p.key for p in state.pods.values() if p.group == group)
        assert [p.key for p in index.members(group)] == scan
    assert all(index.by_node.values())  # no empty sets left behind
    assert all(index.by_group.values())
