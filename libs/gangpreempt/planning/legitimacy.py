"""Whether the victims of a proposed plan may be taken for its preemptor at all, derived
from the cluster state alone, independently of the search that chose them: a
compromised victims service, a lying proposal or a forged event must not get a victim
confirmed or evicted that no peer rule could have chosen. quota checks it before it
confirms (``services/quota``), beside the checks that the victims are still there and
the preemptor then fits; the actuator checks it again on its own replica before its
first write. Nothing in the proposal is believed but its references: the preemptor's
priority and ClusterQueue, each victim's priority, queue and pods are read from the
state.

A victim is refused, whatever the rule (each refusal names its rule, the label of
``gangpreempt_plans_illegitimate_total``):

- ``protected-namespace``: in a protected namespace (``GANGPREEMPT_PROTECTED_NAMESPACES``,
  ``kube-system`` and gangpreempt's own by default);
- ``system-critical``: of system-critical priority (>= 2,000,000,000: the priority of
  ``system-cluster-critical`` and ``system-node-critical``);
- ``non-preemptible``: a pod labelled ``quota.scheduling.koordinator.sh/preemptible=false``;
- ``unknown-victim``: not in the state (nothing the checker can see may be evicted);
- ``off-placement``: taken on the nodes (a pod, a pod group, a Workload's pods taken at
  node level) with no pod on the plan's nodes: it frees nothing there (kube-scheduler
  takes victims on the node it nominates; a gang's unit has at least one pod there);
- ``outside-cohort``: a Kueue victim taken for quota outside the preemptor's ClusterQueue
  and cohort tree (Kueue never preempts outside it); ``wrong-cluster-queue``: the
  proposal names another ClusterQueue than the preemptor's;
- ``minimum-runtime``: a Kueue victim inside its minimum runtime for the preemptor's
  priority (``quota.toleration``; checked when the judge is given the time, as quota and
  the actuator give it);
- ``priority``: no rule below allows it; ``named-rule``: the rule the proposal names for
  it does not hold.

A victim that passes is allowed by one of these rules (the victims service names the
first in the record, ``PlannedVictim.rule``; the checkers accept the named one only if
it holds):

- ``lower-priority``: its priority is below the preemptor's (for a Kueue victim, its
  ClusterQueue's policy, ``withinClusterQueue`` in its own queue, ``reclaimWithinCohort``
  in another, is not ``Never``);
- ``newer-equal-priority``: Kueue's ``LowerOrNewerEqualPriority``: equal priority, and the
  victim entered its queue after the preemptor;
- ``reclaim-within-cohort``: Kueue's ``reclaimWithinCohort: Any``, a victim of another
  ClusterQueue of the cohort whatever its priority; ``fair-sharing``: the same, chosen
  by fair sharing (``InCohortFairSharing``: Kueue's fair sharing takes its candidates
  from the same policy); ``policy-any``: a ``withinClusterQueue`` of ``Any``, which
  Kueue's code accepts;
- ``capacity-within-min``: scheduler-plugins CapacityScheduling: a preemptor whose
  ElasticQuota stays within its ``min`` reclaims from other namespaces whose quota is
  over its ``min``, whatever their priority.

Kueue's priority is the Workload's (``ClusterState.priority_of``); at node level, a pod's
or its gang's (``model.priorities``): the preemptor's scheduling priority against the
victim's preemption priority, as kube-scheduler compares them (KEP-5710)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime

from gangpreempt import events
from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, Pod, PodGroup
from gangpreempt.model.priorities import group_priorities, pod_priority
from gangpreempt.model.quantity import add_into
from gangpreempt.model.queues import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY
from gangpreempt.model.workloads import Workload
from gangpreempt.planning.barrier import LiveObject
from gangpreempt.planning.nodeconfirm import preemptor_groups
from gangpreempt.planning.nodeplan import is_node_level
from gangpreempt.preemption.capacity import CapacityQuotas
from gangpreempt.preemption.fair import IN_COHORT_FAIR_SHARING
from gangpreempt.preemption.jobquota import koordinator_quotas
from gangpreempt.quota import toleration

SYSTEM_CRITICAL = 2_000_000_000
SYSTEM_CLASSES = ("system-cluster-critical", "system-node-critical")  # built into the API
PROTECTED_NAMESPACES = ("kube-system", "gangpreempt")
WORKLOAD = "Workload/"

# The rules a victim is refused by (the metric's labels).
PROTECTED_NAMESPACE = "protected-namespace"
CRITICAL = "system-critical"
NON_PREEMPTIBLE = "non-preemptible"
UNKNOWN_VICTIM = "unknown-victim"
OFF_PLACEMENT = "off-placement"
OUTSIDE_COHORT = "outside-cohort"
WRONG_QUEUE = "wrong-cluster-queue"
PRIORITY = "priority"
NAMED_RULE = "named-rule"
MINIMUM_RUNTIME = "minimum-runtime"  # a Kueue victim inside its window (quota.toleration)
REFUSAL_RULES = (
    PROTECTED_NAMESPACE,
    CRITICAL,
    NON_PREEMPTIBLE,
    UNKNOWN_VICTIM,
    OFF_PLACEMENT,
    OUTSIDE_COHORT,
    WRONG_QUEUE,
    PRIORITY,
    NAMED_RULE,
    MINIMUM_RUNTIME,
)

# The rules that allow a victim (named in the record).
LOWER = "lower-priority"
NEWER_EQUAL = "newer-equal-priority"
RECLAIM = "reclaim-within-cohort"
FAIR_SHARING = "fair-sharing"
POLICY_ANY = "policy-any"
WITHIN_MIN = "capacity-within-min"
ALLOWING_RULES = (LOWER, NEWER_EQUAL, RECLAIM, FAIR_SHARING, POLICY_ANY, WITHIN_MIN)


class Refusal(str):
    """Why a plan is illegitimate: the message, naming the rule (a ``str``, so it reads
    and is recorded as any rejection reason), and the rule alone in ``rule``."""

    rule: str

    def __new__(cls, rule: str, message: str) -> Refusal:
        self = super().__new__(cls, f"{message} (refused by rule {rule})")
        self.rule = rule
        return self


def _namespace(ref: str) -> str:
    """The namespace of ``Kind/namespace/name`` (empty for a cluster-scoped ref)."""
    parts = ref.split("/")
    return parts[1] if len(parts) == 3 else ""


def _pods(state: ClusterState, v: events.PlannedVictim) -> list[Pod]:
    refs = v.pods or ((v.object,) if v.object.startswith("Pod/") else ())
    return [pod for ref in refs if (pod := state.pods.get(ref.removeprefix("Pod/"))) is not None]


def _critical(state: ClusterState, pod: Pod) -> bool:
    """Of system-critical priority: its own, or its PriorityClass's."""
    if pod.priority is not None:
        return pod.priority >= SYSTEM_CRITICAL
    if pod.priority_class_name in SYSTEM_CLASSES:
        return True
    pc = state.priority_classes.get(pod.priority_class_name)
    return pc is not None and pc.value >= SYSTEM_CRITICAL


def cohort_root(state: ClusterState, cq: str) -> str:
    """The root of ``cq``'s cohort tree (the ClusterQueue itself without a cohort); a
    loop in the parents ends the walk where it closes."""
    queue = state.cluster_queues.get(cq)
    node = queue.cohort if queue is not None else None
    if node is None:
        return f"ClusterQueue/{cq}"
    seen = {node}
    while (parent := getattr(state.cohorts.get(node), "parent", None)) and parent not in seen:
        seen.add(parent)
        node = parent
    return f"Cohort/{node}"


def outside_cohort(
    state: ClusterState, cluster_queue: str, victims: Sequence[events.PlannedVictim]
) -> str | None:
    """A Kueue victim outside the preemptor's ClusterQueue and cohort tree, or None."""
    root = cohort_root(state, cluster_queue)
    for v in victims:
        if not v.object.startswith(WORKLOAD):
            continue
        wl = state.workloads.get(v.object.removeprefix(WORKLOAD))
        theirs = state.cluster_queue_of(wl) if wl is not None else None
        if theirs is not None and theirs != cluster_queue and cohort_root(state, theirs) != root:
            return (
                f"victim {v.object} is in ClusterQueue {theirs}, outside "
                f"{cluster_queue}'s cohort tree"
            )
    return None


class Priorities:
    """Node-level priorities of one state, resolved on demand (``model.priorities``)."""

    def __init__(self, state: ClusterState, index: PodIndex | None = None) -> None:
        self.state = state
        self.index = index
        self.default = state.global_default_priority()
        self._members: dict[str, list[Pod]] | None = None
        self._groups: dict[str, tuple[int, int]] = {}

    def members(self, key: str) -> list[Pod]:
        """The pods of gang ``key`` (from the index; without one, one pass over the
        pods, the first time)."""
        if self.index is not None:
            return list(self.index.members(key))
        if self._members is None:
            self._members = {}
            for pod in self.state.pods.values():
                if pod.group:
                    self._members.setdefault(pod.group, []).append(pod)
        return self._members.get(key, [])

    def pod(self, pod: Pod) -> int:
        return pod_priority(self.state, pod, self.default)

    def group(self, group: PodGroup) -> tuple[int, int]:
        found = self._groups.get(group.key)
        if found is None:
            members = (self.pod(p) for p in self.members(group.key))
            found = self._groups[group.key] = group_priorities(
                self.state, group, members, self.default
            )
        return found

    def preemption(self, pod: Pod) -> int:
        """The priority a running pod is preempted at: its Kueue Workload's, its gang's
        preemption priority, else its own."""
        wl = self.state.workloads.get(pod.kueue_workload) if pod.kueue_workload else None
        if wl is not None:
            return self.state.priority_of(wl)
        group = self.state.pod_groups.get(pod.group) if pod.group else None
        if group is not None:
            return self.group(group)[1]
        return self.pod(pod)


class Judge:
    """The legitimacy of victims for one preemptor, on one state."""

    def __init__(
        self,
        state: ClusterState,
        preemptor: str,
        node_level: bool,
        protected: Collection[str] = PROTECTED_NAMESPACES,
        index: PodIndex | None = None,
        now: datetime | None = None,
    ) -> None:
        """``now``: when the plan is judged (a Kueue victim's minimum runtime is checked
        only when it is given)."""
        self.state = state
        self.now = now
        self.preemptor = preemptor
        self.node_level = node_level
        self.protected = protected
        self.priorities = Priorities(state, index)
        self.kueue: Workload | None = None  # the Kueue preemptor
        self.cluster_queue: str | None = None  # its ClusterQueue
        self.pods: list[Pod] = []  # a node-level preemptor's pending pods
        self.priority: int | None = None
        self._capacity: CapacityQuotas | bool | None = False  # False: not looked at yet
        self._resolve()

    def _resolve(self) -> None:
        st = self.state
        kind, _, key = self.preemptor.partition("/")
        if not self.node_level:
            self.kueue = st.workloads.get(key)
            if self.kueue is not None:
                self.priority = st.priority_of(self.kueue)
                self.cluster_queue = st.cluster_queue_of(self.kueue)
            return
        groups = [st.pod_groups[k] for k in preemptor_groups(st, self.preemptor)]
        if groups:
            self.priority = max(self.priorities.group(g)[0] for g in groups)
            self.pods = [p for g in groups for p in self.priorities.members(g.key) if p.pending]
        elif kind == "Pod" and (pod := st.pods.get(key)) is not None:
            self.priority = self.priorities.pod(pod)
            self.pods = [pod]

    # -- the rules that allow a victim -------------------------------------------------------

    def rules(self, v: events.PlannedVictim) -> tuple[str, ...]:
        """The rules that allow ``v`` for this preemptor, in the order a record names
        them (empty: none does). A victim of lower priority named for that (or for no
        rule) needs no other: CapacityScheduling's quotas (a pass over the pods) are
        read only when they can matter."""
        if self.priority is None:
            return ()
        if v.object.startswith(WORKLOAD) and not self.node_level:
            wl = self.state.workloads.get(v.object.removeprefix(WORKLOAD))
            return self._kueue_rules(wl, v.reason) if wl is not None else ()
        pods = _pods(self.state, v)
        if not pods:
            return ()
        priority = max(self.priorities.preemption(p) for p in pods)
        found = [LOWER] if priority < self.priority else []
        settled = found and v.rule in ("", LOWER)
        if self.node_level and not settled and self._within_min(pods):
            found.append(WITHIN_MIN)
        return tuple(found)

    def _kueue_rules(self, wl: Workload, reason: str) -> tuple[str, ...]:
        """Kueue's ``SatisfiesPreemptionPolicy`` with the policy of the preemptor's
        ClusterQueue for ``wl``'s queue (its own: ``withinClusterQueue``; another of the
        cohort: ``reclaimWithinCohort``)."""
        assert self.kueue is not None
        assert self.priority is not None
        theirs = self.state.cluster_queue_of(wl)
        queue = self.state.cluster_queues.get(self.cluster_queue or "")
        if queue is None or theirs is None:
            return ()
        own = theirs == self.cluster_queue
        policy = (
            queue.preemption.within_cluster_queue if own else queue.preemption.reclaim_within_cohort
        )
        priority = self.state.priority_of(wl)
        found: list[str] = []
        lower = priority < self.priority
        if lower and policy in (LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY, ANY):
            found.append(LOWER)
        equal = priority == self.priority
        if equal and policy == LOWER_OR_NEWER_EQUAL_PRIORITY and _newer(wl, self.kueue):
            found.append(NEWER_EQUAL)
        if policy == ANY:
            found.append(POLICY_ANY if own else RECLAIM)
        fair = self.state.kueue_configuration().fair_sharing
        if found and not own and fair and reason == IN_COHORT_FAIR_SHARING:
            found.insert(0, FAIR_SHARING)
        return tuple(found)

    def _within_min(self, pods: Sequence[Pod]) -> bool:
        """CapacityScheduling's reclaim: the preemptor's namespace has an ElasticQuota
        it stays within the ``min`` of with its pods in; the victim's pods are all of
        other namespaces whose quota is over its ``min``."""
        if self._capacity is False:
            st = self.state
            plugin = bool(st.elastic_quotas) and bool(self.pods) and not koordinator_quotas(st)
            self._capacity = CapacityQuotas(st) if plugin else None
        quotas = self._capacity
        if not isinstance(quotas, CapacityQuotas):
            return False
        ns = self.pods[0].namespace
        if quotas.quota(ns) is None:
            return False
        demand: dict[str, int] = {}
        for pod in self.pods:
            add_into(demand, pod.requests)
        if quotas.over_min_with(ns, demand, quotas.used):
            return False
        theirs = {p.namespace for p in pods}
        return ns not in theirs and all(
            quotas.quota(n) is not None and quotas.over_min(n, quotas.used) for n in theirs
        )

    def rule(self, v: events.PlannedVictim) -> str:
        """The rule a record names for ``v`` ("" when none allows it)."""
        try:
            found = self.rules(v)
        except InvalidInput:
            return ""
        return found[0] if found else ""

    # -- refusals ----------------------------------------------------------------------------

    def refusal(self, v: events.PlannedVictim, nodes: Collection[str]) -> Refusal | None:
        """Why ``v`` may not be taken for this preemptor, or None. ``nodes``: the plan's
        placement nodes (empty for a plan at quota level only)."""
        st = self.state
        ns = _namespace(v.object)
        if ns in self.protected:
            return Refusal(PROTECTED_NAMESPACE, f"victim {v.object} is in protected namespace {ns}")
        workload = v.object.startswith(WORKLOAD)
        pods = _pods(st, v)
        wl = st.workloads.get(v.object.removeprefix(WORKLOAD)) if workload else None
        if wl is None and not pods:
            return Refusal(UNKNOWN_VICTIM, f"victim {v.object} is not in the cluster state")
        if wl is not None and st.priority_of(wl) >= SYSTEM_CRITICAL:
            return Refusal(
                CRITICAL, f"victim {v.object} has system-critical priority {st.priority_of(wl)}"
            )
        for pod in pods:
            if pod.namespace in self.protected:
                return Refusal(
                    PROTECTED_NAMESPACE,
                    f"victim pod {pod.ref} is in protected namespace {pod.namespace}",
                )
            if _critical(st, pod):
                return Refusal(CRITICAL, f"victim pod {pod.ref} has system-critical priority")
            if not workload and pod.labels.get(PREEMPTIBLE_LABEL) == "false":
                return Refusal(
                    NON_PREEMPTIBLE, f"victim pod {pod.ref} is labelled {PREEMPTIBLE_LABEL}=false"
                )
        # A Kueue victim inside its minimum runtime; on the nodes, a Kueue Workload's pods
        # too (the search spares them: ``units.workload_tolerance``)
        owners = [wl] if wl is not None else []
        if self.node_level or not workload:
            keys = sorted({p.kueue_workload for p in pods if p.kueue_workload})
            owners += [o for k in keys if (o := st.workloads.get(k)) is not None and o is not wl]
        for owner in owners:
            refused = self._minimum_runtime(v, owner)
            if refused is not None:
                return refused
        on_nodes = self.node_level or not workload
        if nodes and pods and on_nodes and not {pod.node_name for pod in pods} & set(nodes):
            where = ", ".join(sorted(nodes)[:3])
            return Refusal(
                OFF_PLACEMENT, f"victim {v.object} has no pod on the plan's nodes ({where})"
            )
        return self._priority_refusal(v)

    def _minimum_runtime(self, v: events.PlannedVictim, wl: Workload) -> Refusal | None:
        """A Kueue victim inside its minimum runtime for this preemptor's priority."""
        st, now = self.state, self.now
        if now is None or self.priority is None or wl.admission is None:
            return None
        reserved = wl.quota_reserved_at or now
        cq = wl.admission.cluster_queue
        tol = toleration.tolerance(st, wl, cq, st.priority_of(wl), reserved.timestamp())
        if tol is None or not toleration.tolerates(tol, self.priority, now.timestamp()):
            return None
        whose = "" if v.object == f"{WORKLOAD}{wl.key}" else f" (its Workload {wl.key})"
        return Refusal(
            MINIMUM_RUNTIME,
            f"victim {v.object}{whose} is {toleration.describe(tol)}, and {self.preemptor}'s "
            f"priority is {self.priority}",
        )

    def _priority_refusal(self, v: events.PlannedVictim) -> Refusal | None:
        try:
            found = self.rules(v)
        except InvalidInput as exc:
            return Refusal(PRIORITY, f"victim {v.object}: its priority cannot be resolved: {exc}")
        if not found:
            return Refusal(
                PRIORITY,
                f"no rule lets {self.preemptor} (priority {self.priority}) take victim "
                f"{v.object}: not of lower priority, and no policy allows it",
            )
        if v.rule and v.rule not in found:
            return Refusal(
                NAMED_RULE,
                f"victim {v.object} is named for rule {v.rule}, which does not hold "
                f"(what holds: {', '.join(found)})",
            )
        return None


def _newer(victim: Workload, preemptor: Workload) -> bool:
    """The victim entered its queue after the preemptor (Kueue's queue-order timestamp;
    unknown on either side: it cannot be disproved)."""
    theirs, mine = victim.queue_order_time(), preemptor.queue_order_time()
    return theirs is None or mine is None or mine < theirs


def illegitimate(
    state: ClusterState,
    p: events.PlanProposed,
    protected: Collection[str] = PROTECTED_NAMESPACES,
    node_level: bool | None = None,
    index: PodIndex | None = None,
    now: datetime | None = None,
) -> Refusal | None:
    """Why one of the plan's victims may not be taken for its preemptor, or None.
    ``node_level``: the preemptor is decided on the nodes (derived from the state when
    None); else it is a Kueue Workload, its Workload victims taken for quota wherever
    their pods run, its pods and pod groups on the placement's nodes. ``index``: the
    state's pods by gang (else every pod is looked at)."""
    if node_level is None:
        node_level = is_node_level(state, p.preemptor)
    try:
        judge = Judge(state, p.preemptor, node_level, protected, index, now)
    except InvalidInput as exc:
        return Refusal(PRIORITY, f"preemptor {p.preemptor}: its priority cannot be resolved: {exc}")
    if judge.priority is None:
        return Refusal(UNKNOWN_VICTIM, f"preemptor {p.preemptor} is not in the cluster state")
    if not node_level:
        if judge.cluster_queue != p.cluster_queue:
            return Refusal(
                WRONG_QUEUE,
                f"the plan names ClusterQueue {p.cluster_queue}, but {p.preemptor} is "
                f"in {judge.cluster_queue}",
            )
        away = outside_cohort(state, p.cluster_queue, p.victims)
        if away is not None:
            return Refusal(OUTSIDE_COHORT, away)
    nodes = set(p.placement.values())
    for v in p.victims:
        refused = judge.refusal(v, nodes)
        if refused is not None:
            return refused
    return None


def live_refusal(
    p: events.PlanProposed, live: Mapping[str, LiveObject], node_level: bool
) -> Refusal | None:
    """The legitimacy checks the actuator runs once more on what the API server (the
    source of truth) says, not on what ingest published: each victim taken on the nodes
    has a live pod on the plan's nodes (a pod a lying ingest moved onto them is not
    there), and each victim taken for its lower priority is below the preemptor at the
    source, where both have a priority that decides alone (a Kueue Workload's, a pod's
    outside any gang; a gang's comes from its classes, which the state resolved)."""
    preemptor = live.get(p.preemptor)
    ceiling = preemptor.priority if preemptor is not None else None
    nodes = set(p.placement.values())
    for v in p.victims:
        kueue = v.object.startswith(WORKLOAD) and not node_level
        if nodes and v.pods and not kueue:
            there = {n for ref in v.pods if (lp := live.get(ref)) is not None for n in lp.nodes}
            if there and not there & nodes:
                return Refusal(
                    OFF_PLACEMENT,
                    f"live: victim {v.object} runs on {', '.join(sorted(there))}, none of the "
                    "plan's nodes (the published state said otherwise)",
                )
        found = live.get(v.object)
        if ceiling is None or found is None or found.priority is None:
            continue
        if v.rule in ("", LOWER) and found.priority >= ceiling:
            return Refusal(
                PRIORITY,
                f"live: victim {v.object} has priority {found.priority}, not below "
                f"{p.preemptor}'s {ceiling} (the published state said otherwise)",
            )
    return None


def named_rules(
    state: ClusterState,
    preemptor: str,
    victims: Iterable[events.PlannedVictim],
    index: PodIndex | None = None,
) -> dict[str, str]:
    """The rule each victim is taken by (victim -> rule; "" where none holds): what the
    victims service writes in a proposal."""
    try:
        node_level = is_node_level(state, preemptor)
        judge = Judge(state, preemptor, node_level, PROTECTED_NAMESPACES, index)
    except InvalidInput:
        return {v.object: "" for v in victims}
    return {v.object: judge.rule(v) for v in victims}


def protected_namespaces(text: str) -> tuple[str, ...]:
    """The setting's comma-separated namespaces."""
    return tuple(ns.strip() for ns in text.split(",") if ns.strip())


__all__ = [
    "ALLOWING_RULES",
    "MINIMUM_RUNTIME",
    "PROTECTED_NAMESPACES",
    "REFUSAL_RULES",
    "SYSTEM_CRITICAL",
    "Judge",
    "Refusal",
    "cohort_root",
    "illegitimate",
    "live_refusal",
    "named_rules",
    "outside_cohort",
    "protected_namespaces",
]
