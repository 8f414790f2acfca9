"""actuator: the gang barrier.

A plan is actuated only when the actuator holds both its ``PlanProposed`` (covering every
pod set of the gang) and its ``PlanConfirmed``, and a re-read of the live objects shows
every victim is the same incarnation (uid, resourceVersion), still holding quota, and the
preemptor still pending. A rejection, a timeout or a stale plan gives ``PlanDropped`` and
touches nothing.

Each (plan, victim) actuation is claimed in the ``plans`` bucket with compare-and-set
before the side effect, so a restarted or duplicated actuator never actuates a victim
twice; a claim left by a crash is completed with the same idempotent eviction. One
actuator is active at a time, chosen by a lease whose revision is the fencing token sent
with every eviction. The proposal and confirmation messages stay unacknowledged until
the plan is resolved, so a crash gives them back to the next actuator.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import msgspec
import structlog
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from gangpreempt import events
from gangpreempt.bus import HOLD, Lease, encode_token, leases_bucket, plans_bucket
from gangpreempt.bus.consuming import Delivery
from gangpreempt.errors import Transient
from gangpreempt.planning.barrier import PlannedObject, stale_reason
from gangpreempt.planning.nodeconfirm import placement_gap
from gangpreempt.planning.nodeplan import is_node_level
from gangpreempt.replica import StateReplica
from services import simwire
from services.actuator.kubernetes import KubeSink
from services.actuator.sinks import LogSink, SimSink, Sink
from services.kube.client import ApiError, KubeApi
from services.livestate import key_of
from services.runtime import ServiceContext, sleep_or_stop

log = structlog.get_logger("gangpreempt.actuator")

KUEUE_EVICTION = "kueue"
CLAIMED = "claimed"
DONE = "done"


class Record(msgspec.Struct, frozen=True):
    state: str
    fencing_token: int
    at: float


class Held:
    __slots__ = ("confirmed", "deliveries", "proposal", "since", "started")

    def __init__(self) -> None:
        self.proposal: events.PlanProposed | None = None
        self.confirmed: events.PlanConfirmed | None = None
        self.deliveries: list[Delivery] = []
        self.since = time.monotonic()
        self.started = False


def fault(point: str) -> None:
    """Test hook: ``GANGPREEMPT_FAULT=<point>`` kills this process with SIGKILL there."""
    if os.environ.get("GANGPREEMPT_FAULT") == point:
        log.warning("fault injected: SIGKILL", point=point)
        os.kill(os.getpid(), signal.SIGKILL)


class Actuator:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.replica = StateReplica(ctx.nc, ctx.topology, "actuator")
        self.sink: Sink = (
            SimSink(ctx.nc, ctx.topology) if ctx.settings.sink == "sim" else LogSink(self.replica)
        )
        self.held: dict[str, Held] = {}
        self.lock = asyncio.Lock()
        self.running: set[asyncio.Task[None]] = set()  # plans being actuated, one task each
        self.records: set[asyncio.Future[int]] = set()  # "done" records being written
        self.kv: KeyValue | None = None
        self.lease: Lease | None = None
        topo = ctx.topology
        self.consumer = ctx.decisions_consumer(
            [
                topo.event_subject(events.PlanProposed),
                topo.event_subject(events.PlanConfirmed),
                topo.event_subject(events.PlanRejected),
            ],
            self.on_event,
            ack_wait=ctx.settings.plan_timeout + 5.0,
        )

    @property
    def token(self) -> int:
        assert self.lease is not None
        assert self.lease.token is not None
        return self.lease.token

    # -- the barrier -----------------------------------------------------------------------
    async def on_event(self, event: Any, delivery: Delivery) -> object:
        async with self.lock:
            if isinstance(event, events.PlanRejected):
                await self.drop(event.plan_id, event.preemptor, f"rejected: {event.reason}")
                return None
            if not isinstance(event, events.PlanProposed | events.PlanConfirmed):
                return None
            held = self.held.setdefault(event.plan_id, Held())
            held.deliveries.append(delivery)
            if isinstance(event, events.PlanProposed):
                held.proposal = event
            else:
                held.confirmed = event
            if held.proposal is not None and held.confirmed is not None and not held.started:
                held.started = True
                task = asyncio.ensure_future(self.actuate(held.proposal))
                self.running.add(task)
                task.add_done_callback(self.finished)
            return HOLD

    def fenced(self) -> bool:
        """This actuator lost its lease: another one may be acting, write nothing more."""
        return self.lease is not None and self.lease.lost.is_set()

    def finished(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("plan actuation failed", error=repr(task.exception()))

    async def settle(self, plan_id: str) -> None:
        held = self.held.pop(plan_id, None)
        for d in held.deliveries if held else []:
            try:
                await d.msg.ack()
            except Exception as exc:  # already settled elsewhere: nothing to undo
                log.debug("ack failed", error=repr(exc))

    async def drop(self, plan_id: str, preemptor: str, reason: str) -> None:
        await self.ctx.publisher.publish(
            events.PlanDropped(
                id=f"dropped-{plan_id}",
                occurred_at=self.ctx.now(),
                plan_id=plan_id,
                preemptor=preemptor,
                reason=reason,
            )
        )
        log.info("plan dropped", plan_id=plan_id, workload=preemptor, reason=reason)
        await self.settle(plan_id)

    async def actuate(self, p: events.PlanProposed) -> None:
        fault("before-actuation")
        await self.replica.wait_seq(p.state_seq)
        state = self.replica.state
        if is_node_level(state, p.preemptor):
            gap = placement_gap(state, p.preemptor, p.placement)
            if gap is not None:
                await self.drop(p.plan_id, p.preemptor, f"the gang is not placed: {gap}")
                return
        else:
            wl = state.workloads.get(key_of(p.preemptor))
            missing = sorted({ps.name for ps in wl.pod_sets} - set(p.pod_sets)) if wl else []
            if missing:
                await self.drop(
                    p.plan_id, p.preemptor, f"plan does not cover pod sets {', '.join(missing)}"
                )
                return
        pods = [pod for v in p.victims for pod in v.pods]
        try:
            live = await self.sink.read([p.preemptor, *(v.object for v in p.victims), *pods])
        except Exception as exc:  # the truth cannot be read: touch nothing
            if not isinstance(exc, Transient | ApiError):
                log.exception("live read failed", plan_id=p.plan_id)
            await self.drop(p.plan_id, p.preemptor, f"live read failed: {exc!r}")
            return
        stale = stale_reason(
            PlannedObject(p.preemptor, p.preemptor_uid, ""),
            [
                PlannedObject(v.object, v.uid, v.resource_version, v.pods, v.pod_uids)
                for v in p.victims
            ],
            live,
        )
        if stale is not None:
            await self.drop(p.plan_id, p.preemptor, f"stale: {stale}")
            return
        acks: list[asyncio.Future[Any]] = []  # the events' acks, awaited once all are sent
        results = await asyncio.gather(*(self.actuate_victim(p, v, acks) for v in p.victims))
        done = [v.object for v, ok in zip(p.victims, results, strict=True) if ok]
        publisher = self.ctx.publisher
        plan_ack = await publisher.send(
            events.PlanActuated(
                id=f"actuated-{p.plan_id}",
                occurred_at=self.ctx.now(),
                plan_id=p.plan_id,
                preemptor=p.preemptor,
                victims=tuple(done),
                fencing_token=self.token,
            )
        )
        await asyncio.wait_for(asyncio.gather(*acks, plan_ack), publisher.ack_timeout)
        log.info("plan actuated", plan_id=p.plan_id, workload=p.preemptor, victims=len(done))
        await self.settle(p.plan_id)

    async def actuate_victim(
        self, p: events.PlanProposed, v: events.PlannedVictim, acks: list[asyncio.Future[Any]]
    ) -> bool:
        assert self.kv is not None
        key = f"{p.plan_id}.{encode_token(v.object)}"
        record = Record(CLAIMED, self.token, time.time())
        try:
            revision = await self.kv.create(key, msgspec.msgpack.encode(record))
        except KeyWrongLastSequenceError:
            entry = await self.kv.get(key)
            previous = msgspec.msgpack.decode(entry.value or b"", type=Record)
            if previous.state == DONE:
                log.info("already actuated", plan_id=p.plan_id, victim=v.object)
                return True
            revision = entry.revision or 0  # claimed by a run that crashed: finish it
        fault("after-claim")
        try:
            reply = await self.evict(p, v)
        except Exception as exc:  # a sink defect must not strand the plan: report it
            log.exception("eviction failed", plan_id=p.plan_id, victim=v.object)
            reply = simwire.EvictReply(ok=False, detail=repr(exc))
        if not reply.ok:
            log.error("eviction refused", plan_id=p.plan_id, victim=v.object, detail=reply.detail)
            return False
        done_record = msgspec.msgpack.encode(Record(DONE, self.token, time.time()))
        actuated = events.VictimActuated(
            id=f"victim-{p.plan_id}-{v.object}",
            occurred_at=self.ctx.now(),
            plan_id=p.plan_id,
            preemptor=p.preemptor,
            victim=v.object,
            victim_uid=v.uid,
            reason=v.reason,
            sink=self.sink.name,
            fencing_token=self.token,
        )
        # The record only matters to a restart (which redoes the idempotent eviction); the
        # event is what others wait for. Both are written, the plan does not wait on the record.
        written = asyncio.ensure_future(self.kv.update(key, done_record, last=revision))
        self.records.add(written)
        written.add_done_callback(self.records.discard)
        acks.append(await self.ctx.publisher.send(actuated))
        return True

    async def evict(self, p: events.PlanProposed, v: events.PlannedVictim) -> simwire.EvictReply:
        return await self.sink.evict(
            simwire.EvictRequest(
                ref=v.object,
                uid=v.uid,
                plan_id=p.plan_id,
                preemptor=p.preemptor,
                reason=v.reason,
                fencing_token=self.token,
                pods=v.pods,
                mode=self.mode_for(v.object),
                pod_uids=v.pod_uids,
            )
        )

    def mode_for(self, ref: str) -> str:
        """How a victim is actuated: a Kueue Workload is evicted the way Kueue does it,
        pods are deleted or soft-evicted (GANGPREEMPT_POD_EVICTION)."""
        kind, _, key = ref.partition("/")
        if kind == "Workload" and key in self.replica.state.workloads:
            return KUEUE_EVICTION
        return self.ctx.settings.pod_eviction

    async def expire(self, stop: asyncio.Event) -> None:
        timeout = self.ctx.settings.plan_timeout
        while not await sleep_or_stop(stop, min(0.5, timeout / 4)):
            async with self.lock:
                now = time.monotonic()
                for plan_id, held in list(self.held.items()):
                    if held.started or now - held.since <= timeout:
                        continue
                    half = held.proposal or held.confirmed
                    waiting = "confirmation" if held.confirmed is None else "proposal"
                    preemptor = half.preemptor if half is not None else ""
                    await self.drop(plan_id, preemptor, f"timed out waiting for its {waiting}")

    async def run(self) -> None:
        if self.ctx.settings.sink != "kubernetes":
            await self._run()
            return
        async with KubeApi.connect(self.ctx.settings, "actuator") as api:
            self.sink = await KubeSink.create(
                api, self.replica, self.ctx.settings.pod_eviction, self.fenced
            )
            await self._run()

    async def _run(self) -> None:
        ctx = self.ctx
        if ctx.settings.provision:
            replicas = ctx.settings.stream_replicas
            self.kv = await plans_bucket(ctx.js, ctx.topology, replicas)
            leases = await leases_bucket(ctx.js, ctx.topology, ctx.settings.lease_ttl, replicas)
        else:  # provisioned by an admin: bind, do not create
            self.kv = await ctx.js.key_value(ctx.topology.plans_bucket)
            leases = await ctx.js.key_value(ctx.topology.leases_bucket)
        self.lease = Lease(
            leases, "actuator", f"{os.uname().nodename}-{os.getpid()}", ctx.settings.lease_ttl
        )
        await self.replica.start()
        if await self.lease.acquire(ctx.stop) is None:
            return
        lease = self.lease
        stop = asyncio.Event()  # the service stops, or the lease is lost

        async def watch_stop() -> None:
            waiters = {
                asyncio.ensure_future(ctx.stop.wait()),
                asyncio.ensure_future(lease.lost.wait()),
            }
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()
            stop.set()

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(watch_stop())
                tg.create_task(lease.keep(stop))
                tg.create_task(self.consumer.run(stop))
                tg.create_task(self.expire(stop))
            if self.running:  # plans in progress finish before we go
                await asyncio.wait(self.running, timeout=5)
            pending_records = [r for r in self.records if not r.done()]
            if pending_records:
                await asyncio.wait(pending_records, timeout=5)
        finally:
            if not lease.lost.is_set():
                await lease.release()


async def main(ctx: ServiceContext) -> None:
    await Actuator(ctx).run()


__all__ = ["Actuator", "main"]
