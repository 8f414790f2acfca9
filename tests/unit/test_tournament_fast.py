"""The fair-sharing tournament that keeps heads' shares between pops gives the order of
the one that computes every share again at every pop, whatever the caller changes in
between."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model import ClusterState, Cohort
from gangpreempt.model.queues import KueueConfiguration
from gangpreempt.planning.deciding import Evaluation, evaluate, unavailable
from gangpreempt.planning.tournament import fair_order
from gangpreempt.quota.fairshare import DRS, compare, dominant_resource_share
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import Node
from tests.builders import NOW, admitted, cluster_queue, pending, quota, state

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
CPU, GPU = "cpu", "gpu"
FLAVORS = ("f0", "f1")


# -- the reference: the tournament before shares were kept (every share, every pop) ------
class _Round:
    def __init__(self, snapshot: Snapshot, entries: list[Evaluation]) -> None:
        self.by_cq = {ev.cq.name: ev for ev in entries}
        self.shares: dict[tuple[int, str], DRS] = {}
        for ev in entries:
            node = ev.cq.node
            usage = ev.assignment.usage
            snapshot.put_back(node, usage)
            try:
                child = node
                for ancestor in node.path_to_root():
                    self.shares[(id(ancestor), ev.pending.key)] = dominant_resource_share(child)
                    child = ancestor
            finally:
                snapshot.withdraw(node, usage)

    def winner(self, cohort: Node) -> Evaluation | None:
        competitors: list[Evaluation] = []
        for child in sorted(cohort.child_cohorts, key=lambda n: n.name):
            best = self.winner(child)
            if best is not None:
                competitors.append(best)
        for child in sorted(cohort.child_cqs, key=lambda n: n.name):
            ev = self.by_cq.get(child.name)
            if ev is not None:
                competitors.append(ev)
        if not competitors:
            return None
        best = competitors[0]
        for ev in competitors[1:]:
            if self._less(cohort, ev, best):
                best = ev
        return best

    def _less(self, cohort: Node, a: Evaluation, b: Evaluation) -> bool:
        da = self.shares[(id(cohort), a.pending.key)]
        db = self.shares[(id(cohort), b.pending.key)]
        a_borrows = da.borrowing_on(a.assignment.usage)
        b_borrows = db.borrowing_on(b.assignment.usage)
        if a_borrows != b_borrows:
            return not a_borrows
        c = compare(da, db)
        if c != 0:
            return c < 0
        if a.pending.priority != b.pending.priority:
            return a.pending.priority > b.pending.priority
        return a.pending.queue_order_ts < b.pending.queue_order_ts


def _tree(ev: Evaluation) -> str:
    node = ev.cq.node
    return node.root().name if node.parent is not None else f"\0{node.name}"


def reference_order(snapshot: Snapshot, entries: list[Evaluation]) -> Iterator[Evaluation]:
    remaining = list(entries)
    while remaining:
        tree = min(_tree(ev) for ev in remaining)
        members = [ev for ev in remaining if _tree(ev) == tree]
        node = members[0].cq.node
        if node.parent is None:
            chosen: Evaluation | None = members[0]
        else:
            chosen = _Round(snapshot, members).winner(node.root())
        assert chosen is not None
        remaining.remove(chosen)
        yield chosen


# -- random clusters -------------------------------------------------------------------
@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    """Two cohort trees (the second up to three levels deep, weights 0-2; most
    ClusterQueues in the first at times) and ClusterQueues outside any cohort: 2-12
    ClusterQueues over two flavors of cpu and gpu with lending and borrowing limits, up
    to 60 admitted workloads (at least 5) and up to two pending workloads per ClusterQueue
    (priorities and times often equal)."""
    weights = st.sampled_from([0.0, 1.0, 1.0, 2.0])
    cohorts = [Cohort("ra", None), Cohort("rb", None)]
    crowded = draw(st.booleans())  # most ClusterQueues in one tree
    if draw(st.booleans()):
        cohorts.append(Cohort("mid", "rb", fair_weight=draw(weights)))
    if draw(st.booleans()):
        cohorts.append(Cohort("low", "mid" if len(cohorts) > 2 else "rb"))
    names: list[str | None] = [c.name for c in cohorts] + [None]
    cqs = []
    for i in range(draw(st.integers(3, 12))):
        flavors = {
            f: {
                r: quota(
                    draw(st.integers(0, 4)),
                    draw(st.one_of(st.none(), st.integers(0, 4))),
                    draw(st.one_of(st.none(), st.integers(0, 4))),
                )
                for r in (CPU, GPU)
            }
            for f in FLAVORS[: draw(st.integers(1, 2))]
        }
        cohort = "ra" if crowded and draw(st.integers(0, 4)) else draw(st.sampled_from(names))
        cq = cluster_queue(f"q{i}", flavors, cohort)
        cqs.append(msgspec.structs.replace(cq, fair_weight=draw(weights)))
    st_ = state(cqs, cohorts=cohorts, flavors=list(FLAVORS))
    st_.kueue_configurations["kueue"] = KueueConfiguration(fair_sharing=True)
    for j in range(draw(st.integers(5, 60))):
        cq = draw(st.sampled_from(cqs))
        flavor = draw(st.sampled_from([f.name for f in cq.resource_groups[0].flavors]))
        usage = {CPU: (flavor, draw(st.integers(1, 3)))}
        if draw(st.booleans()):
            usage[GPU] = (flavor, draw(st.integers(1, 2)))
        wl = admitted(f"w{j}", cq.name, usage, draw(st.integers(0, 2)), at=j)
        st_.workloads[wl.key] = wl
    k = 0
    for cq in cqs:
        for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
            requests = {CPU: draw(st.integers(1, 4))}
            if draw(st.booleans()):
                requests[GPU] = draw(st.integers(1, 2))
            wl = pending(
                f"p{k}", cq.name, requests, draw(st.integers(0, 2)), at=draw(st.integers(60, 62))
            )
            st_.workloads[wl.key] = wl
            k += 1
    return st_


def _entries(snap: Snapshot, one_per_queue: bool) -> list[Evaluation]:
    """An evaluation of each pending workload (of the first of each ClusterQueue only,
    as a cycle's heads, when ``one_per_queue``)."""
    out: list[Evaluation] = []
    queues: set[str] = set()
    for wl in snap.pending_workloads():
        p = PendingWorkload.of(snap.state, wl, snap.now)
        if unavailable(snap, p) is not None or p.cq is None:
            continue
        if one_per_queue and p.cq in queues:
            continue
        queues.add(p.cq)
        out.append(evaluate(snap, p))
    return out


def _act(snap: Snapshot, ev: Evaluation, heads: list[str], action: int, step: int) -> None:
    """What a caller may do between pops: nothing, admit the chosen head's usage, release
    an admitted workload, or hold back some usage, in the ClusterQueue of some head."""
    kind = action % 4
    cq = snap.cqs[heads[(action // 4) % len(heads)]]
    if kind == 1:
        snap.take_usage(ev.cq.node, ev.assignment.usage)
    elif kind == 2:
        keys = sorted(cq.workloads)
        if keys:
            snap.release(cq.workloads[keys[(action + step) % len(keys)]])
    elif kind == 3:
        frs = sorted(cq.node.subtree_quota)
        if frs:
            fr = frs[(action // 64) % len(frs)]
            snap.take_usage(cq.node, {fr: 1 + (action // 256) % 4})


def _order(cluster: ClusterState, actions: list[int], one_per_queue: bool, fast: bool) -> list[str]:
    """The order of the pending workloads' keys, the caller doing two of ``actions``
    after each pop."""
    snap = Snapshot.build(cluster, NOW)
    entries = _entries(snap, one_per_queue)
    heads = sorted({ev.cq.name for ev in entries})
    order = fair_order if fast else reference_order
    keys: list[str] = []
    for step, ev in enumerate(order(snap, entries)):
        keys.append(ev.pending.key)
        for i in (2 * step, 2 * step + 1):
            if actions:
                _act(snap, ev, heads, actions[i % len(actions)], step)
    return keys


@SETTINGS
@given(clusters(), st.lists(st.integers(0, 1023), max_size=12), st.integers(0, 3))
def test_the_kept_tournament_orders_as_the_fresh_one(
    cluster: ClusterState, actions: list[int], mode: int
) -> None:
    """As a cycle's heads (one per ClusterQueue) mostly; at times every pending
    workload, several per ClusterQueue (such trees keep nothing)."""
    one_per_queue = mode != 0
    expected = _order(cluster, actions, one_per_queue, fast=False)
    assert _order(cluster, actions, one_per_queue, fast=True) == expected


@SETTINGS
@given(clusters())
def test_the_snapshot_is_left_as_found(cluster: ClusterState) -> None:
    """Between pops the usage (as values) is what the caller left."""
    snap = Snapshot.build(cluster, NOW)
    before = {name: dict(cq.node.usage) for name, cq in snap.cqs.items()}
    for _ev in fair_order(snap, _entries(snap, one_per_queue=True)):
        now = {name: dict(cq.node.usage) for name, cq in snap.cqs.items()}
        for name, usage in now.items():
            assert {k: v for k, v in usage.items() if v} == {
                k: v for k, v in before[name].items() if v
            }


def test_a_hold_between_pops_changes_the_next_winner() -> None:
    """q0, q1 and q2 share cohort ra, none borrowing: the oldest head, q0's, wins. Then
    6 CPU held in q1 make its head borrow, so q2's beats it (kept shares would not see
    the hold)."""
    cqs = [cluster_queue(f"q{i}", {"f0": {CPU: quota(4)}}, "ra") for i in range(3)]
    cluster = state(
        cqs,
        [pending(f"p{i}", f"q{i}", {CPU: 2}, at=60 + i) for i in range(3)],
        cohorts=[Cohort("ra", None)],
        flavors=["f0"],
    )
    cluster.kueue_configurations["kueue"] = KueueConfiguration(fair_sharing=True)
    for order in (fair_order, reference_order):
        snap = Snapshot.build(cluster, NOW)
        keys = []
        for ev in order(snap, _entries(snap, one_per_queue=True)):
            keys.append(ev.pending.key)
            if ev.cq.name == "q0":
                snap.take_usage(snap.cqs["q1"].node, {("f0", CPU): 6})
        assert keys == ["default/p0", "default/p2", "default/p1"]


def test_a_hold_in_a_sibling_changes_the_share_of_its_cohort() -> None:
    """q0 and q1 in cohort mid under rb, q2 under rb; q1's head, the oldest, wins first.
    Then 10 CPU held in q1 make mid borrow from rb: q0's head, which does not change
    its own ClusterQueue's usage, now borrows at rb and q2's head beats it."""
    cqs = [
        cluster_queue("q0", {"f0": {CPU: quota(4)}}, "mid"),
        cluster_queue("q1", {"f0": {CPU: quota(4)}}, "mid"),
        cluster_queue("q2", {"f0": {CPU: quota(4)}}, "rb"),
    ]
    cluster = state(
        cqs,
        [pending(f"p{i}", f"q{i}", {CPU: 2}, at=60 + i) for i in (0, 2)]
        + [pending("p1", "q1", {CPU: 2}, at=59)],
        cohorts=[Cohort("rb", None), Cohort("mid", "rb")],
        flavors=["f0"],
    )
    cluster.kueue_configurations["kueue"] = KueueConfiguration(fair_sharing=True)
    for order in (fair_order, reference_order):
        snap = Snapshot.build(cluster, NOW)
        keys = []
        for ev in order(snap, _entries(snap, one_per_queue=True)):
            keys.append(ev.pending.key)
            if ev.cq.name == "q1":
                snap.take_usage(snap.cqs["q1"].node, {("f0", CPU): 10})
        assert keys == ["default/p1", "default/p2", "default/p0"]
