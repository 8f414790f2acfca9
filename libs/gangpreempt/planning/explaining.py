"""Why a decision is what it is: for one pending workload, every running workload (a
Kueue Workload holding quota, or a preemption unit on the nodes) with the rule that made
it a victim or kept it, and, when the workload waits, what it waits for.

``explain`` decides exactly as ``plan`` does (the same core calls) and then reads each
unit against the rules that decided it; the rules are the ones docs/semantics.md states.
Each verdict has a stable ``rule`` code (for machines and tests) and a sentence."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import msgspec

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PREEMPTIBLE_LABEL
from gangpreempt.model.queues import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER
from gangpreempt.planning.deciding import Evaluation, evaluate
from gangpreempt.planning.decisions import ADMIT, PENDING, Decision
from gangpreempt.planning.nodeplan import ANY_PRIORITY, NodePlanner, Preemptor, is_node_level
from gangpreempt.planning.planning import parse_object_ref, plan, promised_refs
from gangpreempt.preemption.candidates import Classifier, Request, victim_cost_name
from gangpreempt.preemption.capacity import GangCapacity
from gangpreempt.preemption.jobquota import quota_of
from gangpreempt.preemption.units import Unit, tolerates, workload_tolerance
from gangpreempt.quota import toleration
from gangpreempt.quota.modes import Mode
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import AdmittedWorkload, Snapshot
from gangpreempt.quota.tree import cq_available

# Rule codes: why a workload is a victim, or why it is not.
VICTIM = "victim"
OWN = "own"  # part of the preemptor itself
PROMISED = "promised"  # already a victim of another plan
HIGHER_PRIORITY = "higher-priority"
TOLERATED = "tolerated"  # its PriorityClass tolerates the preemptor (for now)
NON_PREEMPTIBLE = "non-preemptible"
OTHER_QUOTA = "other-quota"  # Koordinator: victims come from the preemptor's quota only
PROTECTED_NAMESPACE = "protected-namespace"  # CapacityScheduling's namespace rules
POLICY = "policy"  # the ClusterQueue's preemption policy does not allow it
OUTSIDE_COHORT = "outside-cohort"
WITHIN_NOMINAL = "within-nominal"  # its ClusterQueue does not borrow what is needed
OTHER_RESOURCES = "other-resources"  # it frees nothing the preemptor needs
FITS = "fits"  # nothing is preempted: the preemptor fits as things are
NO_USE = "no-use"  # the preemptor waits whatever is preempted
ABOVE_CEILING = "above-ceiling"  # the binary search over priorities stopped below it
PDB = "pdb"  # kept: evicting it would violate a PodDisruptionBudget
NOT_NEEDED = "not-needed"  # a candidate the minimal victim set does without
REPRIEVED = "reprieved"  # kept once the placement was fixed: it still fits
FAIR_SHARE = "fair-share"  # Kueue fair sharing's strategies keep it


class Verdict(msgspec.Struct, frozen=True, omit_defaults=True):
    object: str
    priority: int
    rule: str
    why: str
    queue: str = ""  # its ClusterQueue or ElasticQuota, when it has one


class Explanation(msgspec.Struct, frozen=True):
    preemptor: str
    priority: int
    outcome: str
    message: str
    victims: list[Verdict]
    others: list[Verdict]
    waiting: list[str]  # why it is pending, line by line (empty unless Pending)
    priority_ceiling: int | None = None  # the binary search's result (gangs)
    # How the victims the rules allow were chosen: the peers' order (kueue-order), or
    # the set losing least work (lost-gpu-hours).
    victim_cost: str | None = None
    # Kueue's topology-aware scheduling: why each domain of the requested level was, or
    # was not, chosen
    topology: list[str] = msgspec.field(default_factory=list)


def explain(
    state: ClusterState,
    now: datetime,
    workload: str,
    priority_search: bool = True,
    rescheduling: bool = False,
    excluded: Iterable[str] = (),
    victim_cost: str = "",
) -> Explanation:
    """Explain the decision ``plan`` makes for ``workload`` (evaluated alone, as the head
    of its queue); ``excluded`` and ``victim_cost`` as for ``plan``: victims promised to
    other plans, and the order of Kueue's candidates of one priority."""
    excluded = list(excluded)
    decided = plan(
        state,
        now,
        workload,
        excluded,
        priority_search=priority_search,
        rescheduling=rescheduling,
        victim_cost=victim_cost,
    )
    d = decided.decisions[0]
    if is_node_level(state, d.preemptor):
        return _nodes(state, now, d, priority_search, rescheduling, excluded, victim_cost)
    return _quota(state, now, d, excluded, victim_cost)


# -- on the nodes -------------------------------------------------------------------------


def _nodes(
    state: ClusterState,
    now: datetime,
    d: Decision,
    priority_search: bool,
    rescheduling: bool,
    excluded: list[str],
    victim_cost: str = "",
) -> Explanation:
    planner = NodePlanner(state, now, priority_search)
    planner.rescheduling = rescheduling
    planner.victim_cost = victim_cost
    planner.promised.update(promised_refs(excluded))
    pre = planner.resolve(d.preemptor)
    ceiling = max((v.priority for v in d.victims), default=None) if priority_search else None
    reader = _NodeRules(planner, pre, d, ceiling, now)
    chosen = {v.object for v in d.victims}
    victims: list[Verdict] = []
    others: list[Verdict] = []
    for unit in planner.table.ordered:
        queue = reader.quota_ref(unit)
        if unit.ref in chosen:
            victims.append(Verdict(unit.ref, unit.priority, VICTIM, reader.victim(unit), queue))
        else:
            rule, why = reader.rule(unit)
            others.append(Verdict(unit.ref, unit.priority, rule, why, queue))
    return Explanation(
        preemptor=d.preemptor,
        priority=pre.priority,
        outcome=d.outcome,
        message=d.message,
        victims=victims,
        others=others,
        waiting=_node_waiting(planner, pre, d) if d.outcome == PENDING else [],
        priority_ceiling=ceiling,
        victim_cost=victim_cost_name(victim_cost),
    )


class _NodeRules:
    """The rules one node-level decision was made by, read once, applied per unit."""

    def __init__(
        self,
        planner: NodePlanner,
        pre: Preemptor,
        d: Decision,
        ceiling: int | None,
        now: datetime,
    ) -> None:
        self.planner = planner
        self.state = planner.state
        self.pre = pre
        self.d = d
        self.ceiling = ceiling
        self.now = now
        self.own = {g.ref for g in pre.groups} | {p.ref for p in pre.pods}
        self.used_nodes = set(d.placement.values())
        quotas = bool(self.state.elastic_quotas) and bool(pre.pods)
        self.koordinator = quotas and planner.quota_view().koordinator
        self.mine = quota_of(self.state, pre.pods[0]) if self.koordinator else None
        # CapacityScheduling's rules for this preemptor; within its min it reclaims at
        # any priority.
        self.capacity: GangCapacity | None = None
        if quotas and not self.koordinator:
            self.capacity = GangCapacity(
                planner.capacity_quotas(), self.state, pre.pods[0].namespace, pre.demand
            )
        self.reclaims = (
            self.capacity is not None and self.capacity.has_quota and not self.capacity.borrowing
        )

    def quota_ref(self, unit: Unit) -> str:
        if not self.state.elastic_quotas:
            return ""
        eq = quota_of(self.state, unit.pods[0])
        return eq.ref if eq is not None else ""

    def victim(self, unit: Unit) -> str:
        nodes = sorted({p.node_name for p in unit.pods})
        allowed = (
            f"its namespace {unit.pods[0].namespace} is over its min: CapacityScheduling "
            "reclaims from it whatever its priority"
            if self.reclaims
            else f"priority {unit.priority} is below {self.pre.priority}"
        )
        return f"{allowed}; it runs on {', '.join(nodes)}, where the placement needs its room"

    def rule(self, unit: Unit) -> tuple[str, str]:
        pre, d, ceiling = self.pre, self.d, self.ceiling
        if unit.ref in self.own or any(p.ref in self.own for p in unit.pods):
            return OWN, "it is part of the preemptor"
        if unit.ref in self.planner.promised:
            return PROMISED, "already the victim of another plan"
        quota_rule = self._quota_rule(unit)
        if quota_rule is not None:
            return quota_rule
        if unit.priority >= pre.priority and not self.reclaims:
            return HIGHER_PRIORITY, f"priority {unit.priority} is not below {pre.priority}"
        for pod in unit.pods:
            if pod.labels.get(PREEMPTIBLE_LABEL) == "false":
                return NON_PREEMPTIBLE, f"{pod.ref} is labelled {PREEMPTIBLE_LABEL}=false"
        tolerated = self._tolerated(unit)
        if tolerated is not None:
            return TOLERATED, tolerated
        if d.outcome == ADMIT:
            return FITS, "the preemptor fits on the nodes as they are"
        if d.outcome == PENDING:
            return NO_USE, "the preemptor cannot start even with every candidate gone"
        if ceiling is not None and unit.priority > ceiling:
            return ABOVE_CEILING, (
                f"the binary search over priorities found that victims at or below priority "
                f"{ceiling} suffice"
            )
        if not any(p.node_name in self.used_nodes for p in unit.pods):
            return NOT_NEEDED, "it runs on no node the placement uses"
        if self.planner.table.pdb_violations([unit]):
            return PDB, "evicting it would violate a PodDisruptionBudget; such units are kept first"
        return REPRIEVED, (
            "kept once the placement was fixed: its pods still fit where they run (victims "
            "are reprieved most important first)"
        )

    def _tolerated(self, unit: Unit) -> str | None:
        """Why the unit's PriorityClass, or the Kueue Workload its pods run, tolerates the
        preemptor (``units.tolerates``, ``units.workload_tolerance`` decide), and until
        when."""
        for pod in unit.pods:
            tol = workload_tolerance(self.planner.cluster.state, pod, self.now)
            if toleration.tolerates(tol, self.pre.priority, self.now.timestamp()):
                assert tol is not None
                return f"its Workload {pod.kueue_workload} is {toleration.describe(tol)}"
            pc = self.planner.cluster.priority_class_of(pod)
            if pc is None or not tolerates(pc, self.pre.priority, pod, self.now):
                continue
            minimum = pc.minimum_preemptable_priority
            if minimum is None:
                minimum = pc.value + 1
            seconds = pc.toleration_seconds or 0
            if seconds < 0:
                until = "for as long as it runs"
            elif pod.scheduled_at is None:
                until = f"for {seconds} s once scheduled"
            else:
                until = f"until {(pod.scheduled_at + timedelta(seconds=seconds)).isoformat()}"
            return (
                f"PriorityClass {pc.name} tolerates preemptors below priority {minimum} "
                f"{until} (preemption toleration)"
            )
        return None

    def _quota_rule(self, unit: Unit) -> tuple[str, str] | None:
        """Koordinator's same-quota rule and CapacityScheduling's namespace rules."""
        pre = self.pre
        if self.mine is not None:
            if any(quota_of(self.state, p) != self.mine for p in unit.pods):
                return OTHER_QUOTA, (
                    f"it is not in the preemptor's quota {self.mine.ref} (Koordinator preempts "
                    "within a quota only)"
                )
            return None
        rules = self.capacity
        if rules is None:
            return None
        if rules.allows(unit, ANY_PRIORITY if self.reclaims else pre.priority):
            return None
        namespace = unit.pods[0].namespace
        if not rules.has_quota:
            why = "the preemptor has no ElasticQuota: it takes only pods without one"
        elif rules.borrowing:
            why = "the preemptor's namespace would be over its min: it takes only its own pods"
        elif namespace == pre.pods[0].namespace:
            why = (
                "the preemptor is within its min: it reclaims from other namespaces only, "
                "never its own"
            )
        else:
            why = (
                f"the preemptor is within its min, and namespace {namespace} is not over its "
                "min (or has no ElasticQuota): protected"
            )
        return PROTECTED_NAMESPACE, why


def _node_waiting(planner: NodePlanner, pre: Preemptor, d: Decision) -> list[str]:
    """Why each node cannot take the preemptor's first pod (lone pods and gangs alike:
    the nodes that fail and why), after the decision's own message."""
    lines = [d.message]
    pod = pre.pods[0] if pre.pods else None
    if pod is None:
        return lines
    allowed = set(planner.cluster.allowed_names(pod.scheduling))
    demand = planner.cluster.demand(pod)
    for view in planner.cluster.nodes:
        node = view.node
        if view.name not in allowed:
            if node.unschedulable:
                lines.append(f"node {view.name}: cordoned (spec.unschedulable)")
            else:
                lines.append(
                    f"node {view.name}: its labels or taints keep {pod.ref} off (node "
                    "selector, required affinity, or a taint it does not tolerate)"
                )
            continue
        free = view.free(tuple(demand))
        short = [
            f"{res} {free.get(res, 0)} free of {need} needed"
            for res, need in sorted(demand.items())
            if need > free.get(res, 0)
        ]
        if short:
            lines.append(f"node {view.name}: {', '.join(short)}")
    return lines


# -- quota (Kueue) ----------------------------------------------------------------------


def _quota(
    state: ClusterState, now: datetime, d: Decision, excluded: list[str], victim_cost: str = ""
) -> Explanation:
    _kind, namespace, name = parse_object_ref(d.preemptor)
    wl = state.workloads[f"{namespace}/{name}"]
    snapshot = Snapshot.build(state, now)
    snapshot.victim_cost = victim_cost
    promised = set(promised_refs(excluded))
    for key in excluded:
        snapshot.pin(key)
    pending = PendingWorkload.of(state, wl, now)
    chosen = {v.object: v for v in d.victims}
    victims: list[Verdict] = []
    others: list[Verdict] = []
    if pending.cq is None or pending.cq not in snapshot.cqs:
        waiting = [d.message]
        for aw in _admitted(snapshot):
            others.append(Verdict(aw.ref, aw.priority, NO_USE, d.message, aw.cq))
        return Explanation(
            d.preemptor,
            pending.priority,
            d.outcome,
            d.message,
            [],
            others,
            waiting,
            victim_cost=victim_cost_name(victim_cost),
        )
    with snapshot.scratch():
        ev = evaluate(snapshot, pending)
        cq = ev.cq
        frs = (
            ev.assignment.needing_preemption()
            if ev.mode is Mode.Preempt
            else frozenset(ev.assignment.usage)
        )
        req = Request(pending, cq, frozenset(frs), dict(ev.assignment.usage))
        classifier = Classifier(req)
        tree = {n.name for n in cq.node.root().subtree_cluster_queues()}
        for aw in _admitted(snapshot):
            victim = chosen.get(aw.ref)
            if victim is not None:
                victims.append(
                    Verdict(
                        aw.ref,
                        aw.priority,
                        VICTIM,
                        _quota_victim_rule(req, aw, victim.reason),
                        aw.cq,
                    )
                )
                continue
            if aw.ref in promised:
                rule, why = PROMISED, "already the victim of another plan"
            else:
                rule, why = _quota_rule_of(snapshot, req, classifier, aw, tree, d)
            others.append(Verdict(aw.ref, aw.priority, rule, why, aw.cq))
        waiting = _quota_waiting(ev, d) if d.outcome == PENDING else []
        topology: list[str] = []
        if ev.topology is not None and ev.topology.mode is not Mode.NoFit:
            gone = frozenset(v.object.removeprefix("Workload/") for v in d.victims)
            topology = ev.topology.domain_lines(gone)
    # Victims on the nodes that the decision added for the workload's pods (its quota
    # fits, the nodes it must run on do not).
    for v in d.victims:
        if v.object not in {x.object for x in victims} and not v.object.startswith("Workload/"):
            why = (
                f"priority {v.priority} is below {pending.priority}; the workload's pods "
                "need its room on the nodes (its quota fits)"
            )
            victims.append(Verdict(v.object, v.priority, VICTIM, why, v.queue))
    return Explanation(
        d.preemptor,
        pending.priority,
        d.outcome,
        d.message,
        victims,
        others,
        waiting,
        victim_cost=victim_cost_name(victim_cost),
        topology=topology,
    )


def _admitted(snapshot: Snapshot) -> list[AdmittedWorkload]:
    out = [aw for cq in snapshot.cqs.values() for aw in cq.workloads.values()]
    return sorted(out, key=lambda aw: aw.ref)


def _policy_words(policy: str, aw: AdmittedWorkload, priority: int) -> str:
    if policy == LOWER_PRIORITY:
        return f"LowerPriority, and priority {aw.priority} is below {priority}"
    if policy == LOWER_OR_NEWER_EQUAL_PRIORITY:
        return f"LowerOrNewerEqualPriority, and priority {aw.priority} against {priority}"
    return "Any"


def _quota_victim_rule(req: Request, aw: AdmittedWorkload, reason: str) -> str:
    if reason == "InCohortFairSharing":
        return (
            f"{reason}: its ClusterQueue {aw.cq} has a higher dominant resource share than "
            f"{req.cq.name} would have, and fair sharing takes from the highest share first"
        )
    policy = req.cq.spec.preemption
    priority = req.preemptor.priority
    if aw.cq == req.cq.name:
        return (
            f"{reason}: withinClusterQueue is "
            f"{_policy_words(policy.within_cluster_queue, aw, priority)}"
        )
    return (
        f"{reason}: its ClusterQueue {aw.cq} borrows in the cohort, and reclaimWithinCohort "
        f"is {_policy_words(policy.reclaim_within_cohort, aw, priority)}"
    )


def _quota_rule_of(
    snapshot: Snapshot,
    req: Request,
    classifier: Classifier,
    aw: AdmittedWorkload,
    tree: set[str],
    d: Decision,
) -> tuple[str, str]:
    if aw.evicting:
        return PROMISED, "it is already being evicted"
    if d.outcome == ADMIT:
        return FITS, "the preemptor fits in its quota as things are"
    same = aw.cq == req.cq.name
    if (
        (same or aw.cq in tree)
        and aw.tolerance is not None
        and toleration.tolerates(aw.tolerance, req.preemptor.priority, req.preemptor.now_ts)
    ):
        return TOLERATED, toleration.describe(aw.tolerance)
    if d.outcome == PENDING:
        return NO_USE, f"the preemptor waits whatever is preempted: {d.message}"
    policy = req.cq.spec.preemption
    if not same and aw.cq not in tree:
        return OUTSIDE_COHORT, f"its ClusterQueue {aw.cq} is not in {req.cq.name}'s cohort"
    rule = policy.within_cluster_queue if same else policy.reclaim_within_cohort
    field = "withinClusterQueue" if same else "reclaimWithinCohort"
    if rule == NEVER:
        return POLICY, f"{field} is Never"
    if not same and snapshot.cqs[aw.cq].node.within_nominal(req.frs):
        return WITHIN_NOMINAL, (
            f"its ClusterQueue {aw.cq} uses no more than its nominal quota of what the "
            "preemptor needs: only borrowers are reclaimed from"
        )
    if not aw.frs & req.frs:
        return OTHER_RESOURCES, "it uses none of the flavors and resources the preemptor needs"
    if snapshot.fair_sharing and not same:
        return FAIR_SHARE, (
            f"fair sharing kept it: its ClusterQueue {aw.cq} would not be left with a share "
            "above the preemptor's (the preemption strategies), or the victims taken from "
            "higher shares sufficed"
        )
    if rule != ANY and not classifier.satisfies_policy(aw, rule):
        return (
            HIGHER_PRIORITY,
            f"{field} is {rule}, and priority {aw.priority} is not below {req.preemptor.priority}",
        )
    return NOT_NEEDED, (
        "a candidate the victim set did without: Kueue takes the lowest-priority, most "
        "recently admitted first, and stops once the preemptor fits"
    )


def _quota_waiting(ev: Evaluation, d: Decision) -> list[str]:
    """The decision's message, then the quota arithmetic per flavor and resource."""
    lines = [d.message]
    cq = ev.cq
    for fr, need in sorted(ev.assignment.usage.items()):
        flavor, resource = fr
        node = cq.node
        lines.append(
            f"{resource} in flavor {flavor}: needs {need}; ClusterQueue {cq.name} uses "
            f"{node.usage.get(fr, 0)} of nominal {node.nominal(fr)}, "
            f"{cq_available(node, fr)} available to it (borrowing included)"
        )
    return lines


def victim_summary(reason: str, priority: int, queue: str, preemptor_priority: int) -> str:
    """The rule that made a victim, in a few words (the Kubernetes Events' messages)."""
    queue = queue.rpartition("/")[2]
    if reason == "InClusterQueue":
        return f"priority {priority} below {preemptor_priority}, same ClusterQueue"
    if reason == "InCohortReclamation":
        return f"its ClusterQueue {queue} borrows; reclaimed within the cohort"
    if reason == "InCohortReclaimWhileBorrowing":
        return f"priority {priority} below {preemptor_priority}, reclaimed while borrowing"
    if reason == "InCohortFairSharing":
        return f"its ClusterQueue {queue} has the highest share (fair sharing)"
    return f"priority {priority} below {preemptor_priority}; its room on the nodes is needed"


def explanation_lines(e: Explanation) -> Iterable[str]:
    """The explanation in words, one line each (the CLI's table output)."""
    yield f"{e.preemptor} (priority {e.priority}): {e.outcome}. {e.message}"
    if e.priority_ceiling is not None:
        yield f"priority ceiling of the victims: {e.priority_ceiling}"
    if e.victim_cost is not None:
        yield f"victims chosen by: {e.victim_cost}"
    for v in e.victims:
        yield f"  victim {v.object} (priority {v.priority}): {v.why}"
    for v in e.others:
        yield f"  kept   {v.object} (priority {v.priority}) [{v.rule}]: {v.why}"
    for line in e.topology:
        yield f"  topology: {line}"
    for line in e.waiting:
        yield f"  waits: {line}"


__all__ = ["Explanation", "Verdict", "explain", "explanation_lines", "victim_summary"]
