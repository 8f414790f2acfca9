"""The sim cluster: ingest's in-memory stand-in for the API server in demos and tests.

It applies what Kueue, kube-scheduler and the kubelet would: an ``Admitted`` event
reserves quota for the workload, or binds a node-level preemptor's pods to the nodes of
its placement; an eviction marks the victim Evicted at once (it keeps its quota, as a
terminating pod keeps its node) and releases its quota ``termination_delay`` seconds
later, when the workload goes back to pending. Victim pods are marked terminating (or
labelled for soft eviction, which the sim's stand-in operator then deletes) and are
gone ``termination_delay`` seconds later. Every change gets a new resourceVersion
and is published to STATE. Evictions carry preconditions (uid) and a fencing token: the
sim follows the actuator's lease itself and refuses a token that is not the current
holder's (and one lower than any it has seen). Admissions carry quota's lease token: one
decided under a lease that is not the current one is not applied (the holder decides
again), as a stale leader's write would be refused.

An eviction is written to the journal (``services.ingest.journal``) before it is applied;
a restarted sim rebuilds its world from STATE and the journal, applying again any
eviction STATE did not get (as an API server answers a write once its store has it).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog
from nats.aio.client import Client
from opentelemetry import context

from gangpreempt import events
from gangpreempt.bus import Publisher
from gangpreempt.bus.leasing import LeaseView
from gangpreempt.bus.publishing import Oversized
from gangpreempt.bus.statechunks import Change, ChunkLedger, change_size, in_chunks
from gangpreempt.model import kinds
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import SOFT_EVICTION_LABEL, Pod
from gangpreempt.model.workloads import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PREEMPTED,
    QUOTA_RESERVED,
    Admission,
    Condition,
    PodSetAssignment,
    Workload,
)
from gangpreempt.planning.barrier import LiveObject, live_object
from gangpreempt.telemetry import extract
from gangpreempt.telemetry.tracing import current_carrier
from services.ingest.journal import EvictionEntry, Journal
from services.simwire import EvictReply, EvictRequest, StatsReply

log = structlog.get_logger("gangpreempt.sim")
Item = tuple[str, str, dict[str, str]]  # a change to publish: kind, key, trace context


class Chunking(msgspec.Struct, frozen=True):
    """How the writer batches: once ``per_chunk`` changes wait (0: never), up to that
    many go in one ``StateChunk``; ``ledger`` hears of every stored message."""

    per_chunk: int
    epoch: str
    ledger: ChunkLedger | None = None


def with_condition(conditions: tuple[Condition, ...], cond: Condition) -> tuple[Condition, ...]:
    return (*(c for c in conditions if c.type != cond.type), cond)


def split_ref(ref: str) -> tuple[str, str]:
    kind, _, key = ref.partition("/")
    return kind, key


ACTUATOR_LEASE = "actuator"
EVICTIONS_KEPT_S = 3600.0  # how long a victim's evicting plan is remembered
SOFT_EVICTED_KEPT = 10_000  # soft-evicted pods listed in the stats, newest
QUOTA_LEASE = "quota"


class SimCluster:
    def __init__(
        self,
        publisher: Publisher,
        termination_delay: float,
        journal: Journal | None = None,
        on_oversized: Callable[[Oversized], Awaitable[None]] | None = None,
        chunking: Chunking | None = None,
    ) -> None:
        self.publisher = publisher
        self.chunking = chunking or Chunking(0, "")
        self.chunks_sent = 0
        # A change too large to publish is handed here (ingest dead-letters it) and not
        # sent again: the writer goes on with the next.
        self.on_oversized = on_oversized
        self.termination_delay = termination_delay
        # the actuator's and quota's leases, as the sim follows them (None: it does not)
        self.actuator_lease: LeaseView | None = None
        self.quota_lease: LeaseView | None = None
        self.admissions_refused = 0
        self.journal = journal
        self.world = ClusterState()
        self.rv = 0
        self.evictions: dict[str, int] = {}  # victim ref -> evictions applied (stats)
        # victim (workload key, or the ref of a node-level unit) -> the plan that evicted
        # it: a repeat by that plan is answered "already evicted", even once it is gone
        self.evicted_by: dict[str, str] = {}
        # victim -> (when, its ref), oldest first: what is forgotten after an hour
        self._evicted_at: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self.max_token = 0
        self.soft_evicted: list[str] = []
        self._timers: set[asyncio.Task[None]] = set()
        # The world changes at once; its STATE events follow in order, as a watch does.
        # (kind, key, the trace context of the change: its STATE event carries it)
        self._outbox: asyncio.Queue[Item] = asyncio.Queue()
        self._versions: dict[tuple[str, str], int] = {}  # the version of each change
        self._deleted_uids: dict[tuple[str, str], str] = {}
        self._writer: asyncio.Task[None] | None = None
        self._acks: set[asyncio.Task[None]] = set()

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)

    # -- writes ------------------------------------------------------------------------
    # The writer publishes, for each changed object, its version in the world *at the time
    # of sending*, in order of change, without waiting for each ack before the next send.
    # A send or an ack that fails (NATS away) queues the object again: the version that
    # goes then is the current one, so the stream never ends on an older version than one
    # it already stored. ``flush`` waits until every change is stored.
    async def _write(self) -> None:
        per_chunk = self.chunking.per_chunk
        while True:
            item = await self._outbox.get()
            if per_chunk and self._outbox.qsize() + 1 >= per_chunk:
                await self._write_chunk(item)
                continue
            try:
                event = self._event_for(item[0], item[1])
            except (OverflowError, msgspec.EncodeError) as exc:  # never sendable: go on
                log.error("state event cannot be encoded; not sent", ref=item[:2], error=repr(exc))
                self._outbox.task_done()
                continue
            await self._send_one(item, event)

    async def _send_one(self, item: Item, event: events.Event) -> None:
        token = context.attach(extract(item[2]))
        try:
            ack = await self.publisher.send(event)
        except Oversized as exc:  # never sendable: dead-lettered, and the writer goes on
            await self._oversized(exc)
            self._outbox.task_done()
            return
        except Exception as exc:
            log.warning("state event not sent; again", event_id=event.id, error=repr(exc))
            await asyncio.sleep(0.2)
            self._again(item)
            return
        finally:
            context.detach(token)
        self._waiting(self._acked(item, event, ack))

    def _waiting(self, work: Coroutine[Any, Any, None]) -> None:
        waiter = asyncio.ensure_future(work)
        self._acks.add(waiter)
        waiter.add_done_callback(self._acks.discard)

    def _drain(self, first: Item) -> tuple[list[Item], list[Item], list[Change]]:
        """``first`` and the changes waiting after it, up to a chunk's worth: every item
        taken, the first item of each object, and the object's current version each."""
        items: list[Item] = []
        firsts: list[Item] = []
        changes: list[Change] = []
        seen: set[tuple[str, str]] = set()
        budget = self.publisher.nc.max_payload // 2
        size = 0
        item = first
        while True:
            items.append(item)
            ref = (item[0], item[1])
            if ref not in seen:
                seen.add(ref)
                try:
                    change = self._event_for(*ref)
                except (OverflowError, msgspec.EncodeError) as exc:  # never sendable
                    log.error("state event cannot be encoded; not sent", ref=ref, error=repr(exc))
                else:
                    firsts.append(item)
                    changes.append(change)
                    size += change_size(change)
            if len(changes) >= self.chunking.per_chunk or size >= budget or self._outbox.empty():
                return items, firsts, changes
            item = self._outbox.get_nowait()

    async def _write_chunk(self, first: Item) -> None:
        """The waiting changes in one ``StateChunk`` (each object's version at the time
        of sending); one too large goes change by change."""
        items, firsts, changes = self._drain(first)
        if not all(in_chunks(c) for c in changes):
            items, firsts, changes = await self._deletions_alone(items, firsts, changes)
        if len(changes) <= 1:  # one object (changed again and again), or none sendable
            await self._one_by_one(items, firsts, changes)
            return
        chunk = events.StateChunk(
            id=f"chunk-{self.chunking.epoch}-{self.chunks_sent}",
            occurred_at=self.now(),
            epoch=self.chunking.epoch,
            n=self.chunks_sent,
            changes=tuple(changes),
        )
        self.chunks_sent += 1
        token = context.attach(extract(first[2]))
        try:
            ack = await self.publisher.send(chunk)
        except Oversized:
            await self._one_by_one(items, firsts, changes)
            return
        except Exception as exc:
            await self._all_again(items, "state chunk not sent; again", chunk.id, exc)
            return
        finally:
            context.detach(token)
        self._waiting(self._chunk_acked(items, chunk, ack))

    async def _deletions_alone(
        self, items: list[Item], firsts: list[Item], changes: list[Change]
    ) -> tuple[list[Item], list[Item], list[Change]]:
        """The deletions among a drained batch sent each on its object's subject
        (``statechunks.in_chunks``); the rest returned for the chunk."""
        gone = {(f[0], f[1]) for f, c in zip(firsts, changes, strict=True) if not in_chunks(c)}
        kept = [item for item in items if (item[0], item[1]) not in gone]
        for _ in range(len(items) - len(kept) - len(gone)):  # a deleted object's repeats
            self._outbox.task_done()
        rest: list[tuple[Item, Change]] = []
        for item, change in zip(firsts, changes, strict=True):
            if in_chunks(change):
                rest.append((item, change))
            else:
                await self._send_one(item, change)
        return kept, [item for item, _ in rest], [change for _, change in rest]

    async def _one_by_one(
        self, items: list[Item], firsts: list[Item], changes: list[Change]
    ) -> None:
        """Each object's change in a message of its own (its repeats done with)."""
        for _ in range(len(items) - len(firsts)):
            self._outbox.task_done()
        for item, change in zip(firsts, changes, strict=True):
            await self._send_one(item, change)

    async def _all_again(
        self, items: list[Item], what: str, chunk_id: str, exc: BaseException
    ) -> None:
        """A chunk that did not get through: its objects queued again."""
        log.warning(what, event_id=chunk_id, error=repr(exc))
        await asyncio.sleep(0.2)
        for item in items:
            self._again(item)

    async def _chunk_acked(
        self, items: list[Item], chunk: events.StateChunk, ack: asyncio.Future[Any]
    ) -> None:
        try:
            stored = await asyncio.wait_for(ack, self.publisher.ack_timeout)
        except Exception as exc:
            await self._all_again(items, "state chunk not stored; again", chunk.id, exc)
            return
        if self.chunking.ledger is not None:
            self.chunking.ledger.note(stored.seq, ((c.kind, c.key) for c in chunk.changes), True)
        for change in chunk.changes:
            self._forget_if_deleted(change)
        for _ in items:
            self._outbox.task_done()

    async def _oversized(self, exc: Oversized) -> None:
        if self.on_oversized is not None:
            await self.on_oversized(exc)
        else:
            log.error("state event too large; not sent", event_id=exc.event_id, error=str(exc))

    def _again(self, item: Item) -> None:
        self._outbox.put_nowait(item)
        self._outbox.task_done()

    async def _acked(self, item: Item, event: events.Event, ack: asyncio.Future[Any]) -> None:
        try:
            stored = await asyncio.wait_for(ack, self.publisher.ack_timeout)
        except Exception as exc:
            log.warning("state event not stored; again", event_id=event.id, error=repr(exc))
            await asyncio.sleep(0.2)
            self._again(item)
            return
        if self.chunking.ledger is not None:
            self.chunking.ledger.note(stored.seq, [(item[0], item[1])], False)
        self._forget_if_deleted(event)
        self._outbox.task_done()

    def _forget_if_deleted(self, event: events.Event) -> None:
        """Nothing of an object is kept once its deletion is on STATE."""
        if not isinstance(event, events.ObjectDeleted):
            return
        kind, key = event.kind, event.key
        stored = f"{kind}/{key}@{self._versions.get((kind, key), 0)}-deleted"
        if event.id == stored and kinds.get(self.world, kind, key) is None:
            self._versions.pop((kind, key), None)
            self._deleted_uids.pop((kind, key), None)

    def _event_for(self, kind: str, key: str) -> Change:
        """The object's current version as a STATE event (a deletion if it is gone)."""
        version = self._versions.get((kind, key), 0)
        obj = kinds.get(self.world, kind, key)
        if obj is None:
            return events.ObjectDeleted(
                id=f"{kind}/{key}@{version}-deleted",
                occurred_at=self.now(),
                kind=kind,
                key=key,
                uid=self._deleted_uids.get((kind, key), ""),
            )
        return events.ObjectUpserted(
            id=f"{kind}/{key}@{version}",
            occurred_at=self.now(),
            kind=kind,
            key=key,
            uid=getattr(obj, "uid", ""),
            resource_version=str(version),
            body=kinds.encode_object(obj),
        )

    def _emit(self, kind: str, key: str) -> None:
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())
        self._outbox.put_nowait((kind, key, current_carrier()))

    async def flush(self) -> None:
        await self._outbox.join()

    async def upsert(self, obj: Any) -> Any:
        self.rv += 1
        if isinstance(obj, Workload):
            obj = msgspec.structs.replace(
                obj, resource_version=str(self.rv), uid=obj.uid or f"sim-{obj.namespace}-{obj.name}"
            )
        elif isinstance(obj, Pod):  # each incarnation of a pod gets its own uid
            obj = msgspec.structs.replace(
                obj,
                resource_version=str(self.rv),
                uid=obj.uid or f"sim-{obj.namespace}-{obj.name}-{self.rv}",
            )
        kinds.put(self.world, obj)
        kind, key = kinds.kind_of(obj), kinds.key_of(obj)
        self._versions[kind, key] = self.rv
        self._emit(kind, key)
        return obj

    async def delete(self, kind: str, key: str) -> None:
        obj = kinds.remove(self.world, kind, key)
        if obj is None:
            return
        self.rv += 1
        self._versions[kind, key] = self.rv
        self._deleted_uids[kind, key] = getattr(obj, "uid", "")
        self._emit(kind, key)

    async def bind(self, ev: events.Admitted) -> None:
        """kube-scheduler binds the preemptor's pending pods to their nodes."""
        now = self.now()
        bound = 0
        for ref, node in sorted(ev.placement.items()):
            pod = self.world.pods.get(ref.removeprefix("Pod/"))
            if pod is None or not pod.pending or node not in self.world.nodes:
                continue
            await self.upsert(
                msgspec.structs.replace(
                    pod, node_name=node, nominated_node="", start_time=now, scheduled_at=now
                )
            )
            bound += 1
        log.info("bound", preemptor=ev.workload, pods=bound)

    async def admit(self, ev: events.Admitted) -> None:
        refused = await self.admission_refused(ev)
        if refused is not None:
            self.admissions_refused += 1
            log.warning("admission refused", workload=ev.workload, reason=refused)
            return
        if ev.placement:
            await self.bind(ev)
        kind, key = split_ref(ev.workload)
        if kind != "Workload":
            return
        wl = self.world.workloads.get(key)
        if wl is None or (ev.uid and wl.uid != ev.uid) or not wl.is_pending:
            return
        now = self.now()
        admission = Admission(
            cluster_queue=ev.cluster_queue,
            pod_set_assignments=tuple(
                PodSetAssignment(
                    p.name,
                    dict(p.flavors),
                    dict(p.resource_usage),
                    p.count,
                    topology_assignment=p.topology_assignment,
                )
                for p in ev.pod_sets
            ),
        )
        conditions = with_condition(
            wl.conditions, Condition(QUOTA_RESERVED, "True", "QuotaReserved", now)
        )
        conditions = with_condition(conditions, Condition(ADMITTED, "True", "Admitted", now))
        conditions = tuple(c for c in conditions if c.type not in (EVICTED, PREEMPTED))
        await self.upsert(msgspec.structs.replace(wl, admission=admission, conditions=conditions))
        log.info("admitted", workload=ev.workload, cluster_queue=ev.cluster_queue)

    async def follow_lease(self, nc: Client, bucket: str) -> None:
        """Follow the actuator's and quota's leases (their holders' tokens): evictions and
        admissions are taken only under the token of whoever holds the lease now."""
        self.actuator_lease = LeaseView(nc, bucket, ACTUATOR_LEASE)
        self.quota_lease = LeaseView(nc, bucket, QUOTA_LEASE)
        await self.actuator_lease.start()
        await self.quota_lease.start()

    @property
    def lease_token(self) -> int | None:
        """The actuator's lease token, as the sim follows it."""
        return self.actuator_lease.token if self.actuator_lease is not None else None

    async def fence(self, req: EvictRequest) -> EvictReply | None:
        """A refusal when the request's token is not the current lease holder's (as the
        sim follows the lease; a sim that does not follow it fences nothing)."""
        lease_token = req.fencing_token
        if self.actuator_lease is not None:
            lease_token = await self.actuator_lease.current(req.fencing_token) or 0
        if req.fencing_token != lease_token:
            return EvictReply(
                ok=False,
                fenced=True,
                detail=f"fenced: token {req.fencing_token}, the lease's is {lease_token}",
            )
        if req.fencing_token < self.max_token:
            return EvictReply(
                ok=False,
                fenced=True,
                detail=f"fenced: token {req.fencing_token} < {self.max_token}",
            )
        self.max_token = max(self.max_token, req.fencing_token)
        return None

    async def admission_refused(self, ev: events.Admitted) -> str | None:
        """Why an admission is not applied: it was decided under a quota lease that is not
        the current one (its holder lost the lease before the sim got it; the holder now
        decides again). None when the sim follows no lease."""
        if self.quota_lease is None:
            return None
        current = await self.quota_lease.current(ev.quota_token)
        if ev.quota_token != current:
            return f"decided under quota token {ev.quota_token}, the lease's is {current}"
        return None

    def _journal(self, req: EvictRequest) -> None:
        if self.journal is not None:
            self.journal.write(
                evict=EvictionEntry(
                    at=time.time(),
                    plan_id=req.plan_id,
                    ref=req.ref,
                    uid=req.uid,
                    fencing_token=req.fencing_token,
                    lease_token=self.max_token,
                    pods=req.pods,
                    pod_uids=req.pod_uids,
                )
            )

    async def evict(self, req: EvictRequest) -> EvictReply:
        """An eviction is journaled before it is applied: a restarted sim applies it
        again if STATE did not get it (without a journal, a restart starts anew)."""
        refusal = await self.fence(req)
        if refusal is not None:
            return refusal
        return await self._evict(req)

    async def _evict(self, req: EvictRequest) -> EvictReply:
        if req.pods and not req.ref.startswith("Workload/"):
            return await self.evict_pods(req)
        _kind, key = split_ref(req.ref)
        wl = self.world.workloads.get(key)
        if wl is None:
            return EvictReply(ok=False, detail="not found")
        if req.uid and wl.uid != req.uid:
            return EvictReply(ok=False, detail=f"precondition failed: uid is {wl.uid}")
        if self.evicted_by.get(key) == req.plan_id:
            return EvictReply(ok=True, applied=False, detail="already evicted by this plan")
        if wl.is_evicting:
            return EvictReply(ok=True, applied=False, detail="already evicting")
        if not wl.holds_quota:
            return EvictReply(ok=False, detail="not running")
        self._journal(req)
        now = self.now()
        conditions = with_condition(wl.conditions, Condition(EVICTED, "True", "Preempted", now))
        conditions = with_condition(conditions, Condition(PREEMPTED, "True", req.reason, now))
        await self.upsert(msgspec.structs.replace(wl, conditions=conditions))
        self.remember(key, req.ref, req.plan_id)
        log.info("evicting", workload=req.ref, plan_id=req.plan_id, delay=self.termination_delay)
        for ref in req.pods:  # its pods, when they are known, terminate with it
            pod = self.world.pods.get(ref.removeprefix("Pod/"))
            if pod is not None and not pod.terminating:
                pod = await self.upsert(msgspec.structs.replace(pod, terminating=True))
                self._later(self._delete_later(pod.key, pod.uid))
        self._later(self._terminate_later(key, wl.uid))
        return EvictReply(ok=True, applied=True)

    async def evict_pods(self, req: EvictRequest) -> EvictReply:
        """A node-level victim: every pod of the unit at once (never part of a gang)."""
        if self.evicted_by.get(req.ref) == req.plan_id:
            return EvictReply(ok=True, applied=False, detail="already evicted by this plan")
        pods = [self.world.pods.get(ref.removeprefix("Pod/")) for ref in req.pods]
        if any(p is None for p in pods):
            return EvictReply(ok=False, detail="a victim pod no longer exists")
        if (
            req.ref.startswith("Pod/")
            and req.uid
            and pods[0] is not None
            and pods[0].uid != req.uid
        ):
            return EvictReply(ok=False, detail=f"precondition failed: uid is {pods[0].uid}")
        applied = False
        if any(p is not None and not p.terminating for p in pods):
            self._journal(req)
        for pod in pods:
            assert pod is not None
            if pod.terminating:
                continue
            if req.mode == "soft-eviction":
                labels = {**pod.labels, SOFT_EVICTION_LABEL: f"plan-{req.plan_id}"}
                pod = await self.upsert(msgspec.structs.replace(pod, labels=labels))
                self.soft_evicted.append(pod.ref)
                del self.soft_evicted[:-SOFT_EVICTED_KEPT]
            # the kubelet (or, after a soft eviction, the cleaning operator) deletes it
            await self.upsert(msgspec.structs.replace(pod, terminating=True))
            applied = True
            self._later(self._delete_later(pod.key, pod.uid))
        self.remember(req.ref, req.ref, req.plan_id)
        log.info("evicting pods", victim=req.ref, pods=len(pods), mode=req.mode or "delete")
        return EvictReply(ok=True, applied=applied)

    def remember(self, victim: str, ref: str, plan_id: str) -> None:
        """``plan_id`` evicted ``victim``: a repeat by that plan (a takeover evicting every
        victim again) is answered "already evicted" for an hour, even once it is gone;
        then it is forgotten (no plan actuates for that long)."""
        self.evicted_by[victim] = plan_id
        self.evictions[ref] = self.evictions.get(ref, 0) + 1
        now = time.monotonic()
        self._evicted_at[victim] = (now, ref)
        self._evicted_at.move_to_end(victim)
        while self._evicted_at:
            oldest, (at, oldest_ref) = next(iter(self._evicted_at.items()))
            if now - at <= EVICTIONS_KEPT_S:
                break
            del self._evicted_at[oldest]
            self.evicted_by.pop(oldest, None)
            self.evictions.pop(oldest_ref, None)

    async def restore(self, world: ClusterState, last_seq: int) -> None:
        """Take up a world a killed sim left on STATE: versions go on from where they were,
        evictions the journal has but STATE lost are applied again, and every victim
        still terminating gets its termination timer back."""
        self.world = world
        versions = [
            int(rv)
            for o in kinds.objects(world)
            if (rv := str(getattr(o, "resource_version", ""))).isdigit()
        ]
        self.rv = max([last_seq, *versions])
        for line in self.journal.lines() if self.journal is not None else []:
            entry = line.evict
            if entry is None:
                continue
            self.evictions[entry.ref] = self.evictions.get(entry.ref, 0) + 1
            self.max_token = max(self.max_token, entry.fencing_token)
            kind, key = split_ref(entry.ref)
            if kind == "Workload" or not entry.pods:
                self.evicted_by[key] = entry.plan_id
                wl = self.world.workloads.get(key)
                if wl is not None and wl.uid == entry.uid and wl.holds_quota and not wl.is_evicting:
                    now = self.now()
                    conditions = with_condition(
                        wl.conditions, Condition(EVICTED, "True", "Preempted", now)
                    )
                    await self.upsert(msgspec.structs.replace(wl, conditions=conditions))
            else:
                self.evicted_by[entry.ref] = entry.plan_id
            uids = dict(zip(entry.pods, entry.pod_uids, strict=False))
            for ref in entry.pods:
                pod = self.world.pods.get(ref.removeprefix("Pod/"))
                if pod is not None and not pod.terminating and uids.get(ref, pod.uid) == pod.uid:
                    await self.upsert(msgspec.structs.replace(pod, terminating=True))
        for wl in self.world.workloads.values():
            if wl.is_evicting:
                self._later(self._terminate_later(wl.key, wl.uid))
        for pod in self.world.pods.values():
            if pod.terminating:
                self._later(self._delete_later(pod.key, pod.uid))
        await self.flush()
        log.info("sim restored", objects=len(versions), resource_version=self.rv)

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    async def _delete_later(self, key: str, uid: str) -> None:
        await asyncio.sleep(self.termination_delay)
        pod = self.world.pods.get(key)
        if pod is None or pod.uid != uid:
            return
        await self.delete("Pod", key)
        log.info("terminated", pod=f"Pod/{key}")

    async def _terminate_later(self, key: str, uid: str) -> None:
        await asyncio.sleep(self.termination_delay)
        wl = self.world.workloads.get(key)
        if wl is None or wl.uid != uid or not wl.is_evicting:
            return
        now = self.now()
        conditions = with_condition(
            wl.conditions, Condition(QUOTA_RESERVED, "False", "Pending", now)
        )
        conditions = with_condition(conditions, Condition(ADMITTED, "False", "NoReservation", now))
        await self.upsert(msgspec.structs.replace(wl, admission=None, conditions=conditions))
        log.info("terminated", workload=f"Workload/{key}")

    async def finish(self, ref: str) -> None:
        _kind, key = split_ref(ref)
        wl = self.world.workloads.get(key)
        if wl is None:
            return
        cond = Condition(FINISHED, "True", "Succeeded", self.now())
        await self.upsert(
            msgspec.structs.replace(wl, conditions=with_condition(wl.conditions, cond))
        )
        log.info("finished", workload=ref)

    # -- reads -------------------------------------------------------------------------
    def live(self, ref: str) -> LiveObject:
        return live_object(ref, self.world)

    def stats(self) -> StatsReply:
        return StatsReply(
            evictions=dict(self.evictions),
            fencing_token=self.max_token,
            soft_evicted=list(self.soft_evicted),
        )

    async def close(self) -> None:
        for view in (self.actuator_lease, self.quota_lease):
            if view is not None:
                await view.stop()
        for t in list(self._timers):
            t.cancel()
        await self.flush()
        if self._writer is not None:
            self._writer.cancel()


__all__ = ["SimCluster"]
