"""``gangpreempt explain``: every running workload, victim or not, with the rule that
decided it. Each rule appears on a bundle built to trigger it (the peers' own rows), the
explanation agrees with ``plan`` on every bundle, and the CLI prints it for the
examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gangpreempt.cli import cli
from gangpreempt.manifests import load
from gangpreempt.planning import plan
from gangpreempt.planning.explaining import explain
from gangpreempt.planning.nodeplan import NodePlanner, is_node_level
from tests.scenarios.runner import ROOT as SCENARIOS
from tests.scenarios.runner import bundles, expectation, manifest_files, parse_time

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
NOW = "2025-01-01T12:00:00Z"

# rule -> (bundle, the pending workload, a running workload the rule decides)
RULES = {
    "victim": ("kube_preemption/basic-preemption-logic", "Pod/default/p", None),
    "above-ceiling": (
        "kube_preemption/basic-preemption-logic",
        "Pod/default/p",
        "Pod/default/p3.1",
    ),
    "fits": ("capacity_scheduling/integ-cross-namespace-1-admit", "Pod/ns2/t1-p4", "Pod/ns1/t1-p3"),
    "higher-priority": ("capacity_scheduling/integ-no-quota-1", "Pod/ns1/t3-p5", "Pod/ns1/t3-p1"),
    "no-use": (
        "capacity_scheduling/eligible-no-quota-terminating-pod",
        "Pod/ns1/t1-p1",
        "Pod/ns2/t1-p0",
    ),
    "non-preemptible": (
        "koordinator_quota/prefilter-insufficient-quota-non-preemptible-not-evicted",
        "Pod/default/pod-4",
        "Pod/default/pod-3",
    ),
    "not-needed": (
        "capacity_scheduling/eligible-nominated-node-unresolvable",
        "Pod/default/t1-p1",
        "Pod/default/t1-px",
    ),
    "other-quota": (
        "koordinator_quota/can-preempt-other-quota-never-victim",
        "Pod/default/preemptor",
        "Pod/default/victim",
    ),
    "other-resources": (
        "fungibility/preempt-no-borrow-preempt-stops-search-v1beta1",
        "Workload/default/incoming",
        "Workload/default/f2-run",
    ),
    "own": ("nodes/gang-min-count-with-running-member", "PodGroup/default/g", "PodGroup/default/g"),
    "pdb": (
        "podgroup_preemption/v136-pdb-prefer-non-violating-victim",
        "PodGroup/default/preemptor-pg",
        "Pod/default/victim-pdb",
    ),
    "policy": (
        "fungibility/preference-preemption-over-borrowing",
        "Workload/default/incoming",
        "Workload/default/lender-run",
    ),
    "protected-namespace": (
        "capacity_scheduling/derived-aggregate-over-min-reclaim",
        "Pod/ns2/ns2-p1",
        "Pod/ns2/ns2-used",
    ),
    "reprieved": (
        "capacity_scheduling/postfilter-cross-namespace",
        "Pod/ns1/t1-p1",
        "Pod/ns2/t1-p3",
    ),
    "tolerated": (
        "kube_preemption/toleration-seconds-negative",
        "Pod/default/preemptor",
        "Pod/default/victim",
    ),
    "within-nominal": (
        "keps/kep83-story-within-queue-lower-priority",
        "Workload/default/incoming",
        "Workload/default/b-run",
    ),
}


def explained(bundle: str, workload: str, excluded: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    folder = SCENARIOS / bundle
    state = load(manifest_files(folder)).state
    return explain(state, parse_time(NOW), workload, excluded=excluded)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_appears_where_it_decides(rule: str) -> None:
    bundle, workload, obj = RULES[rule]
    e = explained(bundle, workload)
    verdicts = {v.object: v for v in [*e.victims, *e.others]}
    if obj is None:
        assert e.victims, e
        assert all(v.rule == "victim" and v.why for v in e.victims)
        return
    assert verdicts[obj].rule == rule, verdicts[obj]
    assert verdicts[obj].why


def test_a_victim_promised_elsewhere_is_named_so() -> None:
    bundle, workload, _ = RULES["victim"]
    first = explained(bundle, workload)
    taken = first.victims[0].object
    again = explained(bundle, workload, excluded=(taken,))
    (verdict,) = [v for v in again.others if v.object == taken]
    assert verdict.rule == "promised"


def test_fair_sharing_keeps_the_other_borrowers() -> None:
    """Three ClusterQueues of 4 CPUs under fair sharing: b borrows 2, c borrows 1; a needs
    3 with 1 free. b's newest workload goes; b's other one and c's are kept by fair
    sharing's strategies."""
    state = load([str(REPO / "tests" / "data" / "explain-fair-share")]).state
    e = explain(state, parse_time(NOW), "Workload/default/new")
    assert [v.object for v in e.victims] == ["Workload/default/b2"]
    rules = {v.object: v.rule for v in e.others}
    assert rules == {"Workload/default/b1": "fair-share", "Workload/default/c1": "fair-share"}


def test_outside_the_cohort() -> None:
    state = load([str(REPO / "examples" / "quota-demo")]).state
    e = explain(state, parse_time(NOW), "Workload/default/in")
    (eval_,) = [v for v in e.others if v.object == "Workload/team-a/eval"]
    assert eval_.rule == "outside-cohort"
    assert "team-a" in eval_.why


SINGLE = [b for b in bundles() if "workload" in (exp := expectation(b)) and "assignment" not in exp]


@pytest.mark.parametrize("folder", SINGLE, ids=lambda p: str(p.relative_to(SCENARIOS)))
def test_the_explanation_agrees_with_plan(folder: Path) -> None:
    """On every bundle that names one workload: the victims are plan's, and every
    running workload (a Kueue Workload holding quota, or a unit on the nodes) has exactly
    one verdict with a sentence."""
    exp = expectation(folder)
    state = load(manifest_files(folder)).state
    now = parse_time(exp["now"])
    rescheduling = exp.get("gang_reprieve") == "rescheduling"
    e = explain(state, now, exp["workload"], rescheduling=rescheduling)
    (d,) = plan(state, now, exp["workload"], rescheduling=rescheduling).decisions
    assert e.outcome == d.outcome
    if (d.victims and all(not v.object.startswith("Pod/") for v in d.victims)) or not d.victims:
        assert sorted(v.object for v in e.victims) == sorted(
            v.object for v in d.victims if v.object in {x.object for x in e.victims}
        )
    objects = [v.object for v in [*e.victims, *e.others]]
    assert len(objects) == len(set(objects))
    assert all(v.why for v in [*e.victims, *e.others])
    if is_node_level(state, d.preemptor):
        assert sorted(v.object for v in e.victims) == sorted(v.object for v in d.victims)
        units = NodePlanner(state, now).table.ordered
        assert sorted(objects) == sorted(u.ref for u in units)
    else:
        assert sorted(v.object for v in e.victims) == sorted(v.object for v in d.victims)
        admitted = [w.ref for w in state.workloads.values() if w.holds_quota]
        kept = [v.object for v in e.others]
        assert sorted(
            kept + [v.object for v in e.victims if v.object.startswith("Workload/")]
        ) == sorted(admitted)


def test_cli_explains_every_running_workload_of_the_examples() -> None:
    for example in ("quota-demo", "gang-demo"):
        folder = REPO / "examples" / example
        result = CliRunner().invoke(cli, ["explain", "-f", str(folder), "--now", NOW])
        assert result.exit_code == 0, result.output
        doc = CliRunner().invoke(cli, ["explain", "-f", str(folder), "--now", NOW, "-o", "json"])
        explanations = json.loads(doc.stdout)["explanations"]
        assert explanations
        for e in explanations:
            for v in [*e["victims"], *e["others"]]:
                assert v["rule"] in result.stdout or v["rule"] == "victim"
                assert v["object"] in result.stdout
    quota = CliRunner().invoke(
        cli,
        [
            "explain",
            "-f",
            str(REPO / "examples" / "quota-demo"),
            "--workload",
            "Workload/team-a/train",
            "--now",
            NOW,
        ],
    )
    assert quota.exit_code == 0, quota.output
    assert "victim Workload/team-b/sweep" in quota.stdout
    assert "InCohortReclamation" in quota.stdout
