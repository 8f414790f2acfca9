"""quota: the quota ledger and the admission cycle.

It rebuilds the cluster state from STATE, runs admission cycles with the core on every
change, and publishes ``Admitted`` / ``Pending`` / ``PreemptionRequested``. It confirms or
rejects proposed plans against the live ledger and the plans in flight. While a
preemptor has a plan in flight (requested, confirmed, or its victims terminating), no
new plan is requested for it, and the quota its victims free is held for it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import structlog

from gangpreempt import events
from gangpreempt.bus.consuming import Delivery
from gangpreempt.errors import InvalidInput
from gangpreempt.planning import admission_pass
from gangpreempt.planning.inflight import PlanInFlight, rejection
from gangpreempt.planning.nodeplan import NodePlanner, is_node_level, with_nodes
from services.livestate import LiveState, key_of
from services.quota.flights import ACTUATED, CONFIRMED, Flight, Flights
from services.quota.nodes import NodeBook, is_node_ref, node_events, pod_gone
from services.runtime import ServiceContext, sleep_or_stop

log = structlog.get_logger("gangpreempt.quota")
BURST_WAITS = 4


def kueue_victims(d: Any) -> set[str]:
    """The Kueue Workloads (``namespace/name``) among a decision's victims."""
    return {key_of(v.object) for v in d.victims if v.object.startswith("Workload/")}


class Quota:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.live = LiveState(ctx, "quota", on_change=self.on_state_change)
        self.replica = self.live.replica
        self.flights = Flights(on_end=self.flight_ended)
        self.nodes = NodeBook()
        self.dirty = asyncio.Event()
        self.changes = 0  # state changes applied, to tell a burst that is still arriving
        self.published: dict[str, tuple[str, ...]] = {}  # workload -> last decision signature
        self.counter = itertools.count(1)
        self.instance = f"{os.getpid()}-{int(asyncio.get_running_loop().time() * 1000)}"
        self.consumer = ctx.decisions_consumer(
            [
                ctx.topology.event_subject(t)
                for t in (
                    events.PlanProposed,
                    events.PreemptionInfeasible,
                    events.PlanDropped,
                    events.PlanActuated,
                )
            ],
            self.on_event,
            concurrency=16,
        )

    def flight_ended(self, preemptor: str, flight: Flight) -> None:
        if flight.plan is not None and self.live.ledger is not None:
            self.live.ledger.unhold(flight.plan.plan_id)
        self.nodes.end(preemptor)  # its placement and node victims are no longer held

    def on_state_change(self, kind: str, old: Any, new: Any) -> None:
        self.changes += 1
        if kind == "Workload" and new is None and old is not None:
            self.published.pop(old.key, None)  # forget it: a new one may reuse the name
            self.flights.failed_at.pop(old.key, None)
            self.flights.end(old.key)
        if kind == "Pod" and new is None and old is not None:
            pod_gone(self.replica.state, old, self.published, self.flights)
        self.dirty.set()

    # -- the admission cycle -----------------------------------------------------------------
    async def cycles(self) -> None:
        while not self.ctx.stop.is_set():
            waiter = asyncio.ensure_future(self.dirty.wait())
            stopper = asyncio.ensure_future(self.ctx.stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if self.ctx.stop.is_set():
                return
            await self.settle_burst()
            self.dirty.clear()
            await self.cycle()

    async def settle_burst(self) -> None:
        """Gather the changes of a burst (a manifest applied, a relist): wait one cycle
        delay, and again while changes keep coming, up to BURST_WAITS delays, so a cycle
        does not decide on half of what is arriving."""
        delay = self.ctx.settings.cycle_delay
        for _ in range(BURST_WAITS):
            seen = self.changes
            if await sleep_or_stop(self.ctx.stop, delay) or self.changes == seen:
                return

    def settle_flights(self) -> None:
        """Forget flights whose preemptor is gone or admitted, and holds whose victims
        have all left (the preemptor is then evaluated normally: its quota is free)."""
        state = self.replica.state
        self.nodes.settle(state, self.flights)
        for key, flight in list(self.flights.by_preemptor.items()):
            if is_node_ref(key):
                continue
            wl = state.workloads.get(key)
            if wl is None or not wl.is_pending:
                self.flights.end(key)
                continue
            if (
                flight.status == ACTUATED
                and flight.plan is not None
                and all(
                    (v := state.workloads.get(victim)) is None or not v.holds_quota
                    for victim in flight.plan.victims
                )
                and self.nodes.victims_gone(state, key)
            ):
                self.flights.end(key)

    async def cycle(self) -> None:
        state, now, seq = self.replica.state, self.ctx.now(), self.replica.seq
        self.settle_flights()
        snapshot = self.live.snapshot(now)  # plans in flight are held in it
        with snapshot.scratch():  # nothing awaits in here: the replica cannot interleave
            decisions = admission_pass(snapshot, self.flights.waiting())
        planner: NodePlanner | None = None
        if state.pods:
            try:
                planner = self.nodes.planner(state, now)
                decisions = with_nodes(planner, decisions)  # Kueue workloads with pods
            except InvalidInput as exc:  # e.g. a pod whose PriorityClass is not here yet
                log.warning("node-level decisions skipped until the state changes", error=str(exc))
                planner = None
        assert self.live.ledger is not None
        # victims of the plans in flight: Kueue workloads by key, node-level units by ref
        claimed = set(self.live.ledger.held_victims) | set(self.nodes.claimed())
        outbox: list[events.Event] = []
        for d in decisions:
            key = key_of(d.preemptor)
            wl = state.workloads[key]
            if d.outcome == "Admit":
                if self.fresh(key, ("Admit", wl.resource_version)):
                    outbox.append(self.admitted(d, wl))
            elif d.outcome == "Preempt":
                if not self.flights.may_request(key, seq):
                    claimed |= kueue_victims(d)
                    continue
                request_id = f"{self.instance}-{next(self.counter)}"
                self.flights.start(key, request_id)
                self.published.pop(key, None)
                outbox.append(
                    events.PreemptionRequested(
                        id=request_id,
                        occurred_at=now,
                        request_id=request_id,
                        workload=d.preemptor,
                        uid=wl.uid,
                        resource_version=wl.resource_version,
                        cluster_queue=d.queue.removeprefix("ClusterQueue/"),
                        priority=state.priority_of(wl),
                        flavors=d.flavors,
                        claimed=tuple(sorted(claimed)),
                        state_seq=seq,
                    )
                )
                claimed |= kueue_victims(d)
                log.info("preemption requested", workload=d.preemptor, request_id=request_id)
            elif self.fresh(key, ("Pending", wl.resource_version, d.message)):
                outbox.append(
                    events.Pending(
                        id=events.stable_id("pending", key, wl.resource_version, d.message),
                        occurred_at=now,
                        workload=d.preemptor,
                        uid=wl.uid,
                        cluster_queue=d.queue.removeprefix("ClusterQueue/"),
                        mode=d.mode,
                        message=d.message,
                    )
                )
        if planner is not None:
            try:
                outbox += node_events(
                    planner,
                    self.flights,
                    seq,
                    now,
                    lambda: f"{self.instance}-{next(self.counter)}",
                    self.fresh,
                )
            except InvalidInput as exc:  # e.g. a pod whose PriorityClass is not here yet
                log.warning("node-level decisions skipped until the state changes", error=str(exc))
        # One cycle's events go out together: their acknowledgements overlap.
        await asyncio.gather(*(self.ctx.publisher.publish(e) for e in outbox))

    def admitted(self, d: Any, wl: Any) -> events.Admitted:
        pod_sets = []
        for ps in wl.pod_sets:
            flavors = d.flavors.get(ps.name, {})
            count = wl.active_count(ps)
            usage = {res: v for res, v in ps.total(count).items() if res in flavors}
            if "pods" in flavors:
                usage["pods"] = count
            pod_sets.append(events.PodSetAdmission(ps.name, dict(flavors), usage, count))
        return events.Admitted(
            id=events.stable_id("admitted", wl.key, wl.uid, wl.resource_version),
            occurred_at=self.ctx.now(),
            workload=d.preemptor,
            uid=wl.uid,
            cluster_queue=d.queue.removeprefix("ClusterQueue/"),
            pod_sets=tuple(pod_sets),
            placement=dict(d.placement),
        )

    def fresh(self, key: str, signature: tuple[str, ...]) -> bool:
        """True (and remembered) unless the same decision was already published."""
        if self.published.get(key) == signature:
            return False
        self.published[key] = signature
        return True

    # -- plans --------------------------------------------------------------------------------
    async def on_event(self, event: Any, _delivery: Delivery) -> None:
        if isinstance(event, events.PlanProposed):
            await self.on_proposed(event)
        elif isinstance(event, events.PreemptionInfeasible):
            key = self.flight_key(event.preemptor)
            flight = self.flights.by_preemptor.get(key)
            if flight is not None and flight.request_id == event.request_id:
                self.flights.fail(key, max(self.replica.seq, event.state_seq))
                log.info("preemption infeasible", workload=event.preemptor, reason=event.message)
        elif isinstance(event, events.PlanDropped):
            key = self.flight_key(event.preemptor)
            flight = self.flights.by_preemptor.get(key)
            if (
                flight is not None
                and flight.plan is not None
                and flight.plan.plan_id == event.plan_id
            ):
                self.flights.fail(key, self.replica.seq)
        elif isinstance(event, events.PlanActuated):
            flight = self.flights.by_preemptor.get(self.flight_key(event.preemptor))
            if (
                flight is not None
                and flight.plan is not None
                and flight.plan.plan_id == event.plan_id
            ):
                flight.status = ACTUATED
                # only the victims actually evicted will leave
                self.nodes.actuated(self.flight_key(event.preemptor), event.victims)
        self.dirty.set()

    def flight_key(self, ref: str) -> str:
        return ref if is_node_level(self.replica.state, ref) else key_of(ref)

    async def on_proposed(self, p: events.PlanProposed) -> None:
        key = self.flight_key(p.preemptor)
        node_level = is_node_ref(key)
        flight = self.flights.by_preemptor.get(key)
        plan = PlanInFlight(
            plan_id=p.plan_id,
            preemptor=key,
            cluster_queue=p.cluster_queue,
            flavors=p.flavors,
            victims=tuple(key_of(v.object) for v in p.victims if v.object.startswith("Workload/")),
        )
        reason: str | None
        if flight is None or flight.request_id != p.request_id:
            reason = "no preemption request in flight with this id"
        elif flight.plan is not None:
            reason = None if flight.plan.plan_id == p.plan_id else "another plan is in flight"
        else:
            await self.replica.wait_seq(p.state_seq)
            assert self.live.ledger is not None
            self.nodes.prune(self.flights)
            if self.flights.by_preemptor.get(key) is not flight:
                reason = "the preemption request ended while the plan was checked"
            elif node_level:
                reason = self.nodes.confirm(self.replica.state, p)
            else:
                reason = rejection(
                    self.live.snapshot(self.ctx.now()),
                    plan,
                    p.preemptor_uid,
                    {key_of(v.object): v.uid for v in p.victims},
                    self.live.ledger.held_victims,
                ) or self.nodes.confirm_kueue(self.replica.state, key, p)
        now = self.ctx.now()
        if reason is None:
            if flight is not None:
                flight.status, flight.plan = CONFIRMED, plan
                assert self.live.ledger is not None
                if not node_level:
                    self.live.ledger.hold(plan)
            await self.ctx.publisher.publish(
                events.PlanConfirmed(
                    id=f"confirmed-{p.plan_id}",
                    occurred_at=now,
                    plan_id=p.plan_id,
                    preemptor=p.preemptor,
                )
            )
            log.info("plan confirmed", plan_id=p.plan_id, workload=p.preemptor)
        else:
            current = self.flights.by_preemptor.get(key)
            if current is not None and current is flight and flight.request_id == p.request_id:
                self.flights.fail(key, self.replica.seq)
            await self.ctx.publisher.publish(
                events.PlanRejected(
                    id=f"rejected-{p.plan_id}",
                    occurred_at=now,
                    plan_id=p.plan_id,
                    preemptor=p.preemptor,
                    reason=reason,
                )
            )
            log.info("plan rejected", plan_id=p.plan_id, workload=p.preemptor, reason=reason)

    async def run(self) -> None:
        await self.live.start()
        self.dirty.set()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.consumer.run(self.ctx.stop))
            tg.create_task(self.cycles())


async def main(ctx: ServiceContext) -> None:
    await Quota(ctx).run()


__all__ = ["Quota", "main"]
