"""quota: the quota ledger and the admission cycle.

It rebuilds the cluster state from STATE and its preemptions in flight from the plan
records, runs admission cycles with the core on every change (and on a timer, while a
failed attempt waits out its backoff), and publishes ``Admitted`` / ``Pending`` /
``PreemptionRequested``; each request gets its plan record (``requested``) as it goes
out. It confirms or rejects proposed plans on their records against the live ledger
and the plans in flight (``services.quota.confirming``). While a preemptor has a plan
in flight (requested, confirmed, or its victims terminating), no new plan is requested
for it, and the quota its victims free is held for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import time
from collections import OrderedDict
from datetime import datetime
from typing import Any

import msgspec
import structlog
from nats.aio.msg import Msg
from opentelemetry import trace

from gangpreempt import events
from gangpreempt.bus import Lease, leases_bucket, plans_bucket
from gangpreempt.bus.consuming import Delivery
from gangpreempt.bus.records import RecordBook, RecordStore
from gangpreempt.bus.status import QuotaStatus, status_subject
from gangpreempt.errors import Fenced, InvalidInput
from gangpreempt.planning.authority import (
    ADMISSION_CHECK,
    decides_namespace,
    decides_workload,
)
from gangpreempt.planning.checking import check_decided
from gangpreempt.planning.decisions import Decision
from gangpreempt.planning.inflight import PlanInFlight, rejection
from gangpreempt.planning.legitimacy import Refusal, protected_namespaces
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.planning.quotacycle import cycle_decisions
from gangpreempt.planning.records import TERMINAL, PlanRecord, new_record
from gangpreempt.planning.shadow import handed_over as shadow_handed_over
from gangpreempt.quota.snapshot import TopologyHold
from gangpreempt.telemetry import metrics
from gangpreempt.telemetry.tracing import continued_span, current_carrier, root_span
from services.livestate import LiveState, key_of
from services.quota.arrivals import ARRIVAL_WAITS, MAX_SEEN, QUIET_S, arrival_of
from services.quota.budgeting import Budgeting
from services.quota.confirming import Confirmer
from services.quota.flights import ACTUATED, ADMITTING, REQUESTED, Flight, Flights
from services.quota.freed import FreedRoom
from services.quota.nodes import (
    NodeBook,
    admit_ready,
    group_gone,
    is_node_ref,
    node_events,
    pod_gone,
)
from services.quota.shadowing import Shadow
from services.runtime import ServiceContext, sleep_or_stop

MAX_TRACES = 10_000  # preemptors whose plan's trace is kept for their admission
log = structlog.get_logger("gangpreempt.quota")
BURST_WAITS = 4
TICK_S = 1.0  # at least this often: overdue requests, owed record moves, backoffs
LEASE_KEY = "quota"


def kueue_victims(d: Any) -> set[str]:
    """The Kueue Workloads (``namespace/name``) among a decision's victims."""
    return {key_of(v.object) for v in d.victims if v.object.startswith("Workload/")}


def plan_in_flight(rec: PlanRecord) -> PlanInFlight:
    p = rec.proposal
    assert p is not None
    return PlanInFlight(
        plan_id=p.plan_id,
        preemptor=rec.flight,
        cluster_queue=p.cluster_queue,
        flavors=p.flavors,
        victims=tuple(key_of(v.object) for v in p.victims if v.object.startswith("Workload/")),
    )


class Quota:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.live = LiveState(ctx, "quota", on_change=self.on_state_change)
        self.waiting_logged = False
        self.busy = False
        self.decided_seq = 0  # the STATE sequence the last finished cycle decided on
        ctx.readiness.append(lambda: self.replica.complete)
        self.replica = self.live.replica
        self.traces: OrderedDict[str, dict[str, str]] = OrderedDict()  # preemptor -> trace
        self.flights = Flights(self.flight_changed, lambda: self.replica.seq)
        self.nodes = NodeBook()
        self.freed = FreedRoom(ctx.settings.hold_timeout)
        # Kueue preemptors whose victims left at this cycle -> the placement their plan
        # held: reserved to them for the pass (``NodePlanner.reserve``)
        self.freed_rooms: dict[str, dict[str, str]] = {}
        self.protected = protected_namespaces(ctx.settings.protected_namespaces)
        budget = ctx.settings.budget()
        self.budgeting = Budgeting(budget) if budget is not None else None
        # a record that spent from the budget is kept while it is in the window
        self.retention = max(
            ctx.settings.record_retention, budget.window_s if budget is not None else 0.0
        )
        self.book = RecordBook(ctx.nc, ctx.topology, 2 * self.retention)
        self.book.on_change(self.record_changed)
        self.dirty = asyncio.Event()
        self.changes = 0  # state changes applied, to tell a burst that is still arriving
        self.urgent = False  # a preemptor arrived since the last cycle started
        self.arrived = asyncio.Event()  # ... and cuts the gathering of other changes short
        self.seen: dict[str, datetime] = {}  # preemptor -> when its latest arrival was applied
        self.published: dict[str, tuple[str, ...]] = {}  # workload -> last decision signature
        self.counter = itertools.count(1)
        self.instance = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.holder = f"{os.uname().nodename}-{self.instance}"
        self.retry_due: float | None = None  # monotonic: a backoff ends, cycle then
        # monotonic: a workload's minimum runtime ends (``quota.toleration``), cycle then:
        # nothing else would bring back a preemptor it was spared from
        self.wake_due: float | None = None
        self.confirmer: Confirmer | None = None
        self.consumer = ctx.decisions_consumer(self.on_event, concurrency=16)
        self.lease: Lease | None = None
        self.leading = False  # holds the lease: its flights are the records' in flight
        self.token = 0  # the lease token it leads under
        # shadow mode: compare the peers' preemptions, decide and write nothing
        self.shadow = (
            Shadow(
                lambda: self.replica.state,
                ctx.publisher.publish,
                ctx.now,
                ctx.settings.shadow_settle,
            )
            if ctx.settings.mode == "shadow"
            else None
        )

    # -- flights and their holds ---------------------------------------------------------------
    def record_changed(self, _old: PlanRecord | None, new: PlanRecord | None) -> None:
        if self.budgeting is not None:  # every instance: a new holder knows the spend
            self.budgeting.learn(new)
        if new is not None and self.leading:  # a standby keeps the records, no flights
            self.flights.learn(new)

    def rebuild_flights(self, token: int) -> None:
        """The flights and their holds, as the records say (a new lease holder's)."""
        self.release_flights()
        self.flights = Flights(self.flight_changed, lambda: self.replica.seq, token)
        self.nodes = NodeBook()
        assert self.confirmer is not None
        self.confirmer.flights = self.flights
        for rec, _revision in list(self.book.records.values()):
            self.flights.learn(rec)

    def release_flights(self) -> None:
        """Every flight ends here, its holds released (the lease is no longer ours)."""
        for key, flight in list(self.flights.by_preemptor.items()):
            del self.flights.by_preemptor[key]
            self.flight_changed(key, flight, None)
        self.flights.owed.clear()
        self.flights.failures.clear()
        self.freed.clear()
        self.published.clear()  # a new term decides everything again
        self.retry_due = None

    def flight_changed(self, key: str, old: Flight | None, new: Flight | None) -> None:
        """Keep the ledger's and the nodes' holds in step with the flights. A flight that
        ends (its holds released, its preemptor free to try again) calls for a cycle, and
        so does one that reaches ``actuated``: its victims' STATE changes may have come
        before the record said so (a takeover that waited out the lease), and then
        nothing else would wake the cycle that ends the flight and admits the gang."""
        if new is None:
            self.dirty.set()
        if new is not None:
            self.traces[key] = new.record.trace  # the admission continues its trace
            self.traces.move_to_end(key)
            while len(self.traces) > MAX_TRACES:
                self.traces.popitem(last=False)
        held = old is not None and old.status != REQUESTED
        holds = new is not None and new.status != REQUESTED
        same = old is not None and new is not None and old.plan_id == new.plan_id
        if held and not (holds and same):
            assert old is not None
            if self.live.ledger is not None:
                self.live.ledger.unhold(old.plan_id)
            self.nodes.end(key)
        if holds and not (held and same):
            assert new is not None
            assert new.record.proposal is not None
            if not is_node_ref(key) and self.live.ledger is not None:
                self.live.ledger.hold(plan_in_flight(new.record))
            if is_node_ref(key) or new.record.proposal.placement:
                self.nodes.hold(key, new.record.proposal)
        leaving = (ACTUATED, ADMITTING)
        if (
            holds
            and new is not None
            and new.status in leaving
            and not (same and old is not None and old.status in leaving)
        ):
            self.nodes.actuated(key, new.record.actuated)  # only the victims evicted leave
            metrics.hop_started("actuated", new.record.preemptor, new.record.updated_at)
            if self.victims_left(key, new):
                # Their STATE changes came first: nothing but this move will wake the cycle.
                self.dirty.set()

    def on_state_change(self, kind: str, old: Any, new: Any) -> None:
        self.changes += 1
        if self.shadow is not None:
            self.shadow.observe(kind, old, new)
            return
        arrived = arrival_of(kind, old, new)
        if arrived is not None:
            self.urgent = True
            self.arrived.set()
            if len(self.seen) >= MAX_SEEN:
                self.seen.pop(next(iter(self.seen)))
            self.seen.pop(arrived, None)
            self.seen[arrived] = self.ctx.now()
        if kind == "Workload" and new is None and old is not None:
            self.published.pop(old.key, None)  # forget it: a new one may reuse the name
            self.flights.forget(old.key)
            self.flights.end(old.key, "the workload was deleted")
            self.gone(old.key, f"Workload/{old.key}")
        if kind == "Pod" and new is None and old is not None:
            pod_gone(self.replica.state, old, self.published, self.flights)
            group = f"PodGroup/{old.group}" if old.group else ""
            self.gone(old.ref, old.ref, group, group)
        if kind == "PodGroup" and new is None and old is not None:
            group_gone(old, self.published, self.flights)
            self.gone(old.ref, old.ref)
        self.dirty.set()

    def gone(self, *pairs: str) -> None:
        """Preemptors left (given as flight key, ref, flight key, ref...): what was kept
        for their admission (their plan's trace, when their victims were actuated) goes
        too."""
        for key, ref in zip(pairs[::2], pairs[1::2], strict=True):
            if key:
                self.traces.pop(key, None)
                self.seen.pop(ref, None)
                metrics.hop_forgotten("actuated", ref)

    # -- the admission cycle -----------------------------------------------------------------
    async def cycles(self, term: asyncio.Event) -> None:
        while not term.is_set():
            waiter = asyncio.ensure_future(self.dirty.wait())
            stopper = asyncio.ensure_future(term.wait())
            await asyncio.wait(
                {waiter, stopper}, timeout=self.tick(), return_when="FIRST_COMPLETED"
            )
            waiter.cancel()
            stopper.cancel()
            if term.is_set():
                return
            try:
                await self.housekeeping()
                due = any(
                    t is not None and time.monotonic() >= t for t in (self.retry_due, self.wake_due)
                )
                if not (self.dirty.is_set() or due):
                    continue
                self.busy = True
                await self.settle_burst()
                self.dirty.clear()
                self.urgent = False
                seq = self.replica.seq
                await self.cycle()
                if self.replica.complete:
                    self.decided_seq = seq
            except Fenced as exc:  # the lease is no longer ours: the term ends
                log.warning("admission cycle fenced", error=str(exc))
                await sleep_or_stop(term, 0.5)
                self.dirty.set()
            except Exception:  # NATS away, most likely: the cycle runs again soon
                log.exception("admission cycle failed; retrying")
                await sleep_or_stop(term, 0.5)
                self.dirty.set()
            finally:
                self.busy = False

    async def shadowing(self, term: asyncio.Event) -> None:
        """Shadow mode's loop: no admission cycle, no request, no check; the peers'
        settled preemptions are compared and published."""
        assert self.shadow is not None
        log.info("shadow mode: comparing the peers' preemptions; nothing is written")
        warned: set[str] = set()
        while not await sleep_or_stop(term, min(0.25, self.ctx.settings.shadow_settle / 4)):
            seq = self.replica.seq
            for warning in shadow_handed_over(self.replica.state):
                if warning not in warned:
                    warned.add(warning)
                    log.warning("shadow mode: handed over but not acted on", detail=warning)
            try:
                await self.shadow.close_due(publishing=True)
            except Exception:  # NATS away, most likely: the episode is lost, logged
                log.exception("shadow comparison not published")
            if self.replica.complete and not self.shadow.episodes:
                self.decided_seq = seq

    def status(self) -> QuotaStatus:
        return QuotaStatus(
            complete=self.replica.complete,
            state_seq=self.replica.seq,
            decided_seq=self.decided_seq,
            busy=self.busy,
            dirty=self.dirty.is_set(),
            flights=len(self.flights.by_preemptor),
            retry_pending=self.retry_due is not None,
            token=self.token,
        )

    async def serve_status(self, term: asyncio.Event) -> None:
        """The lease holder answers status requests (a standby decides nothing)."""

        async def on_request(msg: Msg) -> None:
            await msg.respond(msgspec.json.encode(self.status()))

        sub = await self.ctx.nc.subscribe(status_subject(self.ctx.topology, "quota"), cb=on_request)
        await term.wait()
        await sub.unsubscribe()

    def tick(self) -> float:
        dues = [t for t in (self.retry_due, self.wake_due) if t is not None]
        if not dues:
            return TICK_S
        return max(0.0, min(TICK_S, min(dues) - time.monotonic()))

    async def settle_burst(self) -> None:
        """Gather the changes of a burst before a cycle (``arrivals.py``). After any
        change: one cycle delay, and again while changes keep coming, up to BURST_WAITS
        delays, so a cycle does not decide on half of what is arriving. A preemptor's
        arrival (before or during that wait) cuts it short: then only until no change
        came for ``QUIET_S``, ``ARRIVAL_WAITS`` cycle delays at most."""
        delay = self.ctx.settings.cycle_delay
        for _ in range(BURST_WAITS):
            if self.urgent:
                break
            seen = self.changes
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), delay)
            if self.ctx.stop.is_set() or (self.changes == seen and not self.urgent):
                return
        deadline = time.monotonic() + ARRIVAL_WAITS * delay
        while self.urgent and time.monotonic() < deadline:
            seen = self.changes
            if await sleep_or_stop(self.ctx.stop, QUIET_S) or self.changes == seen:
                return

    async def housekeeping(self) -> None:
        """Requests that waited too long are given up; records quota owes a move are
        moved; terminal records past their retention are deleted."""
        for key in self.flights.overdue(self.ctx.settings.plan_timeout):
            log.info("preemption request unanswered; giving up", workload=key)
            self.flights.fail(key, "no proposal within plan_timeout")
            self.dirty.set()
        assert self.confirmer is not None
        owed = self.flights.take_owed()
        if owed:
            self.flights.owed[:0] = await self.confirmer.pay(owed)
        now, clock = self.ctx.now(), time.monotonic()
        store = self.confirmer.store
        retention = self.retention
        for plan_id, (rec, revision) in list(self.book.records.items()):
            if rec.state in TERMINAL and (now - rec.updated_at).total_seconds() > retention:
                try:
                    await store.delete(plan_id, revision)
                except Exception as exc:
                    log.debug("old record not deleted", plan_id=plan_id, error=repr(exc))
        for plan_id, deleted in list(self.book.tombstones.items()):
            if clock - deleted > retention:  # every follower has seen the deletion
                try:
                    await store.purge(plan_id)
                    del self.book.tombstones[plan_id]
                except Exception as exc:
                    log.debug("delete marker not purged", plan_id=plan_id, error=repr(exc))

    def settle_flights(self) -> tuple[list[str], frozenset[str]]:
        """End the flights whose preemptor is admitted or gone, and Kueue flights whose
        victims have all left; return the node-level preemptors ready to be admitted where
        they held, and the Kueue preemptors whose victims left (processed first in the
        pass, so the quota and room they preempted for are theirs)."""
        state = self.replica.state
        ready = self.nodes.settle(state, self.flights)
        first: set[str] = set()
        for key, flight in list(self.flights.by_preemptor.items()):
            if is_node_ref(key):
                continue
            wl = state.workloads.get(key)
            if wl is None or not wl.is_pending:
                self.flights.end(key, "the preemptor is admitted, or gone")
            elif flight.status == ACTUATED and self.victims_left(key, flight):
                held = self.nodes.plans.get(key)
                placement = dict(held.placement) if held is not None else {}
                if placement:
                    self.freed_rooms[key] = placement
                self.flights.end(key, "its victims are gone")
                first.add(key)
                if self.ctx.settings.authority == ADMISSION_CHECK:
                    # until Kueue reserves it and the check admits it
                    self.freed.keep(key, placement)
        kept = self.freed.settle(state)
        for key, placement in self.freed.rooms().items():
            self.freed_rooms.setdefault(key, placement)
        return ready, frozenset(first | kept)

    def victims_left(self, key: str, flight: Flight) -> bool:
        """Every victim the flight's plan evicted (not one the sink refused) has left:
        its Kueue Workloads hold no quota, its pods are gone from the nodes."""
        state = self.replica.state
        return all(
            (v := state.workloads.get(key_of(victim))) is None or not v.holds_quota
            for victim in flight.record.actuated
            if victim.startswith("Workload/")
        ) and self.nodes.victims_gone(state, key)

    async def cycle(self) -> None:
        """One admission cycle, in a trace of its own linked to the STATE changes it
        decides on: the events it publishes (and the plan records it creates) carry it."""
        links = self.replica.take_links()
        with root_span("quota cycle", links, {"gangpreempt.state_seq": self.replica.seq}):
            await self._cycle()

    async def _cycle(self) -> None:
        if not self.replica.complete:
            # Nothing is decided on part of the starting state: a pending pod would be
            # admitted onto nodes whose running pods are not published yet.
            say = log.debug if self.waiting_logged else log.info
            say("nothing decided: the starting state is not complete yet", seq=self.replica.seq)
            self.waiting_logged = True
            return
        started = time.perf_counter()
        state, now, seq = self.replica.state, self.ctx.now(), self.replica.seq
        self.freed_rooms.clear()
        ready, first = self.settle_flights()
        snapshot = self.live.snapshot(now)  # plans in flight are held in it
        outbox: list[events.Event] = []
        planner: NodePlanner | None = None
        if state.pods:
            try:
                planner = self.nodes.planner(self.live.nodes, now, but=ready)
                for key, placement in self.freed_rooms.items():
                    planner.reserve(f"Workload/{key}", placement)  # theirs in this pass
                outbox += admit_ready(planner, self.nodes, self.flights, ready, now)
            except InvalidInput as exc:  # e.g. a pod whose PriorityClass is not here yet
                log.warning("node-level decisions skipped until the state changes", error=str(exc))
                planner = None
        waiting = self.flights.waiting()
        snapshot.topology_holds = self.topology_holds(state)
        # nothing awaits in here: the replica cannot interleave
        with metrics.core_call("admission_pass"):
            try:
                decisions = cycle_decisions(snapshot, waiting, planner, first)
            except InvalidInput as exc:  # composing with the nodes failed
                log.warning("node-level decisions skipped until the state changes", error=str(exc))
                planner = None
                decisions = cycle_decisions(snapshot, waiting, None, first)
        for d in decisions:
            result = "success" if d.outcome == "Admit" else "inadmissible"
            metrics.KUEUE_ADMISSION_ATTEMPTS.labels(result).inc()
        assert self.live.ledger is not None
        # victims of the plans in flight: Kueue workloads by key, node-level units by ref
        claimed = set(self.live.ledger.held_victims) | set(self.nodes.claimed())
        authority = self.ctx.settings.authority
        # Room went to a workload decided before in this pass, or is held for a plan: a
        # reservation that does not fit must go at once, not after a backoff.
        taken = self.flights.holders() + self.freed.refs(state)
        for d in decisions:
            key = key_of(d.preemptor)
            wl = state.workloads[key]
            if not decides_workload(wl, authority):
                continue  # Kueue's to decide
            if wl.awaits_placement and d.outcome != "Preempt":
                check = check_decided(
                    state, d, wl, self.ctx.now(), self.ctx.settings.check_backoff, held=taken
                )
                if self.fresh(key, ("Check", wl.resource_version, check.state, check.message)):
                    outbox.append(check)
                if d.outcome == "Admit":
                    taken.append(d.preemptor)
                continue
            if d.outcome == "Admit":
                taken.append(d.preemptor)
                if authority == ADMISSION_CHECK and wl.admission is None:
                    continue  # Kueue reserves its quota; then the check is decided
                if self.fresh(key, ("Admit", wl.resource_version)):
                    outbox.append(self.admitted(d, wl))
            elif d.outcome == "Preempt":
                if not self.flights.may_request(key, seq):
                    claimed |= kueue_victims(d)
                    continue
                held = self.held_back(snapshot, d, state.priority_of(wl))
                if held is not None:
                    if self.fresh(key, ("Budget", wl.resource_version)):
                        outbox.append(self.budget_pending(d, wl.uid, wl.resource_version, held))
                    continue
                outbox.append(
                    self.request(
                        key,
                        d,
                        uid=wl.uid,
                        resource_version=wl.resource_version,
                        priority=state.priority_of(wl),
                        claimed=tuple(sorted(claimed)),
                    )
                )
                self.published.pop(key, None)
                claimed |= kueue_victims(d)
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
                with metrics.core_call("node_decisions"):
                    outbox += node_events(
                        planner,
                        self.flights,
                        seq,
                        now,
                        lambda pre, d: self.request(
                            pre.ref,
                            d,
                            priority=pre.priority,
                            claimed=tuple(sorted(planner.promised - {v.object for v in d.victims})),
                        ),
                        self.fresh,
                        lambda pre: decides_namespace(state, pre.ref.split("/")[1], authority),
                        lambda pre, d: self.held_back(snapshot, d, pre.priority),
                    )
            except InvalidInput as exc:  # e.g. a pod whose PriorityClass is not here yet
                log.warning("node-level decisions skipped until the state changes", error=str(exc))
        self.retry_due = self.flights.next_retry()
        ends = [snapshot.next_tolerance_end(now.timestamp())]
        if self.budgeting is not None:  # a held preemption asks again when budget frees up
            ends.append(self.budgeting.next_release(now))
        due = min((e for e in ends if e is not None), default=None)
        self.wake_due = None if due is None else time.monotonic() + due - now.timestamp()
        # One cycle's events and records go out together: their acknowledgements overlap.
        assert self.confirmer is not None
        creating = [
            self.confirmer.creating[plan_id]
            for e in outbox
            if isinstance(e, events.PreemptionRequested)
            and (plan_id := events.stable_id("plan", e.request_id)) in self.confirmer.creating
        ]
        try:
            if outbox:
                self.confirmer.token()  # decided under the lease, sent under it too
            await asyncio.gather(*(self.send(e) for e in outbox), *creating)
        except BaseException:
            # Some may not be stored: decide them again and send again (ids are stable, so
            # what did arrive is dropped as a duplicate) instead of taking them as sent.
            self.published.clear()
            raise
        took = time.perf_counter() - started
        metrics.CYCLE_SECONDS.observe(took)
        metrics.KUEUE_ATTEMPT_DURATION.observe(took)
        metrics.CYCLE_SIZE.observe(len(decisions) + (planner.decided if planner else 0))

    async def send(self, event: events.Event) -> None:
        """Publish one of the cycle's events; the admission of a preemptor that had a
        plan goes out in that plan's trace (linked to this cycle)."""
        carrier = None
        if isinstance(event, events.CheckDecided):
            event = msgspec.structs.replace(
                event, id=events.stable_id(event.id, self.token), quota_token=self.token
            )
        if isinstance(event, events.Admitted):
            # Decided under this lease: the sim takes no admission from an older one, and
            # the id names the term, so a successor's decision is no duplicate of it.
            event = msgspec.structs.replace(
                event, id=events.stable_id(event.id, self.token), quota_token=self.token
            )
        elif isinstance(event, events.PreemptionRequested):
            event = msgspec.structs.replace(event, quota_token=self.token)
        if isinstance(event, events.Admitted):
            ref = event.workload
            carrier = self.traces.pop(key_of(ref) if ref.startswith("Workload/") else ref, None)
        if not carrier:
            await self.ctx.publisher.publish(event)
            return
        cycle = trace.get_current_span().get_span_context()
        links = [cycle] if cycle.is_valid else []
        with continued_span("admit", carrier, links, {"gangpreempt.workload": ref}):
            await self.ctx.publisher.publish(event)

    def request(
        self,
        key: str,
        d: Decision,
        *,
        priority: int,
        claimed: tuple[str, ...],
        uid: str = "",
        resource_version: str = "",
    ) -> events.PreemptionRequested:
        """A new preemption request, its flight started and its record on its way."""
        assert self.confirmer is not None
        now, seq = self.ctx.now(), self.replica.seq
        request_id = f"{self.instance}-{next(self.counter)}"
        plan_id = events.stable_id("plan", request_id)
        rec = new_record(
            plan_id, request_id, d.preemptor, key, now, seq, f"quota/{self.instance}", self.token
        )
        rec = msgspec.structs.replace(rec, trace=current_carrier())
        self.flights.start(rec)
        self.confirmer.create(rec)
        log.info("preemption requested", workload=d.preemptor, request_id=request_id)
        seen_at = self.seen.pop(d.preemptor, None)
        metrics.hop("seen_to_requested", seen_at, now)
        return events.PreemptionRequested(
            id=request_id,
            occurred_at=now,
            request_id=request_id,
            workload=d.preemptor,
            uid=uid,
            resource_version=resource_version,
            cluster_queue=d.queue.removeprefix("ClusterQueue/"),
            priority=priority,
            flavors=d.flavors,
            claimed=claimed,
            state_seq=seq,
            seen_at=seen_at,
        )

    def topology_holds(self, state: Any) -> list[TopologyHold]:
        """The topology room of each confirmed Kueue plan in flight, held against every
        other workload until its preemptor is admitted (``quota.tas``)."""
        holds: list[TopologyHold] = []
        for key, flight in self.flights.by_preemptor.items():
            proposal = flight.record.proposal
            if flight.status == REQUESTED or proposal is None or not proposal.topology:
                continue
            wl = state.workloads.get(key)
            if wl is None:
                continue
            victims = frozenset(
                v.object.removeprefix("Workload/")
                for v in proposal.victims
                if v.object.startswith("Workload/")
            )
            holds.append((wl, dict(proposal.flavors), dict(proposal.topology), victims))
        return holds

    def admitted(self, d: Any, wl: Any) -> events.Admitted:
        pod_sets = []
        for ps in wl.pod_sets:
            flavors = d.flavors.get(ps.name, {})
            count = wl.active_count(ps)
            usage = {res: v for res, v in ps.total(count).items() if res in flavors}
            if "pods" in flavors:
                usage["pods"] = count
            pod_sets.append(
                events.PodSetAdmission(
                    ps.name, dict(flavors), usage, count, d.topology.get(ps.name)
                )
            )
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
        assert self.confirmer is not None
        if isinstance(event, events.PlanProposed):
            await self.replica.wait_seq(event.state_seq)
            await self.confirmer.proposed(event, self.check)
        elif isinstance(event, events.PreemptionInfeasible):
            await self.confirmer.infeasible(event, self.replica.seq)

    def held_back(self, snapshot: Any, d: Decision, priority: int) -> str | None:
        """Why the disruption budget holds the preemption ``d`` back now, or None."""
        if self.budgeting is None:
            return None
        return self.budgeting.held(snapshot, d, priority)

    def budget_pending(self, d: Decision, uid: str, version: str, why: str) -> events.Pending:
        key = key_of(d.preemptor)
        log.info("preemption held back by the disruption budget", workload=d.preemptor, why=why)
        return events.Pending(
            id=events.stable_id("pending", key, version, "disruption budget", why),
            occurred_at=self.ctx.now(),
            workload=d.preemptor,
            uid=uid,
            cluster_queue=d.queue.removeprefix("ClusterQueue/"),
            mode=d.mode,
            message=why,
        )

    def charge(
        self, rec: PlanRecord, p: events.PlanProposed
    ) -> tuple[str | None, dict[str, object]]:
        """The disruption budget at confirmation (``budgeting.Budgeting.confirm``)."""
        assert self.budgeting is not None
        now = self.ctx.now()
        state, index = self.replica.state, self.replica.pods
        return self.budgeting.confirm(self.live.snapshot(now), state, index, rec, p, now)

    def check(self, rec: PlanRecord, p: events.PlanProposed) -> str | None:
        """Why the proposal must be rejected against the live ledger and nodes, or None
        (an illegitimate victim counted by the rule that refuses it)."""
        reason = self._check(rec, p)
        if isinstance(reason, Refusal):
            metrics.PLANS_ILLEGITIMATE.labels("quota", reason.rule).inc()
        return reason

    def _check(self, rec: PlanRecord, p: events.PlanProposed) -> str | None:
        state = self.replica.state
        index = self.replica.pods
        if is_node_ref(rec.flight):
            return self.nodes.check(state, p, self.protected, index, self.ctx.now())
        assert self.live.ledger is not None
        plan = PlanInFlight(
            plan_id=p.plan_id,
            preemptor=rec.flight,
            cluster_queue=p.cluster_queue,
            flavors=p.flavors,
            victims=tuple(key_of(v.object) for v in p.victims if v.object.startswith("Workload/")),
        )
        return rejection(
            self.live.snapshot(self.ctx.now()),
            plan,
            p.preemptor_uid,
            {key_of(v.object): v.uid for v in p.victims},
            self.live.ledger.held_victims,
        ) or self.nodes.check_kueue(state, p, self.protected, index, self.ctx.now())

    async def buckets(self) -> tuple[Any, Any]:
        ctx = self.ctx
        if ctx.settings.provision:
            replicas = ctx.settings.stream_replicas
            return (
                await plans_bucket(ctx.js, ctx.topology, replicas),
                await leases_bucket(ctx.js, ctx.topology, ctx.settings.lease_ttl, replicas),
            )
        return (  # provisioned by an admin: bind, do not create
            await ctx.js.key_value(ctx.topology.plans_bucket),
            await ctx.js.key_value(ctx.topology.leases_bucket),
        )

    async def run(self) -> None:
        """Keep the cluster state and the records current; decide only while holding the
        lease (one active instance, the others standing by, warm)."""
        ctx = self.ctx
        kv, leases = await ctx.persevering("bind the buckets", self.buckets)
        lease = self.lease = Lease(leases, LEASE_KEY, self.holder, ctx.settings.lease_ttl)
        metrics.LEASE_HOLDER.labels(ctx.service).set_function(lambda: float(lease.valid()))
        metrics.FENCING_TOKEN.labels(ctx.service).set_function(lambda: float(lease.token or 0))
        self.confirmer = Confirmer(
            RecordStore(kv),
            self.book,
            self.flights,
            self.ctx.publisher,
            self.ctx.now,
            f"quota/{self.instance}",
            lease,
            charge=self.charge if self.budgeting is not None else None,
            uncharge=self.budgeting.release if self.budgeting is not None else None,
        )
        await ctx.persevering("rebuild the cluster state", self.live.start)
        await ctx.persevering("read the plan records", self.book.start)
        try:
            while not ctx.stop.is_set():
                if await lease.acquire(ctx.stop) is None:
                    return
                await self.lead(lease)
                if not ctx.stop.is_set():
                    log.warning("lease lost; standing by", fencing_token=lease.token)
                    await sleep_or_stop(ctx.stop, 0.1)
        finally:
            if lease.valid():
                await lease.release()
            await self.book.stop()

    async def lead(self, lease: Lease) -> None:
        """One term as the lease holder: take over the records whose next move is quota's,
        rebuild the flights and holds from the records, then decide, confirm and answer
        until the lease is lost or the service stops."""
        term = asyncio.Event()

        async def until_lost() -> None:
            stopper = asyncio.ensure_future(self.ctx.stop.wait())
            loser = asyncio.ensure_future(lease.lost.wait())
            await asyncio.wait({stopper, loser}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            loser.cancel()
            term.set()

        started = time.monotonic()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(lease.keep(self.ctx.stop))
                tg.create_task(until_lost())
                if not await self.take_over(lease, term):
                    return
                log.info(
                    "leading",
                    fencing_token=self.token,
                    flights=len(self.flights.by_preemptor),
                    seconds=round(time.monotonic() - started, 3),
                )
                if self.shadow is not None:
                    tg.create_task(self.shadowing(term))
                else:
                    tg.create_task(self.consumer.run(term))
                    tg.create_task(self.cycles(term))
                tg.create_task(self.serve_status(term))
        finally:
            self.leading = False
            self.release_flights()
            self.token = 0

    async def take_over(self, lease: Lease, term: asyncio.Event) -> bool:
        """Take over the records (adopt, expire), then rebuild; False if the term ended
        first."""
        assert self.confirmer is not None
        while not term.is_set():
            try:
                token = lease.check()
                await self.book.caught_up()  # every record the bucket holds now
                adopted = await self.confirmer.adopt(token)
                break
            except Fenced:
                return False
            except Exception as exc:  # NATS away: try again while the lease is ours
                log.warning("records not adopted yet; retrying", error=repr(exc))
                await sleep_or_stop(term, 0.2)
        else:
            return False
        self.token = token
        self.rebuild_flights(token)
        self.leading = True
        self.dirty.set()
        log.info("records adopted", adopted=adopted, fencing_token=token)
        return True


async def main(ctx: ServiceContext) -> None:
    await Quota(ctx).run()


__all__ = ["Quota", "main"]
