"""Node-level decisions: a pending pod or gang placed on nodes, with the victims that
make room for it (kube-scheduler's DefaultPreemption for a lone pod, KEP-5710's domain
search for a gang, with its ElasticQuota checked alongside)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

import msgspec

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import CAN_PREEMPT_LABEL, NEVER, Pod, PodGroup
from gangpreempt.placement.cluster import NodeCluster, add_into
from gangpreempt.placement.gang import Shape, shapes_of
from gangpreempt.planning.decisions import ADMIT, PENDING, PREEMPT, Decision, Victim, plural
from gangpreempt.preemption.candidates import LOST_GPU_HOURS, recently_preempted
from gangpreempt.preemption.capacity import CapacityQuotas, GangCapacity, search_capacity
from gangpreempt.preemption.gang import Check, Domain, GangSearch, best, domains
from gangpreempt.preemption.jobquota import JobQuota, QuotaView, non_preemptible, quota_of
from gangpreempt.preemption.lostwork import unit_cost
from gangpreempt.preemption.single import fits_now, nominated_usage, search_single
from gangpreempt.preemption.units import Unit, UnitTable

NODE_REASON = "PreemptionByScheduler"


ANY_PRIORITY = 2**31  # above every int32 priority: the candidates at any priority


def is_node_level(state: ClusterState, ref: str) -> bool:
    """Is this preemptor decided on nodes (a pod, a PodGroup, a scheduling.k8s.io
    Workload) rather than by Kueue quota?"""
    kind, _, key = ref.partition("/")
    if kind in ("Pod", "PodGroup"):
        return True
    return kind == "Workload" and key not in state.workloads and bool(state.gang_workload(key))


class Preemptor:
    """A pending lone pod, or a gang (one PodGroup, or every group of a Workload)."""

    def __init__(self, ref: str, pods: list[Pod], groups: list[PodGroup], priority: int) -> None:
        self.ref = ref
        self.pods = pods  # pending pods, name order
        self.groups = groups
        self.priority = priority

    @property
    def is_gang(self) -> bool:
        return bool(self.groups)

    @property
    def demand(self) -> dict[str, int]:
        """What its pending pods request together."""
        total: dict[str, int] = {}
        for p in self.pods:
            add_into(total, p.requests)
        return total


class NodePlanner:
    """Node-level decisions on one snapshot; ``commit`` makes a decision's placement and
    victims count for the preemptors decided after it."""

    def __init__(
        self,
        state: ClusterState,
        now: datetime,
        priority_search: bool = True,
        index: tuple[NodeCluster, UnitTable] | None = None,
        quotas: QuotaView | None = None,
    ) -> None:
        """``index``: a cluster and table kept current elsewhere (``NodeIndex``), to
        decide on instead of building them from ``state``; ``quotas`` the same for the
        ElasticQuotas (read only here)."""
        self.state = state
        self.now = now
        if index is None:
            self.cluster = NodeCluster(state)
            self.table = UnitTable(self.cluster, now)
        else:
            self.cluster, self.table = index
        self.priority_search = priority_search
        self.use_columns = True  # the gang search's column path where it applies
        self.rescheduling = False  # kube-scheduler 1.36's reprieve (``GangSearch``)
        # ``lost-gpu-hours``: among the victims the rules allow, the least lost work
        self.victim_cost = ""
        self._unit_cost: Callable[[Unit], float] | None = None
        self.decided = 0  # decisions made (a service's metrics count them)
        self.stats: dict[str, int] = {}  # the last decision's numbers, for its trace span
        self.promised: set[str] = set()  # units (refs) already chosen as victims
        # Kueue preemptors whose victims have just left -> the room they were planned
        # (``reserve``): theirs alone in this pass
        self.reserved: dict[str, dict[str, dict[str, int]]] = {}
        # Kueue's ClusterQueues above their nominal quota before the pass, when known: a
        # Workload's node victims in another ClusterQueue come only from these (``compose``)
        self.borrowing_queues: frozenset[str] | None = None
        self._quota_view: QuotaView | None = quotas
        self._capacity: bool | None = None
        self._capacity_state: CapacityQuotas | None = None

    def cost(self) -> Callable[[Unit], float] | None:
        """A victim's lost work (``lostwork.unit_cost``) under ``victim_cost``
        ``lost-gpu-hours``; None: kube-scheduler's order alone."""
        if self.victim_cost != LOST_GPU_HOURS:
            return None
        if self._unit_cost is None:
            self._unit_cost = unit_cost(self.state, self.now)
        return self._unit_cost

    # -- preemptors -----------------------------------------------------------------------

    def _gang(self, ref: str, keys: Iterable[str]) -> Preemptor:
        groups = [self.state.pod_groups[k] for k in keys]
        pods = [p for g in groups for p in self.cluster.members.get(g.key, []) if p.pending]
        prio = max((self.cluster.group_priority[g.key][0] for g in groups), default=0)
        return Preemptor(ref, sorted(pods, key=lambda p: p.key), groups, prio)

    def resolve(self, ref: str) -> Preemptor:
        """``Pod/NS/NAME`` (a gang member stands for its gang), ``PodGroup/NS/NAME`` or a
        scheduling.k8s.io ``Workload/NS/NAME``."""
        kind, _, key = ref.partition("/")
        st = self.state
        if kind == "Pod":
            pod = st.pods.get(key)
            if pod is None:
                raise InvalidInput(f"--workload: Pod {key} not found in the manifests")
            if not pod.pending:
                raise InvalidInput(
                    f"--workload: Pod {key} is not pending (it is bound or finished)"
                )
            if pod.group and pod.group in st.pod_groups:
                return self._gang(st.pod_groups[pod.group].ref, [pod.group])
            return Preemptor(ref, [pod], [], self.cluster.pod_priority[pod.key])
        if kind == "PodGroup":
            if key not in st.pod_groups:
                raise InvalidInput(f"--workload: PodGroup {key} not found in the manifests")
            return self._gang(ref, [key])
        groups = st.gang_workload(key) if kind == "Workload" else ()
        if groups:
            return self._gang(ref, groups)
        raise InvalidInput(f"--workload: {ref} not found in the manifests")

    def _kueue_pending(self, pod: Pod) -> bool:
        """A pod of a Kueue Workload that is not admitted (or not known yet): Kueue
        decides it, with its Workload; it is never a preemptor of its own."""
        if not pod.kueue_workload:
            return False
        wl = self.state.workloads.get(pod.kueue_workload)
        return wl is None or wl.is_pending

    def pending(self) -> list[Preemptor]:
        """Every pending lone pod and every gang with pending pods, highest priority
        first, then by name (the order kube-scheduler's queue would pop them)."""
        out: list[Preemptor] = []
        seen_workloads: set[str] = set()
        pending = self.cluster.pending
        for key in sorted({p.group for p in pending.values() if p.group}):
            pods = self.cluster.members.get(key, [])
            group = self.state.pod_groups.get(key)
            if group is None or not any(p.pending and not self._kueue_pending(p) for p in pods):
                continue
            if group.workload:
                if group.workload in seen_workloads:
                    continue
                seen_workloads.add(group.workload)
                out.append(
                    self._gang(
                        f"Workload/{group.workload}", self.state.gang_workload(group.workload)
                    )
                )
            else:
                out.append(self._gang(group.ref, [key]))
        for key, pod in sorted(pending.items()):
            if self._kueue_pending(pod):
                continue  # decided with its Kueue Workload (``compose``)
            if not (pod.group and pod.group in self.state.pod_groups):
                out.append(Preemptor(pod.ref, [pod], [], self.cluster.pod_priority[key]))
        out.sort(key=lambda p: (-p.priority, p.ref.split("/", 1)[1], p.ref))
        return out

    # -- deciding -------------------------------------------------------------------------

    def decide(self, pre: Preemptor) -> Decision:
        self.decided += 1
        self.stats = {}
        quota = self._quota(pre)
        blocked = self._blocked(pre)
        if blocked is not None:
            return self._decision(pre, quota, "NoFit", PENDING, [], {}, blocked)
        if not pre.is_gang and self._capacity_scheduling():
            return self._decide_capacity(pre)
        if pre.is_gang or quota is not None:
            return self._decide_gang(pre, quota)
        return self._decide_single(pre)

    def _capacity_scheduling(self) -> bool:
        """ElasticQuotas that are scheduler-plugins CapacityScheduling's (no pod speaks
        Koordinator's quota labels)."""
        if self._capacity is None:
            self._capacity = bool(self.state.elastic_quotas) and not self.quota_view().koordinator
        return self._capacity

    def _decide_capacity(self, pre: Preemptor) -> Decision:
        """A lone pod under CapacityScheduling (``preemption.capacity``)."""
        pod = pre.pods[0]
        quotas = self.capacity_quotas()
        eq = quotas.quota(pod.namespace)

        def out(
            mode: str, outcome: str, victims: list[Unit], placement: dict[str, str], message: str
        ) -> Decision:
            d = self._decision(pre, None, mode, outcome, victims, placement, message)
            return msgspec.structs.replace(d, queue=eq.ref if eq is not None else "")

        refusal = quotas.admits(pod)
        if refusal is None:
            node = fits_now(self.cluster, pod, pre.priority)
            if node is not None:
                return out("Fit", ADMIT, [], {pod.ref: node}, f"fits on node {node}")
        blocked, _kept = self._may_preempt(pre)
        why = refusal or "does not fit on any node"
        if blocked is not None:
            return out("NoFit", PENDING, [], {}, f"{why} and {blocked}")
        found, evaluated = search_capacity(
            self.cluster, self.table, quotas, pod, pre.priority, self._own_units(pre)
        )
        self.stats["nodes_evaluated"] = evaluated
        if found is None:
            rule = (
                "only lower-priority pods of its own namespace may go (its quota would be "
                "over min), or pods of quotas over their min (within its min)"
                if eq is not None
                else "only lower-priority pods without an ElasticQuota may go"
            )
            return out(
                "NoFit",
                PENDING,
                [],
                {},
                f"{why}, and no node would take it after preemption as CapacityScheduling "
                f"allows ({rule}; {plural(evaluated, 'node')} evaluated)",
            )
        message = f"preempts {plural(len(found.victims), 'unit')} on node {found.node}" + (
            f" ({found.violations} PDB violations)" if found.violations else ""
        )
        return out("Preempt", PREEMPT, found.victims, {pod.ref: found.node}, message)

    def _quota(self, pre: Preemptor) -> JobQuota | None:
        if not pre.pods:
            return None
        eq = quota_of(self.state, pre.pods[0])
        if eq is None:
            return None
        return self.quota_view().job_quota(
            eq, pre.demand, any(non_preemptible(p) for p in pre.pods)
        )

    def quota_view(self) -> QuotaView:
        """Each running pod's ElasticQuota and, for Koordinator, the tree's runtimes,
        found once per snapshot."""
        if self._quota_view is None:
            self._quota_view = QuotaView(self.state)
        return self._quota_view

    def _need(self, group: PodGroup) -> int:
        """How many more of the group's pods must be placed: minCount less its members
        running (terminating and finished ones do not count)."""
        running = sum(
            1 for p in self.cluster.members.get(group.key, []) if p.running and not p.terminating
        )
        return max(0, group.min_count - running)

    def _blocked(self, pre: Preemptor) -> str | None:
        """Why this preemptor cannot be placed at all now, or None."""
        for group in pre.groups:
            members = self.cluster.members.get(group.key, [])
            have = sum(1 for p in members if (p.running and not p.terminating) or p.pending)
            if have < group.min_count:
                return (
                    f"{group.ref} has {plural(have, 'live pod')}, fewer than its minCount "
                    f"{group.min_count}: waiting for its pods"
                )
        if not pre.pods:
            return "no pending pods"
        return None

    def _victims_terminating(self, pre: Preemptor) -> str | None:
        """kube-scheduler's PodEligibleToPreemptOthers: a preemptor nominated to a node
        where lower-priority pods are still terminating waits for them."""
        for pod in pre.pods:
            node = self.cluster.by_name.get(pod.nominated_node) if pod.nominated_node else None
            if node is None or node.name not in self.cluster.allowed_names(pod.scheduling):
                # No nominated node, or one the pod can never run on (a selector, a taint
                # it does not tolerate: UnschedulableAndUnresolvable): nothing to wait for.
                continue
            terminating = [
                p
                for p in node.pods
                if p.terminating and self._worth_waiting_for(pod, p, pre.priority)
            ]
            if terminating:
                return (
                    f"{pod.ref} is nominated to node {node.name}, where "
                    f"{plural(len(terminating), 'lower-priority pod')} are still terminating: "
                    "waiting for them instead of preempting more; it keeps its nominations"
                )
        return None

    def _worth_waiting_for(self, pod: Pod, leaving: Pod, priority: int) -> bool:
        """Does the preemptor wait for this terminating pod on its nominated node?
        kube-scheduler: any of lower priority. CapacityScheduling: a pod with a quota
        waits for a lower-priority one of its namespace, or (within its min) for one of
        a quota over its min; a pod without a quota for a lower-priority one without."""
        lower = self.cluster.preemption_priority(leaving) < priority
        if not self._capacity_scheduling():
            return lower
        quotas = self.capacity_quotas()
        mine, theirs = quotas.quota(pod.namespace), quotas.quota(leaving.namespace)
        if mine is None:
            return theirs is None and lower
        if theirs is None:
            return False
        if leaving.namespace == pod.namespace:
            return lower
        return not quotas.over_min_with(
            pod.namespace, pod.requests, quotas.used
        ) and quotas.over_min(leaving.namespace, quotas.used)

    def capacity_quotas(self) -> CapacityQuotas:
        if self._capacity_state is None:
            self._capacity_state = CapacityQuotas(self.state)
        return self._capacity_state

    def _may_preempt(self, pre: Preemptor) -> tuple[str | None, dict[str, str]]:
        """Why the preemptor may not preempt now (None: it may), and the nominations it
        keeps: a preemptor waiting for its earlier victims keeps its pods' nominated
        nodes and chooses nothing new (kube-scheduler 1.37: "ongoing preemption on
        nominated nodes"); any other refusal places nothing."""
        waiting = self._victims_terminating(pre)
        if waiting is not None:
            return waiting, {p.ref: p.nominated_node for p in pre.pods if p.nominated_node}
        return self._refusal(pre), {}

    def _refusal(self, pre: Preemptor) -> str | None:
        for pod in pre.pods:
            if pod.labels.get(CAN_PREEMPT_LABEL) == "false":
                return (
                    f"{pod.ref} is labelled {CAN_PREEMPT_LABEL}=false (remove the label to let "
                    "it preempt)"
                )
        group_policies = [g.preemption_policy for g in pre.groups if g.preemption_policy]
        if group_policies:
            # The PodGroup's own policy decides; its pods' policies are not looked at.
            never = NEVER in group_policies
        else:
            never = self.cluster.never_preempts(pre.pods) or any(
                self._group_policy(g) == NEVER for g in pre.groups
            )
        if never:
            return (
                "its preemptionPolicy is Never (a PriorityClass with PreemptLowerPriority "
                "lets it preempt)"
            )
        return None

    def _group_policy(self, group: PodGroup) -> str:
        pc = self.state.priority_classes.get(group.priority_class_name)
        return pc.preemption_policy if pc is not None else "PreemptLowerPriority"

    def _own_units(self, pre: Preemptor) -> set[str]:
        own = {g.ref for g in pre.groups}
        for g in pre.groups:
            own.update(p.ref for p in self.cluster.members.get(g.key, []))
        return own | self.promised

    def _decide_single(self, pre: Preemptor) -> Decision:
        pod = pre.pods[0]
        node = fits_now(self.cluster, pod, pre.priority)
        if node is not None:
            return self._decision(
                pre, None, "Fit", ADMIT, [], {pod.ref: node}, f"fits on node {node}"
            )
        refusal, kept = self._may_preempt(pre)
        if refusal is not None:
            return self._decision(
                pre, None, "NoFit", PENDING, [], kept, f"does not fit on any node and {refusal}"
            )
        found, evaluated = search_single(
            self.cluster, self.table, pod, pre.priority, self._own_units(pre), cost=self.cost()
        )
        self.stats["nodes_evaluated"] = evaluated
        if found is None:
            return self._decision(
                pre,
                None,
                "NoFit",
                PENDING,
                [],
                {},
                f"does not fit on any node, and no node would fit it after preempting "
                f"lower-priority pods ({plural(evaluated, 'node')} evaluated): it needs "
                "a node with more room, or a higher priority",
            )
        message = f"preempts {plural(len(found.victims), 'unit')} on node {found.node}" + (
            f" ({found.violations} PDB violations)" if found.violations else ""
        )
        return self._decision(
            pre, None, "Preempt", PREEMPT, found.victims, {pod.ref: found.node}, message
        )

    def _decide_gang(self, pre: Preemptor, quota: JobQuota | None) -> Decision:
        shapes = shapes_of(pre.pods, self.cluster)
        required = self._required(pre, shapes)
        checks: list[Check] = [quota] if quota is not None else []
        quota_units: set[str] = set()
        if quota is not None:
            quota_units = self.table.refs_of(quota.usage)
        capacity: GangCapacity | None = None
        if self._capacity_scheduling():
            ns = pre.pods[0].namespace
            capacity = GangCapacity(self.capacity_quotas(), self.state, ns, pre.demand)
            checks = [capacity]
        search = GangSearch(
            self.table,
            shapes,
            required,
            [],
            checks,
            quota_units,
            self.priority_search,
            nominated=nominated_usage(self.cluster, pre.pods, pre.priority),
        )
        search.use_columns = self.use_columns
        search.rescheduling = self.rescheduling
        search.cost = self.cost()
        topology = next((g.topology_key for g in pre.groups if g.topology_key), "")
        doms = domains(self.cluster.nodes, topology)
        for dom in doms:
            placement = search.fits_without_preemption(dom)
            if placement is not None:
                where = f" in {dom.name}" if topology else ""
                return self._decision(
                    pre,
                    quota,
                    "Fit",
                    ADMIT,
                    [],
                    placement,
                    f"{plural(len(placement), 'pod')} fit on nodes{where} as they are",
                )
        refusal, kept = self._may_preempt(pre)
        if refusal is not None:
            if capacity is not None:
                why = capacity.why_not()
            else:
                why = quota.why_not() if quota is not None else None
            detail = f" ({quota.quota.ref}: {why})" if quota is not None and why else ""
            return self._decision(
                pre,
                quota,
                "NoFit",
                PENDING,
                [],
                kept,
                f"does not fit{detail} and {refusal}",
            )
        search.candidates_below(pre.priority, self._own_units(pre))
        if capacity is not None:
            # CapacityScheduling's namespace rules, read per gang (``GangCapacity``); a
            # gang within its min reclaims whatever the victims' priority.
            within = capacity.has_quota and not capacity.borrowing
            listed = (
                self.table.candidates(ANY_PRIORITY, self._own_units(pre))
                if within
                else search.candidates
            )
            search.candidates = [u for u in listed if capacity.allows(u, pre.priority)]
            search.quota_units = {u.ref for u in search.candidates}
        elif quota is not None and self.quota_view().koordinator:
            # Koordinator's ElasticQuota preemption: victims only from the same quota.
            search.candidates = [
                u for u in search.candidates if all(p.key in quota.usage for p in u.pods)
            ]
        outcomes = [o for o in (search.run(d) for d in doms) if o is not None]
        chosen = best(outcomes, self.now, search.cost)
        self.stats["domains"] = len(doms)
        self.stats["nodes_evaluated"] = len(self.cluster.nodes)
        if search.listed is not None:
            self.stats["candidates"] = search.listed
        if chosen is None:
            detail = "; ".join(search.skipped[:3])
            message = (
                "cannot be placed even after preempting every lower-priority "
                f"candidate{': ' + detail if detail else ''} (it needs more nodes with "
                "room, fewer or smaller pods, or a higher priority)"
            )
            gone = [p.key for u in search.candidates for p in u.pods]
            if checks and not all(c.fits(gone) for c in checks):
                why = capacity.why_not() if capacity is not None else None
                if why is None and quota is not None:
                    why = quota.why_not()
                ref = quota.quota.ref if quota is not None else "its ElasticQuota"
                message = (
                    f"its quota refuses it even with every candidate it may take gone "
                    f"({ref}{': ' + why if why else ''}; in "
                    f"{'CapacityScheduling' if capacity is not None else 'Koordinator'}, "
                    "victims come only from what the quota rules allow)"
                )
            return self._decision(pre, quota, "NoFit", PENDING, [], {}, message)
        where = f" in {chosen.domain}" if topology else ""
        n_pods = sum(len(u.pods) for u in chosen.victims)
        message = (
            f"places {plural(len(chosen.placement), 'pod')}{where} after preempting "
            f"{plural(len(chosen.victims), 'unit')} ({plural(n_pods, 'pod')})"
            + (f"; {chosen.violations} PDB violations" if chosen.violations else "")
        )
        return self._decision(
            pre, quota, "Preempt", PREEMPT, chosen.victims, chosen.placement, message
        )

    def _required(self, pre: Preemptor, shapes: list[Shape]) -> dict[int, int]:
        """Per shape, how many of its pods must be placed: each group's minCount less the
        pods it already runs, taken from its pending pods in name order."""
        if not pre.groups:
            return {i: len(s.pods) for i, s in enumerate(shapes)}
        chosen: set[str] = set()
        for g in pre.groups:
            pending = sorted(
                (p for p in self.cluster.members.get(g.key, []) if p.pending), key=lambda p: p.key
            )
            chosen.update(p.key for p in pending[: self._need(g)])
        required: dict[int, int] = {}
        # Each shape's required pods come first (name order within both halves).
        for i, shape in enumerate(shapes):
            first = [p for p in shape.pods if p.key in chosen]
            shape.pods = first + [p for p in shape.pods if p.key not in chosen]
            required[i] = len(first)
        return required

    def _decision(
        self,
        pre: Preemptor,
        quota: JobQuota | None,
        mode: str,
        outcome: str,
        victims: list[Unit],
        placement: dict[str, str],
        message: str,
    ) -> Decision:
        out = [self._victim(unit) for unit in victims]
        return Decision(
            preemptor=pre.ref,
            queue=quota.quota.ref if quota is not None else "",
            mode=mode,
            outcome=outcome,
            flavors={},
            borrowing=0,
            victims=out,
            placement=dict(sorted(placement.items())),
            message=message,
        )

    def _victim(self, unit: Unit) -> Victim:
        eq = quota_of(self.state, unit.pods[0]) if self.state.elastic_quotas else None
        return Victim(
            object=unit.ref,
            reason=NODE_REASON,
            pods=sorted(p.ref for p in unit.pods),
            queue=eq.ref if eq is not None else "",
            priority=unit.priority,
            evicting=unit.evicting,
        )

    # -- Kueue workloads whose pods are known ---------------------------------------------

    def kueue_pods(self, key: str) -> list[Pod]:
        """The pending pods of Kueue Workload ``namespace/name`` (annotated with it)."""
        keys = self.cluster.kueue_pods.get(key, ())
        pods = (self.state.pods.get(k) for k in keys)
        return sorted(
            (p for p in pods if p is not None and p.kueue_workload == key and p.pending),
            key=lambda p: p.key,
        )

    def place_as_is(self, key: str) -> dict[str, str] | None:
        """Where the pending pods of Kueue Workload ``key`` fit on the nodes as they are
        (nothing preempted), all or none, or None; the room is then taken. What a gang
        admitted on quota alone gets from the scheduler (Kueue without topology-aware
        scheduling)."""
        pods = self.kueue_pods(key)
        if not pods:
            return None
        shapes = shapes_of(pods, self.cluster)
        required = {i: len(s.pods) for i, s in enumerate(shapes)}
        search = GangSearch(self.table, shapes, required, [], priority_search=self.priority_search)
        search.use_columns = self.use_columns
        placement = search.fits_without_preemption(domains(self.cluster.nodes, "")[0])
        if placement is not None:
            placement = dict(sorted(placement.items()))
            self.hold(placement, [])
        return placement

    def compose(self, d: Decision) -> Decision:
        """A Kueue decision (Admit, or Preempt with its quota victims) for a Workload whose
        pods are known, checked on the nodes as well: its pods must be placed once the
        quota victims are gone; when they do not fit, lower-priority units on the nodes
        are preempted too (the gang search, with the quota victims forced). The victim
        set then satisfies both the quota and the nodes; a Workload that cannot be
        placed preempts nothing. Other decisions are returned as they are, and so is one
        with a topology assignment (Kueue's topology-aware scheduling: the assignment says
        where its pods go, and its victims made that room)."""
        if d.outcome not in (ADMIT, PREEMPT) or not d.preemptor.startswith("Workload/"):
            return d
        if d.topology:
            return d
        key = d.preemptor.split("/", 1)[1]
        self._release(d.preemptor)
        wl = self.state.workloads.get(key)
        pods = self.kueue_pods(key)
        if wl is None or not pods:
            return d
        priority = self.state.priority_of(wl)
        forced = [self.table.units[v.object] for v in d.victims if v.object in self.table.units]
        search, cluster = self.kueue_search(pods, forced)
        placement = search.fits_without_preemption(cluster)
        extra: list[Unit] = []
        if placement is None:
            exclude = {u.ref for u in forced} | self.promised | {d.preemptor}
            queue = d.queue.removeprefix("ClusterQueue/")
            search.candidates = self.kueue_node_candidates(priority, queue, exclude)
            found = search.run(cluster)
            if found is None:
                return msgspec.structs.replace(
                    d,
                    outcome=PENDING,
                    victims=[],
                    placement={},
                    message=f"{d.message}; but its {plural(len(pods), 'pod')} cannot be "
                    "placed on the nodes even after preempting every lower-priority "
                    "candidate there: nothing is preempted",
                )
            placement = found.placement
            extra = found.victims[len(forced) :]
        victims = [
            msgspec.structs.replace(v, pods=sorted(p.ref for p in self.table.units[v.object].pods))
            if v.object in self.table.units
            else v
            for v in d.victims
        ]
        victims += [self._victim(u) for u in extra]
        verb = "is" if len(placement) == 1 else "are"
        message = f"{d.message}; its {plural(len(placement), 'pod')} {verb} placed on nodes"
        if extra:
            message += f" after preempting {plural(len(extra), 'more unit')} there"
        return msgspec.structs.replace(
            d,
            outcome=PREEMPT if victims else ADMIT,
            victims=victims,
            placement=dict(sorted(placement.items())),
            message=message,
        )

    def kueue_search(self, pods: list[Pod], forced: Sequence[Unit]) -> tuple[GangSearch, Domain]:
        """The gang search placing a Kueue Workload's pending ``pods`` on the whole
        cluster, with the quota victims ``forced`` gone (candidates to be set)."""
        shapes = shapes_of(pods, self.cluster)
        required = {i: len(s.pods) for i, s in enumerate(shapes)}
        search = GangSearch(
            self.table, shapes, required, [], priority_search=self.priority_search, forced=forced
        )
        search.use_columns = self.use_columns
        search.rescheduling = self.rescheduling
        search.cost = self.cost()
        return search, domains(self.cluster.nodes, "")[0]

    def kueue_node_candidates(
        self, priority: int, queue: str, exclude: Iterable[str]
    ) -> list[Unit]:
        """The units a Workload of ``priority`` in ClusterQueue ``queue`` may take for room
        on the nodes: those below its priority, except ``exclude`` and
        ``kueue_protected(queue)`` (asked of the eligible units only: the same list,
        without walking every unit)."""
        now_ts = self.now.timestamp()
        return [
            u
            for u in self.table.candidates(priority, exclude)
            if not self._kueue_guarded(u.ref, queue, now_ts)
        ]

    def kueue_protected(self, queue: str) -> set[str]:
        """Running Kueue Workloads (unit refs) a Workload of ClusterQueue ``queue`` may not
        take for room on the nodes, as Kueue would not take them at quota level either:
        those preempted within the re-preemption guard (thrashing), and, when the
        borrowing queues are known, those of other ClusterQueues within their nominal
        quota (freeing one hands quota back to a queue that reclaims it at once: the
        victim is evicted, re-admitted and evicted again)."""
        now_ts = self.now.timestamp()
        return {ref for ref in self.table.units if self._kueue_guarded(ref, queue, now_ts)}

    def _kueue_guarded(self, ref: str, queue: str, now_ts: float) -> bool:
        """Is unit ``ref`` one of ``kueue_protected(queue)`` at ``now_ts``?"""
        if not ref.startswith("Workload/"):
            return False
        wl = self.state.workloads.get(ref.removeprefix("Workload/"))
        if wl is None or wl.admission is None:
            return False
        cq = wl.admission.cluster_queue
        borrowing = self.borrowing_queues
        if borrowing is not None and cq != queue and cq not in borrowing:
            return True
        # re-admitted after a preemption within the hour
        return recently_preempted(wl.preempted_ts, now_ts) and not wl.is_evicting

    def hold(self, placement: dict[str, str], victims: Iterable[str]) -> None:
        """A plan in flight (or decided earlier in a pass): its victims are promised to
        it, its pods still pending take their room in the placement (and no longer hold
        a nominated node elsewhere). The victims' room goes to those pods only: what they
        leave over stays taken until they are gone (they terminate first), so nothing
        else is placed where a terminating victim still runs."""
        freed: dict[str, dict[str, int]] = {}
        for ref in victims:
            if ref in self.promised:
                continue
            self.promised.add(ref)
            unit = self.table.units.get(ref)
            for name, taken in self.table.nodes_of.get(ref, []) if unit is not None else []:
                add_into(freed.setdefault(name, {}), taken)
        placed, keys = self._pending_room(placement)
        for key in keys:
            self.cluster.nominated.pop(key, None)
        for node, demand in placed.items():
            room = freed.get(node, {})
            beyond = {r: v - min(v, room.get(r, 0)) for r, v in demand.items()}
            self.cluster.use(node, {r: v for r, v in beyond.items() if v})

    def _pending_room(
        self, placement: dict[str, str]
    ) -> tuple[dict[str, dict[str, int]], list[str]]:
        """What the still-pending pods of ``placement`` take on each of its nodes, and
        those pods' keys."""
        taken: dict[str, dict[str, int]] = {}
        keys: list[str] = []
        for ref, node in placement.items():
            pod = self.state.pods.get(ref.removeprefix("Pod/"))
            if pod is not None and pod.pending and node in self.cluster.by_name:
                add_into(taken.setdefault(node, {}), self.cluster.demand(pod))
                keys.append(pod.key)
        return taken, keys

    def reserve(self, preemptor: str, placement: dict[str, str]) -> None:
        """The room a Kueue preemptor's victims have just left (``placement``: its pods'
        planned nodes) is its own: no other decision of this pass takes it, and its own
        composition (``compose``) finds it free. Without it, a preemptor processed
        before it in the pass could take that room, and the victims would have been
        evicted for nothing."""
        taken, _keys = self._pending_room(placement)
        for node, demand in taken.items():
            self.cluster.use(node, demand)
        if taken:
            self.reserved[preemptor] = taken

    def _release(self, preemptor: str) -> None:
        """Its reserved room is free again, for its own decision."""
        for node, demand in self.reserved.pop(preemptor, {}).items():
            self.cluster.use(node, demand, sign=-1)

    def commit(self, pre: Preemptor, decision: Decision) -> None:
        """Later preemptors see this one's pods on their nodes and its victims gone (a
        waiting one's nominated nodes already count for them as nominations)."""
        if decision.outcome in (ADMIT, PREEMPT):
            self.hold(decision.placement, [v.object for v in decision.victims])


def with_nodes(planner: NodePlanner, decisions: list[Decision]) -> list[Decision]:
    """Kueue decisions composed with the nodes (``compose``), each holding its placement
    and victims for the ones after it."""
    out = []
    for d in decisions:
        d = planner.compose(d)
        if d.outcome in (ADMIT, PREEMPT):
            planner.hold(d.placement, [v.object for v in d.victims])
        out.append(d)
    return out


def node_decisions(planner: NodePlanner) -> list[Decision]:
    """Every pending preemptor in queue order, each seeing the ones before it."""
    out = []
    for pre in planner.pending():
        d = planner.decide(pre)
        planner.commit(pre, d)
        out.append(d)
    return out


__all__ = [
    "NODE_REASON",
    "NodePlanner",
    "Preemptor",
    "is_node_level",
    "node_decisions",
    "with_nodes",
]
