"""actuator: the gang barrier, driven by the durable plan records.

One actuator is active at a time, chosen by a lease whose revision is the fencing token;
the others stand by. The active one follows the ``plans`` bucket and drives every record
that still owes it work (``confirmed``, ``actuating``, a drop not yet announced) to its
end (``services.actuator.driving``): a confirmation redelivered, a plan left half-done by
a crashed or paused holder, a confirmation written while no actuator ran: all are the
same case, found by reading the records. A sweep every half second restarts any drive
that failed (with a backoff per plan), so nothing waits for a state change.

An actuator that loses its lease stops its drives before their next write (the lease
is checked before each one, on this process's clock), and stands by again; it never
exits because of a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time

import structlog
from nats.js.kv import KeyValue

from gangpreempt.bus import Lease, leases_bucket, plans_bucket
from gangpreempt.bus.leasing import current_token
from gangpreempt.bus.records import RecordBook, RecordStore
from gangpreempt.errors import Fenced, Transient
from gangpreempt.planning.legitimacy import protected_namespaces
from gangpreempt.planning.records import PlanRecord, actuator_owes
from gangpreempt.replica import StateReplica
from gangpreempt.telemetry import metrics
from services.actuator.driving import Driver
from services.actuator.orders import QuotaOrders
from services.actuator.sinks import LogSink, SimSink, Sink
from services.heap import freeze_while_loading
from services.runtime import ServiceContext, sleep_or_stop

log = structlog.get_logger("gangpreempt.actuator")

LEASE_KEY = "actuator"
SWEEP_S = 0.5
BACKOFF_MAX_S = 5.0


class Actuator:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.replica = StateReplica(ctx.nc, ctx.topology, "actuator")
        freeze_while_loading(self.replica)
        self.sink: Sink = (
            SimSink(ctx.nc, ctx.topology) if ctx.settings.sink == "sim" else LogSink(self.replica)
        )
        self.holder = f"{os.uname().nodename}-{os.getpid()}-{secrets.token_hex(3)}"
        self.book = RecordBook(ctx.nc, ctx.topology, 2 * ctx.settings.record_retention)
        self.book.on_change(self.changed)
        self.wake = asyncio.Event()
        self.owed: set[str] = set()  # plans whose record owes the actuator work
        self.drives: dict[str, asyncio.Task[None]] = {}
        self.retry_at: dict[str, tuple[float, int]] = {}  # plan -> (not before, failures)
        self.lease: Lease | None = None
        self.leases: KeyValue | None = None
        self.driver: Driver | None = None
        self.orders: QuotaOrders | None = None

    def changed(self, old: PlanRecord | None, new: PlanRecord | None) -> None:
        current = new or old
        if current is None:
            return
        if new is not None and actuator_owes(new):
            self.owed.add(new.plan_id)
            self.wake.set()
        else:
            self.owed.discard(current.plan_id)
            self.retry_at.pop(current.plan_id, None)

    # -- fencing ---------------------------------------------------------------------------
    async def fence(self) -> None:
        """Before a write to the API server: the lease is ours on this process's clock
        and, asked of NATS now, its token is still ours (``Fenced`` otherwise)."""
        assert self.lease is not None
        assert self.leases is not None
        token = self.lease.check()
        try:
            current = await current_token(self.leases, LEASE_KEY)
        except Exception as exc:  # cannot tell: write nothing
            raise Fenced(f"the lease cannot be read: {exc!r}") from exc
        if current != token:
            raise Fenced(f"the lease is held under token {current}, not {token}")

    # -- the active instance -----------------------------------------------------------------
    def checks(self, leases: KeyValue) -> QuotaOrders:
        if self.orders is None:
            self.orders = QuotaOrders(self.ctx, self.sink, leases, self.replica)
        return self.orders

    async def active(self, lease: Lease, term: asyncio.Event) -> None:
        """Drive the records that owe work until the lease is lost or the service stops
        (then ``term`` is set)."""
        try:
            await self._active(lease)
        finally:
            term.set()

    async def _active(self, lease: Lease) -> None:
        while not (self.ctx.stop.is_set() or lease.lost.is_set()):
            self.wake.clear()
            now = time.monotonic()
            for plan_id in sorted(self.owed):
                if plan_id in self.drives:
                    continue
                if self.retry_at.get(plan_id, (0.0, 0))[0] > now:
                    continue
                task = asyncio.ensure_future(self.drive(plan_id))
                self.drives[plan_id] = task
                task.add_done_callback(self.forget_drive)
            waiters = {
                asyncio.ensure_future(self.wake.wait()),
                asyncio.ensure_future(self.ctx.stop.wait()),
                asyncio.ensure_future(lease.lost.wait()),
            }
            await asyncio.wait(waiters, timeout=SWEEP_S, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()

    def forget_drive(self, task: asyncio.Task[None]) -> None:
        for plan_id, running in list(self.drives.items()):
            if running is task:
                del self.drives[plan_id]

    async def drive(self, plan_id: str) -> None:
        assert self.driver is not None
        try:
            await self.driver.drive(plan_id)
            self.retry_at.pop(plan_id, None)
            return
        except Fenced as exc:
            log.warning("fenced: not driving the plan further", plan_id=plan_id, error=str(exc))
        except Transient as exc:
            log.info("plan not driven now; will retry", plan_id=plan_id, error=str(exc))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("plan drive failed; will retry", plan_id=plan_id)
        _, failures = self.retry_at.get(plan_id, (0.0, 0))
        delay = min(BACKOFF_MAX_S, 0.2 * 2**failures)
        self.retry_at[plan_id] = (time.monotonic() + delay, failures + 1)
        self.wake.set()

    async def stand_down(self, grace: float = 0.0) -> None:
        """Stop every drive (each stops at its next await, before its next write), after
        ``grace`` seconds for them to finish (a SIGTERM lets them; a lost lease does not)."""
        running = list(self.drives.values())
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(BaseException):
                await task
        self.drives.clear()

    # -- running -----------------------------------------------------------------------------
    async def run(self) -> None:
        if self.ctx.settings.mode == "shadow":
            # Shadow mode writes nothing: no lease, no plan driven, no check, no gate, and
            # not one call to the API server (quota publishes no request to act on).
            log.info("shadow mode: the actuator writes nothing")
            await self.ctx.stop.wait()
            return
        if self.ctx.settings.sink != "kubernetes":
            await self._run()
            return
        # only now: the client's imports cost a start that does not use them
        from services.actuator.kubernetes import KubeSink
        from services.kube.client import KubeApi

        async with KubeApi.connect(self.ctx.settings, "actuator") as api:
            api.before_write = self.fence
            settings = self.ctx.settings
            sink = await KubeSink.create(
                api,
                self.replica,
                settings.pod_eviction,
                self.lease_invalid,
                settings.eviction_concurrency,
            )
            sink.stop = self.ctx.stop
            self.sink = sink
            await self._run()

    def lease_invalid(self) -> bool:
        return self.lease is None or not self.lease.valid()

    async def buckets(self) -> tuple[KeyValue, KeyValue]:
        ctx = self.ctx
        if ctx.settings.provision:
            replicas = ctx.settings.stream_replicas
            return (
                await plans_bucket(ctx.js, ctx.topology, replicas),
                await leases_bucket(ctx.js, ctx.topology, ctx.settings.lease_ttl, replicas),
            )
        # provisioned by an admin: bind, do not create
        return (
            await ctx.js.key_value(ctx.topology.plans_bucket),
            await ctx.js.key_value(ctx.topology.leases_bucket),
        )

    async def _run(self) -> None:
        ctx = self.ctx
        kv, leases = await ctx.persevering("bind the buckets", self.buckets)
        self.leases = leases
        lease = self.lease = Lease(leases, LEASE_KEY, self.holder, ctx.settings.lease_ttl)
        metrics.LEASE_HOLDER.labels(ctx.service).set_function(lambda: float(lease.valid()))
        metrics.FENCING_TOKEN.labels(ctx.service).set_function(lambda: float(lease.token or 0))
        self.driver = Driver(
            RecordStore(kv),
            self.book,
            self.replica,
            self.sink,
            ctx.publisher,
            lease,
            ctx.now,
            f"actuator/{self.holder}",
            ctx.settings.pod_eviction,
            ctx.settings.plan_timeout,
            protected_namespaces(ctx.settings.protected_namespaces),
        )
        await ctx.persevering("follow the cluster state", self.replica.start)
        await ctx.persevering("read the plan records", self.book.start)
        try:
            while not ctx.stop.is_set():
                if await lease.acquire(ctx.stop) is None:
                    return
                self.retry_at.clear()
                term = asyncio.Event()
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(lease.keep(ctx.stop))
                    tg.create_task(self.checks(leases).run(term))
                    tg.create_task(self.active(lease, term))
                await self.stand_down()
                if not ctx.stop.is_set():
                    log.warning("lease lost; standing by", fencing_token=lease.token)
                    await sleep_or_stop(ctx.stop, 0.1)
        finally:
            await self.stand_down(grace=5.0 if lease.valid() else 0.0)
            if not lease.lost.is_set():
                await lease.release()
            await self.book.stop()


async def main(ctx: ServiceContext) -> None:
    await Actuator(ctx).run()


__all__ = ["LEASE_KEY", "Actuator", "main"]
