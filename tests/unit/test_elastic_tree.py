"""Koordinator's ElasticQuota tree (``quota.elastictree``): the runtime quota of each
quota on Koordinator's own calculator rows, and its invariants on generated trees."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangpreempt.model.pods import ElasticQuota
from gangpreempt.quota.elastictree import QuotaTree, hamilton

pytestmark = pytest.mark.unit
CPU = "cpu"
GI = 2**30


def quota(name: str, lo: int, hi: int, **more: object) -> ElasticQuota:
    return ElasticQuota("koord", name, {CPU: lo}, {CPU: hi}, **more)  # type: ignore[arg-type]


def runtimes(tree: QuotaTree, res: str = CPU) -> dict[str, int]:
    return {name: amounts[res] for name, amounts in sorted(tree.runtime.items())}


def test_the_calculators_iteration_row() -> None:
    """Koordinator's runtime calculator test (iteration, adjust quota): 100 shared by four
    quotas (weight, request, min) = (40, 5, 10), (60, 20, 15), (50, 40, 20), (80, 70, 15)
    gives 5 / 20 / 35 / 40: a request within min is met, the rest by weight, a quota
    capped at its request hands its surplus back."""
    weights = {"n1": 40, "n2": 60, "n3": 50, "n4": 80}
    mins = {"n1": 10, "n2": 15, "n3": 20, "n4": 15}
    quotas = [quota(n, mins[n], 1000, shared_weight={CPU: w}) for n, w in weights.items()]
    requests = {"n1": {CPU: 5}, "n2": {CPU: 20}, "n3": {CPU: 40}, "n4": {CPU: 70}}
    tree = QuotaTree(quotas, requests, {CPU: 100})
    assert runtimes(tree) == {"n1": 5, "n2": 20, "n3": 35, "n4": 40}


def test_two_quotas_over_the_cluster_share_by_max_after_min() -> None:
    """Koordinator's group quota manager row (update quota delta request): 96 CPUs and
    160Gi, mins 50 / 40 CPUs and 80Gi each, requests over the cluster: 53 and 43 CPUs
    (the 6 left after the mins split by equal weights), 80Gi each."""
    quotas = [
        ElasticQuota(
            "k", "test1", {CPU: 50_000, "memory": 80 * GI}, {CPU: 96_000, "memory": 160 * GI}
        ),
        ElasticQuota(
            "k", "test2", {CPU: 40_000, "memory": 80 * GI}, {CPU: 96_000, "memory": 160 * GI}
        ),
    ]
    requests = {
        "test1": {CPU: 120_000, "memory": 200 * GI},
        "test2": {CPU: 150_000, "memory": 210 * GI},
    }
    tree = QuotaTree(quotas, requests, {CPU: 96_000, "memory": 160 * GI})
    assert runtimes(tree) == {"test1": 53_000, "test2": 43_000}
    assert runtimes(tree, "memory") == {"test1": 80 * GI, "test2": 80 * GI}


@pytest.mark.parametrize(
    ("c1_request", "expected"),
    [(0, (60, 20, 20)), (40, (60, 40, 20)), (60, (80, 60, 20))],
)
def test_quotas_that_do_not_lend_keep_their_min(
    c1_request: int, expected: tuple[int, int, int]
) -> None:
    """Koordinator's "not allow lent resource" row: a parent (min 60, max 96) and two
    children (min 20), none lending, under 100: unused mins stay reserved; a child's
    request beyond its min grows it and its parent."""
    quotas = [
        quota("P", 60, 96, is_parent=True, allow_lent=False),
        quota("c1", 20, 96, parent="P", allow_lent=False),
        quota("c2", 20, 96, parent="P", allow_lent=False),
    ]
    tree = QuotaTree(quotas, {"c1": {CPU: c1_request}}, {CPU: 100})
    got = runtimes(tree)
    assert (got["P"], got["c1"], got["c2"]) == expected
    assert tree.ancestors("c1") == ["P"]
    assert sorted(tree.subtree("P")) == ["P", "c1", "c2"]


def test_a_missing_parent_is_the_root_and_unlisted_resources_are_unlimited() -> None:
    tree = QuotaTree([quota("a", 5, 10, parent="gone")], {"a": {CPU: 8, "memory": 5}}, {CPU: 6})
    assert tree.ancestors("a") == []
    assert tree.limit("a") == {CPU: 6}


def test_hamilton_gives_the_rest_to_the_largest_remainders_ties_by_name() -> None:
    assert hamilton(45, {"n2": 60, "n3": 50, "n4": 80}) == {"n2": 14, "n3": 12, "n4": 19}
    assert hamilton(3, {"b": 1, "a": 1}) == {"a": 2, "b": 1}


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[ElasticQuota], dict[str, dict[str, int]], int]:
    """One to three root quotas, each with up to three children, random min <= max,
    weights, lending and requests, and a total."""
    quotas: list[ElasticQuota] = []
    requests: dict[str, dict[str, int]] = {}
    for r in range(draw(st.integers(1, 3))):
        hi = draw(st.integers(1, 100))
        lo = draw(st.integers(0, hi))
        kids = draw(st.integers(0, 3))
        name = f"q{r}"
        quotas.append(
            quota(
                name,
                lo,
                hi,
                is_parent=kids > 0,
                allow_lent=draw(st.booleans()),
                shared_weight={CPU: draw(st.integers(0, 50))},
            )
        )
        if not kids:
            requests[name] = {CPU: draw(st.integers(0, 150))}
        for k in range(kids):
            child = f"{name}-{k}"
            chi = draw(st.integers(1, hi))
            quotas.append(
                quota(
                    child,
                    draw(st.integers(0, chi)),
                    chi,
                    parent=name,
                    allow_lent=draw(st.booleans()),
                )
            )
            requests[child] = {CPU: draw(st.integers(0, 150))}
    return quotas, requests, draw(st.integers(0, 300))


@settings(max_examples=300, deadline=None)
@given(trees())
def test_runtime_invariants(
    case: tuple[list[ElasticQuota], dict[str, dict[str, int]], int],
) -> None:
    """The root never hands out more than it has (its children's mins scaled down when
    they are more); no quota gets more than its request capped by max, unless it keeps
    an unlent min; the root's share is used up while a quota with weight still wants
    more (work-conserving)."""
    quotas, requests, total = case
    tree = QuotaTree(quotas, requests, {CPU: total})
    by_name = {q.name: q for q in quotas}
    roots = [q.name for q in quotas if not q.parent]
    assert sum(tree.limit(r)[CPU] for r in roots) <= total
    for q in quotas:
        got = tree.limit(q.name)[CPU]
        wanted = min(tree.request[q.name][CPU], q.max[CPU])
        assert 0 <= got <= max(wanted, 0 if q.allow_lent else q.min[CPU])
    hungry = [
        r
        for r in roots
        if tree.limit(r)[CPU] < min(tree.request[r][CPU], by_name[r].max[CPU])
        and (by_name[r].shared_weight.get(CPU) or by_name[r].max[CPU]) > 0
    ]
    if hungry:
        assert sum(tree.limit(r)[CPU] for r in roots) == total
