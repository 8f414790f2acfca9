"""Kueue's priority boost: the ``kueue.x-k8s.io/priority-boost`` annotation, added to a
Workload's priority while the ``PriorityBoost`` feature gate of Kueue's Configuration is
on (Kueue's ``pkg/util/priority``: ``EffectivePriority``)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gangpreempt.errors import InvalidInput
from gangpreempt.manifests import load
from gangpreempt.manifests.kueue import parse_priority_boost
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.queues import KueueConfiguration
from gangpreempt.planning import plan, state_warnings
from tests.builders import NOW, admitted, cluster_queue, pending, quota, state

pytestmark = pytest.mark.unit

WORKLOAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  namespace: ns
  name: w
  annotations: {{kueue.x-k8s.io/priority-boost: {boost}}}
spec:
  queueName: q
  priority: 100
  podSets: [{{name: main, count: 1, template: {{spec: {{containers: [{{name: c}}]}}}}}}]
"""
CONFIG = """---
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
featureGates: {{PriorityBoost: {gate}}}
"""


def loaded(folder: Path, text: str) -> ClusterState:
    path = folder / "in.yaml"
    path.write_text(text)
    return load([str(path)], references=False).state


def effective(folder: Path, boost: str, gate: str | None) -> int:
    text = WORKLOAD.format(boost=boost) + (CONFIG.format(gate=gate) if gate else "")
    st_ = loaded(folder, text)
    return st_.priority_of(st_.workloads["ns/w"])


@pytest.mark.parametrize(
    ("boost", "gate", "want"),
    [
        ('"50"', "true", 150),  # positive
        ('"-30"', "true", 70),  # negative
        ('"+7"', "true", 107),  # a sign, as Go's ParseInt takes it
        ('"not-a-number"', "true", 100),  # does not parse: the base priority
        ('""', "true", 100),  # empty: no boost
        ('"2147483648"', "true", 100),  # past 32 bits: does not parse
        ('"50"', "false", 100),  # the gate off: ignored
        ('"50"', None, 100),  # no Configuration: the gate is off by default
    ],
)
def test_effective_priority_as_kueue_reads_it(
    tmp_path: Path, boost: str, gate: str | None, want: int
) -> None:
    assert effective(tmp_path, boost, gate) == want


@given(st.text(max_size=12))
def test_parsing_is_go_parse_int_base_10_32_bits(text: str) -> None:
    got = parse_priority_boost(text)
    digits = text.lstrip("+-")
    go_like = (
        len(text) - len(digits) <= 1
        and digits.isascii()
        and digits.isdigit()
        and -(2**31) <= int(text) <= 2**31 - 1
    )
    assert got == (int(text) if go_like else None)


def test_a_boost_that_is_not_a_string_is_rejected_with_its_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        loaded(tmp_path, WORKLOAD.format(boost="50"))
    assert "in.yaml" in str(err.value)
    assert "metadata.annotations.kueue.x-k8s.io/priority-boost" in str(err.value)


def test_a_gate_that_is_not_a_boolean_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        loaded(tmp_path, WORKLOAD.format(boost='"5"') + CONFIG.format(gate='"yes"'))
    assert "featureGates.PriorityBoost" in str(err.value)


def test_an_unparsable_boost_is_warned_about_only_while_the_gate_is_on(tmp_path: Path) -> None:
    for gate, warned in (("true", True), ("false", False)):
        text = WORKLOAD.format(boost='"x1"') + CONFIG.format(gate=gate)
        warnings = state_warnings(loaded(tmp_path, text))
        assert any("priority-boost" in w and "'x1'" in w for w in warnings) is warned


def test_the_boost_decides_who_may_preempt_whom() -> None:
    """LowerPriority by effective priority: a boosted candidate is out of a medium
    preemptor's reach, a boosted preemptor reaches a candidate of higher base."""

    def outcome(candidate_boost: int, preemptor_boost: int, gate: bool) -> str:
        victim = msgspec.structs.replace(
            admitted("v", "q", {"cpu": ("default", 4000)}, 100), priority_boost=candidate_boost
        )
        incoming = msgspec.structs.replace(
            pending("in", "q", {"cpu": 4000}, 200), priority_boost=preemptor_boost
        )
        cq = cluster_queue("q", {"default": {"cpu": quota(4000)}}, within="LowerPriority")
        st_ = state([cq], [victim, incoming])
        st_.kueue_configurations["kueue"] = KueueConfiguration(priority_boost=gate)
        return plan(st_, NOW, workload="Workload/default/in").decisions[0].outcome

    assert outcome(0, 0, gate=True) == "Preempt"
    assert outcome(150, 0, gate=True) == "Pending"  # 250 against 200
    assert outcome(150, 0, gate=False) == "Preempt"  # the gate off: 100 against 200
    assert outcome(150, 60, gate=True) == "Preempt"  # 250 against 260
