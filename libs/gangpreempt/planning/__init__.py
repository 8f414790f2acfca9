"""Decisions: one pending workload, or a whole admission pass, over a snapshot."""

from gangpreempt.planning.cycle import AdmissionPass, admission_pass
from gangpreempt.planning.deciding import Evaluation, decision, evaluate
from gangpreempt.planning.decisions import ADMIT, PENDING, PREEMPT, Decision, Plan, Victim
from gangpreempt.planning.planning import parse_object_ref, plan, plan_on, rfc3339, state_warnings

__all__ = [
    "ADMIT",
    "PENDING",
    "PREEMPT",
    "AdmissionPass",
    "Decision",
    "Evaluation",
    "Plan",
    "Victim",
    "admission_pass",
    "decision",
    "evaluate",
    "parse_object_ref",
    "plan",
    "plan_on",
    "rfc3339",
    "state_warnings",
]
