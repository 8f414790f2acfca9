"""The cohort tree's arithmetic: lending limits, borrowing limits, cohort-owned quota."""

from __future__ import annotations

import pytest

from gangpreempt.model import Cohort
from gangpreempt.quota import Snapshot
from gangpreempt.quota.tree import (
    add_usage,
    cq_available,
    lowest_fitting_subtree,
    potential_available,
    quantities_fit_in_quota,
    remove_usage,
)
from tests.builders import NOW, admitted, cluster_queue, group, quota, state

pytestmark = pytest.mark.unit
CPU = ("default", "cpu")


def snap(cqs, workloads=(), cohorts=()) -> Snapshot:
    return Snapshot.build(state(cqs, list(workloads), cohorts=list(cohorts)), NOW)


def test_lending_limit_keeps_the_rest_private() -> None:
    s = snap(
        [
            cluster_queue("a", {"default": {"cpu": quota(10, lending=4)}}, "c"),
            cluster_queue("b", {"default": {"cpu": quota(0)}}, "c"),
        ]
    )
    a, b, c = s.cqs["a"].node, s.cqs["b"].node, s.cohorts["c"]
    assert a.local_quota(CPU) == 6
    assert c.subtree_quota[CPU] == 4  # only the lendable part reaches the cohort
    assert potential_available(b, CPU) == 4
    assert potential_available(a, CPU) == 10
    add_usage(a, CPU, 8)  # 6 local, 2 spill into the cohort
    assert c.usage[CPU] == 2
    assert cq_available(b, CPU) == 2
    add_usage(b, CPU, 2)
    assert cq_available(a, CPU) == 0  # a's lendable part is borrowed by b


def test_borrowing_limit_caps_what_a_queue_takes() -> None:
    s = snap(
        [
            cluster_queue("a", {"default": {"cpu": quota(2, borrowing=3)}}, "c"),
            cluster_queue("b", {"default": {"cpu": quota(10)}}, "c"),
        ]
    )
    a = s.cqs["a"].node
    assert potential_available(a, CPU) == 5
    assert cq_available(a, CPU) == 5
    add_usage(a, CPU, 4)
    assert cq_available(a, CPU) == 1


def test_cohort_owned_quota_adds_to_the_subtree() -> None:
    cohorts = [
        Cohort("root", None, (group({"default": {"cpu": quota(5)}}),)),
        Cohort("mid", "root"),
    ]
    s = snap(
        [
            cluster_queue("a", {"default": {"cpu": quota(1)}}, "mid"),
            cluster_queue("b", {"default": {"cpu": quota(0)}}, "root"),
        ],
        cohorts=cohorts,
    )
    a = s.cqs["a"].node
    assert s.cohorts["root"].subtree_quota[CPU] == 6
    assert potential_available(a, CPU) == 6
    # Borrowing levels: within a's nominal 0; mid holds only a's quota; root holds it.
    assert lowest_fitting_subtree(a, CPU, 1) == (0, True)
    assert lowest_fitting_subtree(a, CPU, 2) == (2, False)
    assert s.cohorts["root"].height() == 2


def test_usage_of_admitted_workloads_bubbles_up() -> None:
    s = snap(
        [
            cluster_queue("a", {"default": {"cpu": quota(4)}}, "c"),
            cluster_queue("b", {"default": {"cpu": quota(4)}}, "c"),
        ],
        [
            admitted("w1", "a", {"cpu": ("default", 6)}),
            admitted("w2", "b", {"cpu": ("default", 1)}),
        ],
    )
    assert s.cohorts["c"].usage[CPU] == 7  # no lending limit: all usage is visible
    assert cq_available(s.cqs["b"].node, CPU) == 1
    fits, remaining = quantities_fit_in_quota(s.cqs["b"].node, {CPU: 3})
    assert fits
    assert remaining == {CPU: 3}


def test_remove_undoes_add_exactly() -> None:
    s = snap(
        [
            cluster_queue("a", {"default": {"cpu": quota(10, lending=4)}}, "c"),
            cluster_queue("b", {"default": {"cpu": quota(3)}}, "c"),
        ]
    )
    a, c = s.cqs["a"].node, s.cohorts["c"]
    for amount in (3, 5, 9):
        add_usage(a, CPU, amount)
        remove_usage(a, CPU, amount)
        assert a.usage.get(CPU, 0) == 0
        assert c.usage.get(CPU, 0) == 0
