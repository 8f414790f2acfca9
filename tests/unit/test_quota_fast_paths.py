"""The quota ledger's kept and incremental structures equal a recomputation: per-priority
usage sums, shapes, usage journals, kept dominant resource shares, the fair search's
heap of target queues and the classical search's one-resource ``could_fit``."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model import ClusterState, Cohort, Workload
from gangpreempt.model.queues import (
    ANY,
    LESS_THAN_INITIAL_SHARE,
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    LOWER_PRIORITY,
    NEVER,
    KueueConfiguration,
)
from gangpreempt.preemption import fair
from gangpreempt.preemption.candidates import Candidates, Request
from gangpreempt.preemption.classical import fits
from gangpreempt.preemption.fair import NEGATIVE, FairSearch
from gangpreempt.quota.fairshare import _share, dominant_resource_share
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import AdmittedWorkload, Snapshot
from gangpreempt.quota.tree import (
    FR,
    Node,
    Quantities,
    add_usage,
    remove_amounts,
    remove_usage,
    remove_usages,
    restore_usages,
)
from tests.builders import NOW, admitted, cluster_queue, pending, quota, state

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
CPU, GPU = "cpu", "gpu"
FLAVORS = ("f0", "f1")


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    """A cohort tree (two levels at times, lending and borrowing limits) of 2-6
    ClusterQueues over two flavors of cpu and gpu, and up to 40 admitted workloads (some
    evicting) of a few shapes, some of them beyond what fits."""
    cohorts = [Cohort("root", None)]
    if draw(st.booleans()):
        cohorts.append(Cohort("mid", "root", fair_weight=draw(st.sampled_from([1.0, 2.0]))))
    names = [c.name for c in cohorts]
    cqs = []
    for i in range(draw(st.integers(2, 6))):
        flavors = {
            f: {
                r: quota(
                    draw(st.integers(0, 6)),
                    draw(st.one_of(st.none(), st.integers(0, 4))),
                    draw(st.one_of(st.none(), st.integers(0, 4))),
                )
                for r in (CPU, GPU)
            }
            for f in FLAVORS[: draw(st.integers(1, 2))]
        }
        cq = cluster_queue(
            f"q{i}",
            flavors,
            draw(st.sampled_from(names)),
            within=draw(st.sampled_from([LOWER_PRIORITY, NEVER])),
            reclaim=draw(st.sampled_from([LOWER_PRIORITY, ANY, NEVER])),
            borrow=draw(st.sampled_from([NEVER, LOWER_PRIORITY])),
            threshold=draw(st.one_of(st.none(), st.integers(0, 3))),
        )
        cqs.append(cq)
    st_ = state(cqs, cohorts=cohorts, flavors=list(FLAVORS))
    if draw(st.booleans()):
        strategies = draw(
            st.sampled_from(
                [
                    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE),
                    (LESS_THAN_INITIAL_SHARE,),
                    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
                ]
            )
        )
        st_.kueue_configurations["kueue"] = KueueConfiguration(
            fair_sharing=True, preemption_strategies=strategies
        )
    for j in range(draw(st.integers(0, 40))):
        cq = draw(st.sampled_from(cqs))
        flavor = draw(st.sampled_from([f.name for f in cq.resource_groups[0].flavors]))
        usage = {CPU: (flavor, draw(st.integers(1, 2)))}
        if draw(st.booleans()):
            usage[GPU] = (flavor, 1)
        wl = admitted(
            f"w{j}",
            cq.name,
            usage,
            draw(st.integers(0, 3)),
            at=j,
            evicted=draw(st.integers(0, 5)) == 0,
        )
        st_.workloads[wl.key] = wl
    for k in range(3):
        wl = pending(
            f"p{k}",
            draw(st.sampled_from(cqs)).name,
            {CPU: draw(st.integers(1, 4))},
            draw(st.integers(1, 4)),
            at=60 + k,
        )
        st_.workloads[wl.key] = wl
    return st_


def _churn(snap: Snapshot, picks: list[int]) -> None:
    """Release and re-admit some workloads (the indexes change in both directions)."""
    keys = sorted(snap.admitted)
    for i in picks:
        if not keys:
            return
        aw = snap.admitted.get(keys[i % len(keys)])
        if aw is not None:
            snap.release(aw)
    for i in picks[::2]:
        wl = snap.state.workloads[keys[i % len(keys)]]
        if wl.key not in snap.admitted:
            snap.admit_workload(wl)


def _nodes(snap: Snapshot) -> Iterator[Node]:
    yield from snap.cohorts.values()
    for cq in snap.cqs.values():
        yield cq.node


def _frs(snap: Snapshot) -> list[FR]:
    return [(f, r) for f in FLAVORS for r in (CPU, GPU)]


@SETTINGS
@given(clusters(), st.lists(st.integers(0, 100), max_size=12))
def test_usage_sums_and_shapes_follow_the_indexes(cluster: ClusterState, picks: list[int]) -> None:
    snap = Snapshot.build(cluster, NOW)
    for cq in snap.cqs.values():
        cq.shapes()  # kept before the churn: it must be dropped when membership changes
    _churn(snap, picks)
    for cq in snap.cqs.values():
        assert cq.shapes() == {aw.shape() for aw in cq.workloads.values()}
        for fr in _frs(snap):
            for bound in (None, 0, 1, 2, 3, 4):
                both = 0
                for evicting in (True, False):
                    listed = [aw for lst in cq.using([fr], evicting) for aw in lst]
                    want = sum(
                        aw.usage[fr] for aw in listed if bound is None or aw.priority < bound
                    )
                    assert cq.usage_below(fr, evicting, bound) == want
                    both += want
                assert cq.freeable(fr, bound) == both


def _contribution(child: Node, fr: FR) -> int:
    return max(0, child.usage.get(fr, 0) - child.local_quota(fr))


@SETTINGS
@given(clusters(), st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 3)), max_size=20))
def test_cohort_usage_is_what_its_children_spill(
    cluster: ClusterState, changes: list[tuple[int, int]]
) -> None:
    snap = Snapshot.build(cluster, NOW)
    names = sorted(snap.cqs)
    for i, delta in changes:
        node = snap.cqs[names[i % len(names)]].node
        fr = ("f0", CPU)
        if delta >= 0:
            add_usage(node, fr, delta)
        else:
            remove_usage(node, fr, -delta)
    for cohort in snap.cohorts.values():
        for fr in _frs(snap):
            spilled = sum(_contribution(c, fr) for c in (*cohort.child_cohorts, *cohort.child_cqs))
            assert cohort.usage.get(fr, 0) == spilled


def _usages(snap: Snapshot) -> list[Quantities]:
    return [dict(node.usage) for node in _nodes(snap)]


@SETTINGS
@given(clusters(), st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4)), max_size=10))
def test_a_usage_journal_removes_like_remove_usage_and_restores_exactly(
    cluster: ClusterState, amounts: list[tuple[int, int]]
) -> None:
    snap = Snapshot.build(cluster, NOW)
    twin = copy.deepcopy(snap)
    names = sorted(snap.cqs)
    fr = ("f0", CPU)
    changes = [(snap.cqs[names[i % len(names)]].node, {fr: v}) for i, v in amounts]
    for i, v in amounts:
        remove_usage(twin.cqs[names[i % len(names)]].node, fr, v)
    before = _usages(snap)
    journal = remove_usages(changes)
    after = [{k: v for k, v in u.items() if v} for u in _usages(snap)]
    assert after == [{k: v for k, v in u.items() if v} for u in _usages(twin)]
    restore_usages(journal)
    assert _usages(snap) == before
    one = remove_amounts(fr, [(node, q[fr]) for node, q in changes])
    assert [{k: v for k, v in u.items() if v} for u in _usages(snap)] == after
    restore_usages(one)
    assert _usages(snap) == before


def _same_share(a: object, b: object) -> bool:
    keys = ("ratio", "weight", "borrowing", "dominant", "borrowed_frs")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


@SETTINGS
@given(clusters(), st.lists(st.integers(0, 100), max_size=12))
def test_kept_shares_equal_fresh_ones(cluster: ClusterState, picks: list[int]) -> None:
    snap = Snapshot.build(cluster, NOW)
    for node in _nodes(snap):
        dominant_resource_share(node)  # kept now, asked again after the usage changed
    _churn(snap, picks)
    for node in _nodes(snap):
        got = dominant_resource_share(node)
        if node.parent is None:
            assert got.ratio == 0
            assert not got.borrowing
            continue
        usage, quota_ = node.usage, node.subtree_quota
        overs = [max(0, usage.get(fr, 0) - q) for fr, q in quota_.items()]
        assert _same_share(got, _share(node, node.parent, overs))
        for aw in (a for cq in snap.cqs.values() if cq.node is node for a in cq.workloads.values()):
            minus = dominant_resource_share(node, None, aw.usage)
            overs = [max(0, usage.get(fr, 0) - q - aw.usage.get(fr, 0)) for fr, q in quota_.items()]
            assert _same_share(minus, _share(node, node.parent, overs))


class _ScanOrdering(fair._Ordering):
    """The fair search's target order as a scan of every child at each step (how it
    was computed before the heap)."""

    def __init__(self, search: FairSearch, candidates: dict[str, fair._Stream]) -> None:
        super().__init__(search, candidates)
        self._live: dict[int, list[Node]] = {}

    def _next(self, cohort: Node) -> Node | None:
        search = self.fair
        cqs_all, cohorts = search.children(cohort)
        cqs = self._live.setdefault(id(cohort), [c for c in cqs_all if self.has(c)])
        best_cq: Node | None = None
        best_cq_key = NEGATIVE.key
        for child in cqs:
            if id(child) in self.pruned or not self.has(child):
                self.pruned.add(id(child))
                continue
            drs = search.share(child)
            if drs.is_zero and child is not search.own:
                self.pruned.add(id(child))
                continue
            key = drs.key
            if key > best_cq_key or (
                key == best_cq_key
                and best_cq is not None
                and self.remaining[child.name].head_key  # type: ignore[operator]
                < self.remaining[best_cq.name].head_key
            ):
                best_cq, best_cq_key = child, key
        best_cohort: Node | None = None
        best_cohort_key = NEGATIVE.key
        for child in cohorts:
            if id(child) in self.pruned:
                continue
            drs = search.share(child)
            if drs.is_zero and id(child) not in search.own_path:
                self.pruned.add(id(child))
                continue
            if drs.key >= best_cohort_key:
                best_cohort, best_cohort_key = child, drs.key
        if best_cq is None and best_cohort is None:
            self.pruned.add(id(cohort))
            return None
        if best_cohort is not None and (best_cq is None or best_cohort_key >= best_cq_key):
            return self._next(best_cohort)
        return best_cq


def _requests(snap: Snapshot) -> Iterator[Request]:
    for wl in snap.state.workloads.values():
        if not wl.is_pending:
            continue
        p = PendingWorkload.of(snap.state, wl, NOW)
        assert p.cq is not None
        cq = snap.cqs[p.cq]
        for flavor in FLAVORS:
            fr = (flavor, CPU)
            yield Request(p, cq, frozenset({fr}), {fr: wl.pod_sets[0].requests[CPU]})


def _victims(snap: Snapshot, req: Request) -> list[tuple[str, str]]:
    return [(t.aw.key, t.reason) for t in FairSearch(snap, req).run()]


@SETTINGS
@given(clusters(), st.lists(st.integers(0, 100), max_size=6))
def test_the_fair_heap_picks_what_a_scan_picks(cluster: ClusterState, picks: list[int]) -> None:
    snap = Snapshot.build(cluster, NOW)
    _churn(snap, picks)
    heap = fair._Ordering
    for req in _requests(snap):
        got = _victims(snap, req)
        try:
            fair._Ordering = _ScanOrdering  # type: ignore[misc]
            want = _victims(snap, req)
        finally:
            fair._Ordering = heap  # type: ignore[misc]
        assert got == want


def _could_fit_by_withdrawing(cands: Candidates, borrowing: bool) -> bool:
    """``could_fit`` as first written: withdraw per queue, test, put back."""
    snap, req = cands.snapshot, cands.req
    freed: dict[str, Quantities] = {}
    for sources, bound in cands._groups(borrowing):
        for src in sources:
            amounts = freed.setdefault(src.cq.name, {})
            for fr in req.usage:
                if fr in req.frs:
                    total = sum(src.cq.usage_below(fr, ev, bound) for ev in (True, False))
                else:
                    total = src.cq.node.usage.get(fr, 0)
                amounts[fr] = max(amounts.get(fr, 0), total)
    for name, amounts in freed.items():
        snap.withdraw(snap.cqs[name].node, amounts)
    try:
        return fits(snap, req, borrowing)
    finally:
        for name, amounts in freed.items():
            snap.put_back(snap.cqs[name].node, amounts)


@SETTINGS
@given(clusters())
def test_could_fit_equals_withdrawing_queue_by_queue(cluster: ClusterState) -> None:
    snap = Snapshot.build(cluster, NOW)
    for req in _requests(snap):
        cands = Candidates(snap, req)
        for borrowing in (True, False):
            before = _usages(snap)
            got = cands.could_fit(borrowing, lambda b, r=req: fits(snap, r, b))
            assert _usages(snap) == before  # exactly as it was
            assert got == _could_fit_by_withdrawing(cands, borrowing)


def test_shapes_are_kept_until_membership_changes() -> None:
    st_ = state(
        [cluster_queue("a", {"default": {CPU: quota(10)}})],
        [admitted("w1", "a", {CPU: ("default", 2)}), admitted("w2", "a", {CPU: ("default", 3)})],
    )
    snap = Snapshot.build(st_, NOW)
    cq = snap.cqs["a"]
    assert cq.shapes() == {((("default", CPU), 2),), ((("default", CPU), 3),)}
    aw: AdmittedWorkload = snap.admitted["default/w1"]
    snap.release(aw)
    assert cq.shapes() == {((("default", CPU), 3),)}
    wl: Workload = st_.workloads["default/w1"]
    snap.admit_workload(wl)
    assert cq.shapes() == {((("default", CPU), 2),), ((("default", CPU), 3),)}
