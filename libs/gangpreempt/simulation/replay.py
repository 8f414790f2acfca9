"""The replay: a discrete-event simulation, in virtual time, of a trace's jobs arriving,
being admitted, preempted and finishing, under one preemption policy.

Every decision is the core's, called as the services call it:

- ``gangpreempt``: each cycle is the quota service's (``quotacycle.cycle_decisions`` on
  the live ledger and node index, the plans in flight held in both); a Preempt is
  confirmed as quota confirms it (``inflight.rejection`` and ``nodeconfirm``), checked by
  the actuator's barrier (``barrier.stale_reason``) and only then actuated; the victims
  terminate for the termination delay, and once they are gone the plan ends and the
  preemptor is admitted by the next cycle, at the room its plan held.
- ``gang-unconfirmed``: Kueue on quota alone (``cycle_decisions`` without the nodes):
  victims chosen by quota are evicted at once, before any placement is known; a
  workload whose quota is reserved waits for its pods to fit on the nodes as they are
  (``NodePlanner.place_as_is``), holding its quota meanwhile.
- ``pod-immediate``: no Kueue and no gangs: every pod is a lone pod, scheduled and
  preempting on its own node (kube-scheduler's DefaultPreemption, ``NodePlanner``) as
  soon as it is unschedulable, nominated there while its victims terminate. A job runs
  once all its pods are bound; one of its pods evicted ends the job (its other pods are
  deleted with it: the gang is broken) and it starts again from its last checkpoint.
- ``no-preemption``: as ``gangpreempt``, with the ClusterQueues' preemption off and no
  Preempt acted on.
- ``optimal-victims``: as ``gangpreempt``, but each plan's victims are replaced by the set
  of least lost work that makes room as the cluster is when it is actuated
  (``optimum.solve``, exact, so slow: for small windows), placed where the solver puts
  the pods.

A disruption budget (``Settings.disruption_budget``, ``planning.budget``) binds the two
policies that preempt through gangpreempt's plans (``gangpreempt``, ``optimal-victims``),
as the quota service applies it: checked when a preemption would be requested (against
what was charged before the pass: a held preemptor does not preempt, holds nothing, and
is logged ``held`` the first time), checked again and charged when its plan is
confirmed (so two plans of one pass cannot both take the last of it), released when the
actuator's barrier drops the plan before it evicts anything; the replay wakes when the
held scope's next charge leaves the window.

The cycle runs at most every ``cycle_s`` of virtual time, after the events (arrivals,
completions, victims gone) up to it. Workloads Kueue would park as inadmissible are not
evaluated again while they provably stay Pending (``planning.parking``, as the quota
service can); likewise a pod or a reserved gang that no node could take (``podroom``).
Both are exact: the replay's decisions are the same without them (``park=False``).
A job's work is saved every ``checkpoint_interval_s`` of its run; an evicted job keeps
the work up to its last checkpoint and loses the rest (``outcomes``). Nothing here does
I/O: the log of records is the result."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

import msgspec

from gangpreempt.errors import InvalidInput
from gangpreempt.manifests import load
from gangpreempt.model import kinds
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.planning.barrier import PlannedObject, live_object, stale_reason
from gangpreempt.planning.budget import Budget, Charge, Spending, plan_cost, scope_key
from gangpreempt.planning.deciding import Evaluation
from gangpreempt.planning.decisions import ADMIT, PENDING, PREEMPT, Decision, Victim
from gangpreempt.planning.inflight import PlanInFlight, rejection
from gangpreempt.planning.nodeconfirm import NodeVictim, victim_rejection
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.planning.nodeplan import NodePlanner, Preemptor
from gangpreempt.planning.parking import Parking
from gangpreempt.planning.quotacycle import cycle_decisions
from gangpreempt.quota.ledger import Ledger
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import cq_available
from gangpreempt.simulation.jobstate import JobObjects, index_of, job_of, placement_of
from gangpreempt.simulation.optimum import LOST_GPU_HOURS, Problem, solve
from gangpreempt.simulation.outcomes import (
    ARRIVED,
    EVICTED,
    FINISHED,
    GONE,
    HELD,
    STARTED,
    Record,
)
from gangpreempt.simulation.podroom import PodRoom
from gangpreempt.simulation.problems import PassView
from gangpreempt.simulation.queueconfig import QueueConfig, install
from gangpreempt.simulation.trace import Job
from gangpreempt.simulation.world import GPU, NAMESPACE, cluster_objects

GANGPREEMPT = "gangpreempt"
POD_IMMEDIATE = "pod-immediate"
GANG_UNCONFIRMED = "gang-unconfirmed"
NO_PREEMPTION = "no-preemption"
OPTIMAL_VICTIMS = "optimal-victims"
POLICIES = (GANGPREEMPT, POD_IMMEDIATE, GANG_UNCONFIRMED, NO_PREEMPTION, OPTIMAL_VICTIMS)
# the policies whose preemptions are gangpreempt's plans: the disruption budget binds them
BUDGETED = (GANGPREEMPT, OPTIMAL_VICTIMS)

# event kinds, in the order they are taken at the same instant
# _WAKE: a minimum runtime ends, or a disruption-budget charge leaves its window (a cycle then)
_GONE, _FINISH, _ARRIVE, _WAKE = 0, 1, 2, 3


class Settings(msgspec.Struct, frozen=True):
    nodes: int
    gpus_per_node: int
    quotas: dict[str, int]
    origin: datetime  # virtual time 0
    checkpoint_interval_s: float = 1800.0
    termination_delay_s: float = 30.0
    cycle_s: float = 10.0
    victim_cost: str = ""  # "" (Kueue's order) or "lost-gpu-hours" (gangpreempt's opt-in)
    min_runtime_s: float = 0.0  # a minimum runtime every ClusterQueue gives (0: none)
    # the cluster-wide disruption budget (``planning.budget``) on the BUDGETED policies
    disruption_budget: Budget | None = None
    # the operator's Kueue configuration (``simulate --queues FILE``); None: one cohort of
    # one ClusterQueue per trace queue, ``quotas`` their nominal GPUs (``world``)
    queue_config: QueueConfig | None = None


class Stats(msgspec.Struct):
    cycles: int = 0
    decisions: int = 0  # decisions the core made (admission pass and node planner)
    preemptions: int = 0  # plans actuated (or pods preempting, pod-immediate)
    rejected: int = 0  # plans the confirmation or the barrier refused
    budget_held: int = 0  # times the disruption budget held a preemption back (either check)
    seconds: float = 0.0  # wall-clock time of the run
    end_s: float = 0.0  # virtual time of the last event
    parked: int = 0  # decisions given without a search: parked workloads, pods and gangs


class Replay:
    """One policy's replay of ``jobs`` (arrival order) on the cluster of ``settings``.

    ``park``: Kueue's parking of inadmissible workloads (``planning.parking``) and the
    same for pods and reserved gangs that cannot be placed (``podroom``); both exact, so
    off only to check that they are."""

    def __init__(
        self, policy: str, jobs: Sequence[Job], settings: Settings, park: bool = True
    ) -> None:
        if policy not in POLICIES:
            raise InvalidInput(f"--policy {policy!r}: expected one of {', '.join(POLICIES)}")
        self.policy = policy
        self.settings = settings
        self.kueue = policy != POD_IMMEDIATE
        config = settings.queue_config
        objects = cluster_objects(
            settings.quotas if self.kueue and config is None else {},
            settings.nodes,
            settings.gpus_per_node,
            preemption=policy != NO_PREEMPTION,
            min_runtime_s=settings.min_runtime_s,
        )
        self.state: ClusterState = load([], objects, "replay").state
        if self.kueue and config is not None:
            install(
                self.state,
                config,
                preemption=policy != NO_PREEMPTION,
                min_runtime_s=settings.min_runtime_s,
            )
        self.origin = settings.origin
        self.now = settings.origin
        self.ledger = Ledger(self.state, self.now) if self.kueue else None
        # Kueue's inadmissible workloads, not evaluated again until they may be admitted
        self.parking = Parking(self.state) if self.kueue and park else None
        self.park = park
        # The nodes' room by priority: pods (pod-immediate) and gangs (gang-unconfirmed)
        # that cannot be placed are not searched again while it says so.
        self.room = PodRoom(
            {n.name: int(n.allocatable.get(GPU, 0)) for n in self.state.nodes.values()}, GPU
        )
        self.pod_standing: dict[str, Decision] = {}  # a pending pod's last Pending decision
        self.stood_in = 0  # pods and reserved gangs not searched again (parked)
        self.index = NodeIndex(self.state, settings.victim_cost)
        # preemptor ref -> its placement, for the plans that ended at this cycle's settle
        self._freed: dict[str, dict[str, str]] = {}
        self.index.build(self.now)
        self.jobs = {j.job_id: j for j in jobs}
        # trace queue -> its ClusterQueue (the same name but for an operator's configuration)
        self.cluster_queue = dict(config.queue_map) if config is not None else {}
        self.objects: dict[str, JobObjects] = {}
        self.remaining: dict[str, float] = {}  # work left, seconds
        self.running_since: dict[str, float] = {}  # started jobs: since when
        self.evicting: set[str] = set()  # jobs whose evicted pods are terminating
        self.reserved: list[str] = []  # gang-unconfirmed: quota reserved, pods waiting
        self.flights: dict[str, _Flight] = {}  # preemptor job -> its plan in flight
        self.log: list[Record] = []
        self.stats = Stats()
        self.decisions_seen: list[tuple[float, list[Decision]]] | None = None  # for tests
        # gangpreempt's Preempt decisions as victim-selection problems, with its victims
        self.problems: list[tuple[Problem, tuple[str, ...]]] | None = (
            [] if policy == GANGPREEMPT else None
        )
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._plans = 0
        budget = settings.disruption_budget
        # what each scope spent of the disruption budget (the quota service's ``Budgeting``)
        self.spending = Spending(budget) if budget is not None and policy in BUDGETED else None
        self._held_once: set[tuple[str, int]] = set()  # (preemptor job, incarnation) held
        self._wakes: set[float] = set()  # budget wake-ups pushed
        for j in jobs:
            self._push(float(j.submit_s), _ARRIVE, j.job_id, 0)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, progress: Callable[[float], None] | None = None) -> list[Record]:
        started = time.perf_counter()
        cycle = self.settings.cycle_s
        last_report = 0
        while self._heap:
            first = self._heap[0][0]
            slot = math.ceil(first / cycle) * cycle if cycle > 0 else first
            while self._heap and self._heap[0][0] <= slot:
                at, kind, _seq, job, incarnation = heapq.heappop(self._heap)
                self._take(at, kind, job, incarnation)
            self.now = self.origin + timedelta(seconds=slot)
            self._cycle(slot)
            self.stats.cycles += 1
            self.stats.end_s = slot
            if progress is not None and self.stats.cycles - last_report >= 50:
                last_report = self.stats.cycles
                progress(slot)
        self.stats.seconds = time.perf_counter() - started
        self.stats.parked = self.stood_in + (self.parking.stood_in if self.parking else 0)
        if progress is not None:
            progress(self.stats.end_s)
        return self.log

    def _push(self, at: float, kind: int, job: str, incarnation: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, job, incarnation))

    def _take(self, at: float, kind: int, job: str, incarnation: int) -> None:
        self.now = self.origin + timedelta(seconds=at)
        if kind == _ARRIVE:
            self._arrive(at, self.jobs[job])
        elif kind == _FINISH:
            objs = self.objects.get(job)
            if objs is not None and objs.incarnation == incarnation and job in self.running_since:
                self._finish(at, job)
        elif kind == _GONE:
            objs = self.objects.get(job)
            if objs is not None and objs.incarnation == incarnation:
                self._gone(at, job)

    # -- state changes -------------------------------------------------------------------------
    def _put(self, kind: str, new: object) -> None:
        old = kinds.get(self.state, kind, kinds.key_of(new))
        kinds.put(self.state, new)
        self._changed(kind, old, new)

    def _remove(self, kind: str, key: str) -> None:
        old = kinds.remove(self.state, kind, key)
        if old is not None:
            self._changed(kind, old, None)

    def _changed(self, kind: str, old: object, new: object) -> None:
        if self.ledger is not None:
            self.ledger.changed(kind, old, new)
        if self.parking is not None:
            self.parking.changed(kind, old, new)
        if kind == "Pod":
            self.room.changed(old, new)  # type: ignore[arg-type]
        self.index.changed(kind, old, new)

    def _arrive(self, at: float, job: Job) -> None:
        interval = int(self.settings.checkpoint_interval_s) or None
        objs = JobObjects(job, self.now, self.kueue, interval)
        self.objects[job.job_id] = objs
        self.remaining[job.job_id] = float(job.duration_s)
        if objs.workload is not None:
            self._put("Workload", objs.workload)
        for pod in objs.pods:
            self._put("Pod", pod)
        queue = self.cluster_queue.get(job.queue, job.queue)
        self.log.append(Record(at, ARRIVED, job.job_id, priority=job.priority, queue=queue))

    def _start(self, at: float, job: str) -> None:
        self.running_since[job] = at
        self.log.append(Record(at, STARTED, job, gpus=self.jobs[job].gpus))
        objs = self.objects[job]
        self._push(at + self.remaining[job], _FINISH, job, objs.incarnation)
        if self.settings.min_runtime_s > 0:
            # nothing in the state changes when its window ends: a cycle must look then
            self._push(at + self.settings.min_runtime_s, _WAKE, job, objs.incarnation)

    def _finish(self, at: float, job: str) -> None:
        self.running_since.pop(job, None)
        objs = self.objects.pop(job)
        self.log.append(Record(at, FINISHED, job))
        if objs.workload is not None:
            self._remove("Workload", objs.workload.key)
        for pod in objs.pods:
            self._remove("Pod", pod.key)

    def _admit(self, at: float, job: str, d: Decision) -> None:
        """Kueue admitted the job (``d``: to its ClusterQueue, in the flavors assigned):
        its Workload, and its pods bound at the decision's placement (none under
        ``gang-unconfirmed``: they wait for room)."""
        objs = self.objects[job]
        queue = d.queue.removeprefix("ClusterQueue/")
        self._put("Workload", objs.admitted(self.now, queue, d.flavors))
        placement = placement_of(d.placement)
        if placement:
            self._bind(at, job, placement)
        else:
            self.reserved.append(job)

    def _bind(self, at: float, job: str, placement: dict[int, str]) -> None:
        objs = self.objects[job]
        for i, node in sorted(placement.items()):
            self._put("Pod", objs.bound(i, node, self.now))
        if all(p.node_name for p in objs.pods) and job not in self.running_since:
            self._start(at, job)

    def _evict(self, at: float, job: str, preemptor: str, pods: Iterable[int]) -> None:
        """``pods`` of the job evicted for ``preemptor``; a started gang loses every pod
        (its other pods are deleted with it), a job not started only those."""
        objs = self.objects[job]
        evicted = sorted(set(pods))
        self.log.append(
            Record(
                at,
                EVICTED,
                job,
                gpus=sum(self.jobs[job].pods[i] for i in evicted),
                preemptor=preemptor,
                pods=len(evicted),
                of_pods=len(objs.pods),
            )
        )
        if job in self.running_since:
            ran = at - self.running_since.pop(job)
            interval = self.settings.checkpoint_interval_s
            kept = ran - (ran % interval) if interval > 0 else 0.0
            self.remaining[job] = max(0.0, self.remaining[job] - kept)
            evicted = [i for i, p in enumerate(objs.pods) if p.node_name]  # the whole gang
        if objs.workload is not None and objs.workload.holds_quota:
            self._put("Workload", objs.evicting(self.now))
        if job in self.reserved:
            self.reserved.remove(job)
        for i in evicted:
            if objs.pods[i].node_name and not objs.pods[i].terminating:
                self._put("Pod", objs.terminating(i))
        self.evicting.add(job)
        incarnation = objs.incarnation
        self._push(at + self.settings.termination_delay_s, _GONE, job, incarnation)

    def _gone(self, at: float, job: str) -> None:
        """The evicted pods have terminated: recreated unbound; the Workload requeued."""
        objs = self.objects[job]
        self.log.append(Record(at, GONE, job))
        self.evicting.discard(job)
        for i, pod in enumerate(objs.pods):
            if pod.terminating:
                self._put("Pod", objs.recreated(i))
        if objs.workload is not None and objs.workload.holds_quota:
            self._put("Workload", objs.requeued())

    # -- the cycle -----------------------------------------------------------------------------
    def _cycle(self, at: float) -> None:
        if self.policy == POD_IMMEDIATE:
            self._pod_cycle(at)
        else:
            self._kueue_cycle(at)

    def _settle(self) -> frozenset[str]:
        """Plans whose victims have all left end: their holds go (the quota service's
        ``settle_flights``); their preemptors are evaluated first in the next pass, the
        room planned for them reserved to them (``NodePlanner.reserve``)."""
        ended = set()
        self._freed.clear()
        for preemptor, flight in list(self.flights.items()):
            if all(v not in self.evicting for v in flight.victim_jobs):
                self._end(preemptor)
                ended.add(flight.plan.preemptor)
                self._freed[f"Workload/{flight.plan.preemptor}"] = flight.placement
        return frozenset(ended)

    def _end(self, preemptor: str) -> None:
        flight = self.flights.pop(preemptor)
        assert self.ledger is not None
        self.ledger.unhold(flight.plan.plan_id)

    def _planner(self) -> NodePlanner:
        planner = self.index.planner(self.now)
        for flight in self.flights.values():
            planner.hold(flight.placement, flight.victim_refs)
        for ref, placement in self._freed.items():
            planner.reserve(ref, placement)
        return planner

    def _kueue_cycle(self, at: float) -> None:
        assert self.ledger is not None
        first = self._settle()
        snapshot = self.ledger.current(self.now)
        snapshot.victim_cost = self.settings.victim_cost
        quota_only = self.policy == GANG_UNCONFIRMED
        waiting = frozenset(f"{NAMESPACE}/{job}" for job in self.flights)
        planner = None if quota_only else self._planner()
        available: dict[str, int] = {}

        def observe(ev: Evaluation, snap: Snapshot) -> None:
            # the GPUs of every flavor (one flavor but for an operator's configuration)
            node = ev.cq.node
            available[ev.pending.ref] = sum(
                cq_available(node, fr) for fr in node.subtree_quota if fr[1] == GPU
            )

        watch = observe if self.problems is not None else None
        decisions = cycle_decisions(snapshot, waiting, planner, first, watch, self.parking)
        self.stats.decisions += len(decisions)
        if self.decisions_seen is not None:
            self.decisions_seen.append((at, decisions))
        # The disruption budget, before a preemption is requested: against what was
        # charged before this pass (as quota's cycle, whose charges come at confirmation).
        held: set[str] = set()
        if self.spending is not None and any(d.outcome == PREEMPT for d in decisions):
            self.spending.forget(self._at(at))
            for d in decisions:
                if d.outcome == PREEMPT and self._budget(at, snapshot, d)[2] is not None:
                    held.add(d.preemptor)
        if self.problems is not None and any(d.outcome == PREEMPT for d in decisions):
            view = self._view(snapshot)
            for d in decisions:
                if d.outcome == PREEMPT and d.preemptor not in held:
                    ours = tuple(sorted(v.object for v in d.victims))
                    self.problems.append((view.problem(d, available.get(d.preemptor)), ours))
                view.apply(d)
        preempting = []
        for d in decisions:
            if d.outcome == ADMIT:
                self._admit(at, job_of(d.preemptor), d)
            elif d.outcome == PREEMPT and self.policy != NO_PREEMPTION and d.preemptor not in held:
                preempting.append(d)  # held: it waits, holding nothing
        for d in preempting:
            self._preempt(at, d)
        if quota_only:
            self._place_reserved(at)

    def _budget(
        self, at: float, snapshot: Snapshot, d: Decision, plan_id: str = ""
    ) -> tuple[str, float, str | None]:
        """The disruption budget on the preemption ``d``: its scope, its cost and why it
        must wait (None: it may go). Held, it is logged the first time (per incarnation)
        and the replay wakes when the scope's next charge leaves the window. ``plan_id``:
        the check at confirmation, the plan's own charge left out."""
        assert self.spending is not None
        budget = self.spending.budget
        scope = scope_key(budget, snapshot, d.queue)
        cost = plan_cost(budget, snapshot, ((v.object, v.pods) for v in d.victims), self.now)
        wl = self.state.workloads[d.preemptor.removeprefix("Workload/")]
        priority = self.state.priority_of(wl)
        now_ts = self._at(at)
        reason = self.spending.held(scope, cost, priority, now_ts, but=plan_id)
        if reason is None:
            return scope, cost, None
        self.stats.budget_held += 1
        job = job_of(d.preemptor)
        episode = (job, self.objects[job].incarnation)
        if episode not in self._held_once:
            self._held_once.add(episode)
            self.log.append(Record(at, HELD, job, priority=priority))
        release = self.spending.next_release(scope, now_ts, but=plan_id)
        if release is not None:
            wake = release - self.origin.timestamp()
            if wake <= at:  # never the same instant again (rounding)
                wake = at + (self.settings.cycle_s or 1.0)
            if wake not in self._wakes:
                self._wakes.add(wake)
                self._push(wake, _WAKE, "", 0)
        return scope, cost, reason

    def _view(self, snapshot: Snapshot) -> PassView:
        """Room and quota now, with the plans in flight held (``problems``)."""
        return PassView(
            self.state,
            self.settings.gpus_per_node,
            [(f.placement, f.victim_refs) for f in self.flights.values()],
            now_s=self.now.timestamp(),
            running_since={j: self._at(t) for j, t in self.running_since.items()},
            checkpoint_interval_s=self.settings.checkpoint_interval_s,
            nominal=dict(self.settings.quotas),
            usage={
                name: sum(used for (_, resource), used in cq.node.usage.items() if resource == GPU)
                for name, cq in snapshot.cqs.items()
            },
        )

    def _at(self, replay_s: float) -> float:
        """Replay seconds -> a POSIX timestamp."""
        return self.origin.timestamp() + replay_s

    def _optimal(self, d: Decision) -> Decision:
        """optimal-victims: the victims of least lost work that make room as the cluster
        is now (placed where the solver puts the pods), or the core's when none."""
        assert self.ledger is not None
        problem = self._view(self.ledger.current(self.now)).problem(d)
        solution = solve(problem, LOST_GPU_HOURS)
        if solution is None:
            return d
        pods = sorted(d.placement)
        victims = [
            Victim(ref, "LeastLostWork", pods=sorted(p.ref for p in self._kueue_pods(ref)))
            for ref in solution.victims
        ]
        placement = {pods[i]: node for i, node in solution.placement.items()}
        return msgspec.structs.replace(d, victims=victims, placement=placement)

    def _kueue_pods(self, ref: str) -> list[Pod]:
        objs = self.objects.get(job_of(ref))
        return list(objs.pods) if objs is not None else []

    def _preempt(self, at: float, d: Decision) -> None:
        """Confirm the plan as quota does, check it as the actuator does, then evict."""
        assert self.ledger is not None
        if self.policy == OPTIMAL_VICTIMS:
            d = self._optimal(d)
        job = job_of(d.preemptor)
        self._plans += 1
        plan = PlanInFlight(
            plan_id=f"plan-{self._plans}",
            preemptor=f"{NAMESPACE}/{job}",
            cluster_queue=d.queue.removeprefix("ClusterQueue/"),
            flavors=d.flavors,
            victims=tuple(
                v.object.split("/", 1)[1] for v in d.victims if v.object.startswith("Workload/")
            ),
        )
        wl = self.state.workloads[plan.preemptor]
        uids = {k: self.state.workloads[k].uid for k in plan.victims if k in self.state.workloads}
        claimed = {v: f.plan.plan_id for f in self.flights.values() for v in f.victim_refs}
        snapshot = self.ledger.current(self.now)
        reason = rejection(snapshot, plan, wl.uid, uids, self.ledger.held_victims)
        if reason is None and d.placement:
            node_victims = [NodeVictim(v.object, "", tuple(v.pods)) for v in d.victims if v.pods]
            reason = victim_rejection(self.state, plan.plan_id, node_victims, claimed)
        charged = False
        if reason is None and self.spending is not None:
            # quota's confirmation: the budget checked again, the plan charged if it may go
            scope, cost, reason = self._budget(at, snapshot, d, plan.plan_id)
            if reason is None:
                self.spending.charge(Charge(plan.plan_id, scope, cost, self._at(at)))
                charged = True
        if reason is None:
            planned = [_planned(self.state, v.object, v.pods) for v in d.victims]
            live = {
                ref: live_object(ref, self.state)
                for ref in {d.preemptor, *(v.object for v in d.victims)}
                | {p for v in d.victims for p in v.pods}
            }
            reason = stale_reason(PlannedObject(d.preemptor, wl.uid, ""), planned, live)
        if reason is not None:
            if charged:  # dropped by the barrier before anything was evicted
                assert self.spending is not None
                self.spending.release(plan.plan_id)
            self.stats.rejected += 1
            return
        self.ledger.hold(plan)
        victim_jobs = sorted({job_of(v.object) for v in d.victims})
        self.flights[job] = _Flight(
            plan, dict(d.placement), [v.object for v in d.victims], victim_jobs
        )
        self.stats.preemptions += 1
        for victim in victim_jobs:
            objs = self.objects[victim]
            self._evict(at, victim, job, range(len(objs.pods)))

    def _place_reserved(self, at: float) -> None:
        """gang-unconfirmed: workloads holding quota place their pods where they fit as
        the nodes are, in the order they were admitted."""
        if not self.reserved:
            return
        planner = self.index.planner(self.now)
        for job in list(self.reserved):
            objs = self.objects[job]
            sizes = [self.jobs[job].pods[i] for i, p in enumerate(objs.pods) if p.pending]
            if self.park and self.room.cannot_place(sizes):
                self.stood_in += 1
                continue  # the same answer as place_as_is, without the search
            placement = planner.place_as_is(f"{NAMESPACE}/{job}")
            if placement is not None:
                self.reserved.remove(job)
                self._bind(at, job, placement_of(placement))

    def _pod_cycle(self, at: float) -> None:
        """pod-immediate: every pending pod in kube-scheduler's queue order, each decided
        on its own and bound or preempting at once."""
        planner = self.index.planner(self.now)
        pending = planner.pending()
        self.stats.decisions += len(pending)
        decided = []
        most_free: dict[int, int] = {}
        for pre in pending:
            d = self._parked_pod(pre, most_free)
            if d is None:
                d = planner.decide(pre)
                planner.commit(pre, d)
                if d.outcome == PENDING and not d.placement:
                    self.pod_standing[pre.ref] = d
                else:
                    self.pod_standing.pop(pre.ref, None)
            decided.append(d)
        if self.decisions_seen is not None:
            self.decisions_seen.append((at, decided))
        for d in decided:
            ref = d.preemptor
            job = job_of(ref)
            if job not in self.objects:
                continue  # its gang broke earlier in this cycle and is gone
            objs = self.objects[job]
            i = index_of(ref)
            if objs.pods[i].node_name:
                continue  # bound already
            if d.outcome == ADMIT:
                self._bind(at, job, {i: d.placement[ref]})
            elif d.outcome == PREEMPT:
                self.stats.preemptions += 1
                node = d.placement.get(ref, "")
                if node:
                    self._put("Pod", objs.nominated(i, node))
                by_job: dict[str, list[int]] = {}
                for v in d.victims:
                    by_job.setdefault(job_of(v.object), []).append(index_of(v.object))
                for victim, pods in sorted(by_job.items()):
                    victim_objs = self.objects.get(victim)
                    if victim_objs is None or all(
                        victim_objs.pods[p].terminating or not victim_objs.pods[p].node_name
                        for p in pods
                    ):
                        continue
                    self._evict(at, victim, job, pods)

    def _parked_pod(self, pre: Preemptor, most_free: dict[int, int]) -> Decision | None:
        """pod-immediate: a lone pod's standing Pending decision, when no node could hold
        it even with every lower-priority pod gone and it is nominated to none (the
        planner would find neither room nor victims, and commit nothing); None: decide
        it."""
        standing = self.pod_standing.get(pre.ref)
        if not self.park or standing is None or pre.is_gang or len(pre.pods) != 1:
            return None
        if pre.pods[0].nominated_node:
            # kube-scheduler waits for the pods terminating on a pod's nominated node, as
            # long as there are some: that decision (nominations kept) is not the standing one
            return None
        gpus = int(pre.pods[0].requests.get(GPU, 0))
        if pre.priority not in most_free:
            most_free[pre.priority] = self.room.most_free(pre.priority)
        if gpus <= most_free[pre.priority]:
            return None
        self.stood_in += 1
        return standing


class _Flight(msgspec.Struct):
    plan: PlanInFlight
    placement: dict[str, str]
    victim_refs: list[str]
    victim_jobs: list[str]


def _planned(state: ClusterState, ref: str, pods: Sequence[str]) -> PlannedObject:
    """A victim as the plan names it: the incarnation the decision saw."""
    live = live_object(ref, state)
    uids = tuple(
        state.pods[p.split("/", 1)[1]].uid for p in pods if p.split("/", 1)[1] in state.pods
    )
    return PlannedObject(ref, live.uid, live.resource_version, tuple(pods), uids)


__all__ = [
    "BUDGETED",
    "GANGPREEMPT",
    "GANG_UNCONFIRMED",
    "NO_PREEMPTION",
    "OPTIMAL_VICTIMS",
    "POD_IMMEDIATE",
    "POLICIES",
    "Replay",
    "Settings",
    "Stats",
]
