"""The shortcuts ``gangpreempt plan`` takes on a large cluster give what the plain paths
give: a JSON List's items iterated as indexed, a start time read once as read each
time, the node index's pods in key order whatever order the state holds them in, and
the collector left as it was found."""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from gangpreempt.cli import cli
from gangpreempt.manifests.fastpod import _time
from gangpreempt.manifests.fields import parse_time
from gangpreempt.manifests.yamlio import LazyItems
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import UNIT_POD, Node, Pod, PodGroup
from gangpreempt.placement.cluster import NodeCluster, pod_demand

pytestmark = pytest.mark.unit
DEMO = Path(__file__).resolve().parents[2] / "examples" / "gang-demo"


def test_lazy_items_iterate_as_they_index() -> None:
    items = [{"kind": "Pod", "n": i, "x": [1, {"y": None}]} for i in range(7)]
    raw = msgspec.json.decode(msgspec.json.encode(items), type=list[msgspec.Raw])
    lazy = LazyItems(raw)
    assert list(lazy) == [lazy[i] for i in range(len(lazy))] == items
    assert lazy[2:5] == items[2:5]


@pytest.mark.parametrize(
    "value",
    ["2026-01-01T07:40:00Z", "2026-01-01T07:40:00+02:00", "2026-01-01 07:40:00", "", None],
)
def test_start_times_read_once_read_as_each_time(value: str | None) -> None:
    expected = (True, None) if not value else (True, parse_time(value))
    assert _time(value) == _time(value) == expected


@pytest.mark.parametrize("value", ["yesterday", "2026-13-01T00:00:00Z", 17])
def test_unreadable_start_times_stay_unreadable(value: object) -> None:
    assert _time(value) == _time(value) == (False, None)


def test_node_index_holds_pods_in_key_order_whatever_the_state_order() -> None:
    rng = random.Random(5)
    nodes = {f"n{i}": Node(f"n{i}", {"cpu": 64_000, "pods": 110}) for i in range(3)}
    groups = {
        "ns/g0": PodGroup("ns", "g0", 2),
        "ns/g1": PodGroup("ns", "g1", 2, preemption_mode=UNIT_POD),
    }
    pods: list[Pod] = []
    for i in range(40):
        where = rng.choice(["n0", "n1", "n2", "", "gone"])
        pods.append(
            Pod(
                "ns",
                f"p{i:02d}",
                {"cpu": 1000 * (1 + i % 3)},
                node_name=where,
                group=rng.choice(["", "ns/g0", "ns/g1"]),
                finished=i % 11 == 0,
                terminating=i % 7 == 0,
                start_time=datetime(2026, 1, 1, tzinfo=UTC),
            )
        )
    for _ in range(5):
        rng.shuffle(pods)
        state = ClusterState(nodes=nodes, pods={p.key: p for p in pods}, pod_groups=groups)
        cluster = NodeCluster(state)
        ordered = sorted(pods, key=lambda p: p.key)
        for view in cluster.nodes:
            on = [p for p in ordered if p.running and p.node_name == view.name]
            assert view.pods == on
            used: dict[str, int] = {}
            for p in on:
                for res, amount in pod_demand(p).items():
                    used[res] = used.get(res, 0) + amount
            assert view.used == used
        for key in groups:
            assert cluster.members.get(key, []) == [p for p in ordered if p.group == key]
        assert list(cluster.pending) == [p.key for p in ordered if p.pending]
        assert list(cluster.unbound) == [
            p.key for p in ordered if p.running and p.node_name == "gone"
        ]


def test_plan_leaves_the_collector_as_it_found_it() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    result = CliRunner().invoke(
        cli, ["plan", "-f", str(DEMO), "--now", "2026-01-02T00:00:00Z", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
