"""The fair search's kept structures equal a recomputation: the per-tree cache of
borrowing queues and their first heap entries (``fair._TreeCache``), the heap made from
it, the memo of shares shared between nodes of one kind, and the refusal test that reads
a queue through instead of counting its shapes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model import ClusterState
from gangpreempt.preemption import fair
from gangpreempt.preemption.candidates import Request
from gangpreempt.preemption.fair import FairSearch
from gangpreempt.quota import fairshare
from gangpreempt.quota.fairshare import _share, dominant_resource_share
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import FR, Node, Quantities
from tests.builders import NOW
from tests.unit.test_quota_fast_paths import FLAVORS, _churn, _requests, clusters

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _fresh(cache: fair._TreeCache, frs: frozenset[FR]) -> fair._Kept:
    return fair._Kept(frs, cache.queues)


def _same_kept(got: fair._Kept, want: fair._Kept) -> None:
    assert set(got.names) == set(want.names)
    assert got.where == want.where
    got_entries = {k: v for k, v in got.entries.items() if v}
    assert got_entries == want.entries
    for heap in got.entries.values():
        assert heap == sorted(heap)


def _roots(snap: Snapshot) -> list[Node]:
    return [n for n in snap.cohorts.values() if n.parent is None]


def _all_frs() -> list[frozenset[FR]]:
    return [frozenset({(f, "cpu")}) for f in FLAVORS] + [
        frozenset({(f, "cpu"), (f, "gpu")}) for f in FLAVORS
    ]


@SETTINGS
@given(clusters(), st.lists(st.integers(0, 100), max_size=8), st.integers(0, 3))
def test_the_tree_cache_follows_every_usage_change(
    cluster: ClusterState, picks: list[int], extra: int
) -> None:
    snap = Snapshot.build(cluster, NOW)
    for root in _roots(snap):
        cache = fair._TreeCache.of(snap, root)
        for frs in _all_frs():
            _same_kept(cache.borrowers(frs), _fresh(cache, frs))
    _churn(snap, picks)
    if extra and snap.cqs:
        cq = sorted(snap.cqs.values(), key=lambda c: c.name)[extra % len(snap.cqs)]
        snap.take_usage(cq.node, {(FLAVORS[0], "cpu"): extra})
    for root in _roots(snap):
        cache = fair._TreeCache.of(snap, root)
        assert cache.usages == [cq.node.usage for cq in cache.queues]
        for frs in _all_frs():
            _same_kept(cache.borrowers(frs), _fresh(cache, frs))


class _LoopOrdering(fair._Ordering):
    """The ordering with every first heap made by the loop over the cohort's queues."""

    @property  # type: ignore[override]
    def kept(self) -> fair._Kept | None:
        return None

    @kept.setter
    def kept(self, value: fair._Kept | None) -> None:
        pass


def _victims(snap: Snapshot, req: Request) -> list[tuple[str, str]]:
    return [(t.aw.key, t.reason) for t in FairSearch(snap, req).run()]


@SETTINGS
@given(clusters(), st.lists(st.integers(0, 100), max_size=6))
def test_searches_from_the_cache_pick_what_fresh_searches_pick(
    cluster: ClusterState, picks: list[int]
) -> None:
    snap = Snapshot.build(cluster, NOW)
    requests = list(_requests(snap))
    for req in requests:  # the cache made, then kept through the churn
        _victims(snap, req)
    _churn(snap, picks)
    loop = fair._Ordering
    for req in requests:
        got = _victims(snap, req)
        try:
            fair._Ordering = _LoopOrdering  # type: ignore[misc]
            fair._TREES.pop(snap, None)
            want = _victims(snap, req)
        finally:
            fair._Ordering = loop  # type: ignore[misc]
        assert got == want


def _same_share(a: object, b: object) -> bool:
    keys = ("ratio", "weight", "borrowing", "dominant", "borrowed_frs")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


@SETTINGS
@given(clusters(), clusters(), st.lists(st.integers(0, 100), max_size=6), st.booleans())
def test_shares_from_a_memo_of_a_kind_equal_fresh_ones(
    a: ClusterState, b: ClusterState, picks: list[int], tight: bool
) -> None:
    limits = fairshare._KINDS_LIMIT, fairshare._KEPT_LIMIT, fairshare._MEMO_LIMIT
    if tight:  # kinds and memos forgotten all the time
        fairshare._KINDS_LIMIT, fairshare._KEPT_LIMIT, fairshare._MEMO_LIMIT = 1, 3, 2
    try:
        snaps = [Snapshot.build(a, NOW), Snapshot.build(b, NOW)]
        for _ in range(2):
            for snap in snaps:
                for cq in snap.cqs.values():
                    node = cq.node
                    if node.parent is None:
                        continue
                    usage, quota_ = node.usage, node.subtree_quota
                    overs = [max(0, usage.get(fr, 0) - q) for fr, q in quota_.items()]
                    want = _share(node, node.parent, overs)
                    assert _same_share(dominant_resource_share(node), want)
            _churn(snaps[0], picks)
    finally:
        fairshare._KINDS_LIMIT, fairshare._KEPT_LIMIT, fairshare._MEMO_LIMIT = limits


def _shape(usage: Quantities) -> tuple[tuple[FR, int], ...]:
    return tuple(sorted(usage.items()))


@SETTINGS
@given(
    clusters(),
    st.lists(st.integers(0, 100), max_size=4),
    st.lists(st.integers(0, 100), max_size=6),
    st.sampled_from([(1024, 16), (1024, 1), (-1, 16)]),
)
def test_all_refused_is_what_the_shapes_say(
    cluster: ClusterState, picks: list[int], churn: list[int], limits: tuple[int, int]
) -> None:
    snap = Snapshot.build(cluster, NOW)
    kept = fair._SCAN_LIMIT, fair._DISTINCT_LIMIT
    try:
        fair._SCAN_LIMIT, fair._DISTINCT_LIMIT = limits  # type: ignore[misc]
        for _ in range(2):  # the distinct usages kept, then kept through the churn
            for cq in snap.cqs.values():
                workloads = sorted(cq.workloads.values(), key=lambda aw: aw.key)
                for n in range(len(picks) + 1):
                    refused = (
                        [workloads[i % len(workloads)].usage for i in picks[:n]]
                        if workloads
                        else []
                    )
                    want = {_shape(u) for u in refused}.issuperset(cq.shapes())
                    assert fair._all_refused(snap, cq, refused) == want
            _churn(snap, churn)
    finally:
        fair._SCAN_LIMIT, fair._DISTINCT_LIMIT = kept  # type: ignore[misc]
