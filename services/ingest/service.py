"""ingest: turns a source into STATE events.

Source ``manifests`` (the scenario file or folder, re-read on change). With ``sim``
(default) ingest also runs the sim cluster: it applies ``Admitted`` events and the
actuator's evictions to its copy of the world, answers the actuator's live reads, and
plays the scenario's timeline. Without ``sim`` it only publishes what the files say.
Source ``kubernetes``: list + watch of the API server (``services.ingest.kubernetes``);
the sim cluster does not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import structlog
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gangpreempt import events
from gangpreempt.bus import leases_bucket
from gangpreempt.bus.consuming import DeadLetters, Delivery
from gangpreempt.bus.publishing import Oversized
from gangpreempt.bus.statechunks import Change, group_changes, ref_of
from gangpreempt.bus.status import IngestStatus, status_subject
from gangpreempt.errors import InvalidInput
from gangpreempt.model import kinds
from gangpreempt.model.workloads import Workload
from gangpreempt.replica import StateReplica
from gangpreempt.telemetry import publish_batch_span, tracer
from services import simwire
from services.heap import freeze_heap
from services.ingest.chunks import ChunkReaper, chunk_epoch
from services.ingest.journal import Journal, Line
from services.ingest.sim import Chunking, SimCluster, split_ref
from services.ingest.sources import ManifestSource
from services.ingest.timeline import Step, load_timeline, matches
from services.runtime import ServiceContext, fault, sleep_or_stop

if TYPE_CHECKING:
    from services.ingest.kubernetes import KubeSource

log = structlog.get_logger("gangpreempt.ingest")

ACK_WINDOW = 500  # state messages in flight before their acks are awaited
CHUNK_WINDOW = 8  # the same for chunks (each up to half of max_payload)
WHOLE = 20  # a publish of at least this many objects is taken for a whole state's (tests)


class Ingest:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.kube: KubeSource | None = None
        self.reaper = ChunkReaper(ctx.nc, ctx.topology)
        self.chunk_epoch = chunk_epoch()
        self.chunks_sent = 0
        if ctx.settings.source == "kubernetes":
            # The API server is the cluster: no sim, no scenario, no timeline. ingest's
            # replica reads STATE in order: it tells the chunk ledger what is stored.
            self.replica = StateReplica(ctx.nc, ctx.topology, "ingest", self.reaper.ledger)
            # only now: the client's imports cost a start that does not use them
            from services.ingest.kubernetes import KubeSource

            self.kube = KubeSource(ctx.settings, self.stream_objects)
            ctx.readiness.append(self.kube.published.is_set)
        elif not ctx.settings.scenario:
            raise InvalidInput(
                "ingest needs a scenario: --scenario PATH or GANGPREEMPT_SCENARIO "
                "(or GANGPREEMPT_SOURCE=kubernetes)"
            )
        self.scenario = ctx.settings.scenario or ""
        self.journal = Journal(ctx.settings.sim_journal) if ctx.settings.sim_journal else None
        self.dead_letters = DeadLetters(ctx.nc, ctx.topology, "ingest")
        self.sim = (
            SimCluster(
                ctx.publisher,
                ctx.settings.termination_delay,
                journal=self.journal,
                on_oversized=self.oversized,
                chunking=Chunking(ctx.settings.state_chunk, self.chunk_epoch, self.reaper.ledger),
            )
            if ctx.settings.sim and self.kube is None
            else None
        )
        self.steps = load_timeline(self.scenario) if self.sim else []
        # the steps an event triggers (the others are timed): looked at per event
        self.triggered = [i for i, s in enumerate(self.steps) if s.when is not None]
        # Files the timeline applies later are not part of the starting state.
        later = frozenset(str(Path(self.scenario) / s.apply) for s in self.steps if s.apply)
        self.source = ManifestSource(self.scenario, exclude=later)
        self.fired: set[int] = set()
        self.played: set[int] = set()  # steps whose changes are stored
        self.started = time.monotonic()
        # Manifests carry no resourceVersion: each published version gets one, as from an
        # API server, so a re-created object is never mistaken for its predecessor.
        self.epoch = f"m{int(time.time() * 1000)}"
        self.versions = itertools.count(1)
        # what the sim reads of the decisions: admissions, and the events a step waits for
        self.wanted = {"Admitted", *(s.when.event for s in self.steps if s.when is not None)}
        self.consumer = ctx.decisions_consumer(self.on_event, ignores=self.ignores)

    # -- source --------------------------------------------------------------------------
    async def publish_changes(self, force: bool = False) -> None:
        changes = self.source.changes(force)
        if changes is None:
            return
        await self.publish(*changes)

    async def publish(self, upserts: list[Any], deletes: list[tuple[str, str]]) -> None:
        """Upserts then deletions, in this order on the stream. With the sim they are
        changes to its world (its writer publishes them). Without, they are sent back to
        back with their acks awaited together, a window at a time, in chunks when they
        are many (``state_chunk``; a full republish of a large cluster is tens of
        thousands of objects)."""
        template = f"{self.ctx.topology.prefix}.state"
        with publish_batch_span(template, len(upserts) + len(deletes)):
            if self.sim is not None:
                for i, obj in enumerate(upserts):
                    if i == WHOLE // 2:
                        fault("relist")  # halfway through a whole state's publish
                    await self.sim.upsert(obj)
                for kind, key in deletes:
                    await self.sim.delete(kind, key)
            else:
                # made as they are sent: a whole state's are not all held at once
                changes: Iterable[Change] = itertools.chain(
                    (self._upserted(obj) for obj in upserts),
                    (self._deleted(kind, key) for kind, key in deletes),
                )
                count = len(upserts) + len(deletes)
                await self._send_changes(changes, count, len(upserts) > WHOLE // 2)
        if upserts or deletes:
            log.info("state published", upserted=len(upserts), deleted=len(deletes))

    async def _send_changes(self, changes: Iterable[Change], count: int, whole: bool) -> None:
        """The ``count`` ``changes`` on STATE, in order (``whole``: a whole state's, where
        the ``relist`` fault strikes halfway)."""
        per_chunk = self.ctx.settings.state_chunk
        groups: Iterable[list[Change]] = (
            group_changes(changes, per_chunk, self.ctx.publisher.nc.max_payload // 2)
            if per_chunk and count >= per_chunk
            else ([c] for c in changes)
        )
        sent: list[tuple[asyncio.Future[Any], list[Change], bool]] = []
        done = 0
        for group in groups:
            if whole and done <= WHOLE // 2 < done + len(group):
                fault("relist")  # halfway through a whole state's publish
            done += len(group)
            if len(group) > 1:
                chunk = events.StateChunk(
                    id=f"chunk-{self.chunk_epoch}-{self.chunks_sent}",
                    occurred_at=self.ctx.now(),
                    epoch=self.chunk_epoch,
                    n=self.chunks_sent,
                    changes=tuple(group),
                )
                self.chunks_sent += 1
                with contextlib.suppress(Oversized):  # then one message per change
                    sent.append((await self.ctx.publisher.send(chunk), group, True))
                    await self._settle(sent, CHUNK_WINDOW)
                    continue
            for change in group:
                try:
                    sent.append((await self.ctx.publisher.send(change), [change], False))
                except Oversized as exc:
                    await self.oversized(exc)
                await self._settle(sent, ACK_WINDOW)
        await self._settle(sent, 0)

    async def _settle(
        self, sent: list[tuple[asyncio.Future[Any], list[Change], bool]], window: int
    ) -> None:
        """Await the acks once more than ``window`` are outstanding; the chunk ledger
        hears of what was stored, in the order it was sent."""
        if len(sent) > window:
            timeout = self.ctx.publisher.ack_timeout + len(sent) * 0.01
            acks = await asyncio.wait_for(asyncio.gather(*(a for a, _, _ in sent)), timeout)
            if self.kube is None:  # with kubernetes, ingest's replica tells the ledger
                for ack, (_, group, chunk) in zip(acks, sent, strict=True):
                    self.reaper.ledger.note(ack.seq, map(ref_of, group), chunk)
            sent.clear()

    def _upserted(self, obj: Any) -> events.ObjectUpserted:
        version = f"{self.epoch}-{next(self.versions)}"
        if isinstance(obj, Workload) and not obj.resource_version:
            obj = msgspec.structs.replace(obj, resource_version=version)
        kind, key = kinds.kind_of(obj), kinds.key_of(obj)
        return events.ObjectUpserted(
            id=f"{kind}/{key}@{version}",
            occurred_at=self.ctx.now(),
            kind=kind,
            key=key,
            uid=getattr(obj, "uid", ""),
            resource_version=getattr(obj, "resource_version", ""),
            body=kinds.encode_object(obj),
        )

    def _deleted(self, kind: str, key: str) -> events.ObjectDeleted:
        return events.ObjectDeleted(
            id=f"{kind}/{key}@{self.epoch}-{next(self.versions)}-deleted",
            occurred_at=self.ctx.now(),
            kind=kind,
            key=key,
        )

    async def oversized(self, exc: Oversized) -> None:
        """An object too large for NATS (``max_payload``): logged and dead-lettered to
        ``<prefix>.dlq.ingest`` (its body cut to fit), and left off STATE; the other
        objects go on. STATE keeps the object's last version that fitted, if any; the
        object is tried again when it changes (and, from the Kubernetes API, at each
        full republish)."""
        reason = f"oversized: {exc}"
        log.error(
            "object too large to publish; dead-lettered",
            event_id=exc.event_id,
            subject=exc.subject,
            reason=reason,
        )
        try:
            await self.dead_letters.send_unsent(
                exc.subject, exc.body, reason, exc.event_type, exc.event_id
            )
        except Exception as error:  # NATS away: the log above still says it
            log.warning("dead letter not sent", event_id=exc.event_id, error=repr(error))

    async def watch(self) -> None:
        while not await sleep_or_stop(self.ctx.stop, self.ctx.settings.poll_interval):
            try:
                await self.publish_changes()
            except Exception as exc:  # NATS away: everything is published again next time
                log.warning("manifests not published; will retry", error=repr(exc))
                self.source.forget()

    # -- decisions (sim) -----------------------------------------------------------------
    def ignores(self, event_type: str) -> bool:
        """An event this service does nothing with (its type is known and is neither an
        admission for the sim nor one a timeline step waits for)."""
        return bool(event_type) and (self.sim is None or event_type not in self.wanted)

    async def on_event(self, event: Any, _delivery: Delivery) -> None:
        if self.sim is None:
            return
        if isinstance(event, events.Admitted):
            await self.sim.admit(event)
        preemptor = getattr(event, "preemptor", None) or getattr(event, "workload", None)
        for i in self.triggered:
            if i not in self.fired and matches(self.steps[i], events.event_type(event), preemptor):
                await self.fire(i)
        await self.sim.flush()  # acknowledged once what it changed is stored

    async def fire(self, *steps: int) -> None:
        """Play ``steps`` once, in this order; the journal remembers them across a restart,
        once what they changed is stored (a step cut short by a crash is played again: it
        is idempotent). Steps due together are played together: their changes go out back
        to back, one flush and one journal write for all of them, as a burst of arrivals
        reaches an API server's watchers."""
        assert self.sim is not None
        self.fired.update(steps)
        for i in steps:
            await self.play(self.steps[i])
        await self.sim.flush()
        if self.journal is not None:
            self.journal.write_many([Line(fired=i) for i in steps])
        self.played.update(steps)

    # -- timeline ------------------------------------------------------------------------
    def status(self) -> IngestStatus:
        timed = [i for i, s in enumerate(self.steps) if s.at is not None]
        triggered = [i for i, s in enumerate(self.steps) if s.when is not None]
        return IngestStatus(
            timed_steps=len(timed),
            timed_played=len(self.played.intersection(timed)),
            triggered_steps=len(triggered),
            triggered_played=len(self.played.intersection(triggered)),
        )

    def triggers_pending(self) -> bool:
        return any(i not in self.fired for i in self.triggered)

    async def play(self, step: Step) -> None:
        """One step, in a span of its own (the child of the event that triggered it): the
        STATE changes it makes carry it, and the quota cycle that decides on them links
        to it."""
        what = step.apply or step.delete or step.finish or ""
        with tracer().start_as_current_span("timeline step", attributes={"gangpreempt.step": what}):
            await self._play(step)

    async def _play(self, step: Step) -> None:
        assert self.sim is not None
        if step.apply:
            source = ManifestSource(str(Path(self.scenario) / step.apply))
            for obj in kinds.objects(source.read()):
                await self.sim.upsert(obj)
            log.info("timeline: applied", file=step.apply)
        elif step.delete:
            kind, key = split_ref(step.delete)
            await self.sim.delete(kind, key)
            log.info("timeline: deleted", object=step.delete)
        elif step.finish:
            await self.sim.finish(step.finish)

    async def run_timeline(self) -> None:
        timed = sorted((s.at or 0.0, i) for i, s in enumerate(self.steps) if s.at is not None)
        while timed:
            delay = self.started + timed[0][0] - time.monotonic()
            if delay > 0 and await sleep_or_stop(self.ctx.stop, delay):
                return
            # every step due by now goes in one batch (those of one moment, and those a
            # slow batch before made late)
            now = time.monotonic() - self.started
            due = [i for at, i in timed if at <= now]
            timed = timed[len(due) :]
            if todo := [i for i in due if i not in self.fired]:
                await self.fire(*todo)

    # -- requests from the actuator's sim sink ---------------------------------------------
    async def serve_requests(self) -> None:
        nc, topo = self.ctx.nc, self.ctx.topology

        async def on_read(msg: Msg) -> None:
            assert self.sim is not None
            if self.triggers_pending():
                # A scripted change may be due on an event already published: play it
                # first, so the read reflects it.
                await self.consumer.settled()
            req = simwire.decode(msg.data, simwire.ReadRequest)
            reply = simwire.ReadReply(objects=[self.sim.live(r) for r in req.refs])
            await msg.respond(simwire.encode(reply))

        async def on_evict(msg: Msg) -> None:
            assert self.sim is not None
            req = simwire.decode(msg.data, simwire.EvictRequest)
            await msg.respond(simwire.encode(await self.sim.evict(req)))

        async def on_stats(msg: Msg) -> None:
            assert self.sim is not None
            await msg.respond(simwire.encode(self.sim.stats()))

        subs = [
            await nc.subscribe(subject, cb=cb)
            for subject, cb in (
                (topo.sim_read, on_read),
                (topo.sim_evict, on_evict),
                (topo.sim_stats, on_stats),
            )
        ]
        await self.ctx.stop.wait()
        for sub in subs:
            await sub.unsubscribe()

    async def serve_status(self) -> None:
        """Answer status requests (``up --until-settled`` asks how far the timeline is)."""

        async def on_status(msg: Msg) -> None:
            await msg.respond(msgspec.json.encode(self.status()))

        subject = status_subject(self.ctx.topology, "ingest")
        sub = await self.ctx.persevering(
            "answer status requests", lambda: self.ctx.nc.subscribe(subject, cb=on_status)
        )
        try:
            await self.ctx.stop.wait()
        finally:
            await sub.unsubscribe()

    async def stream_objects(self) -> set[tuple[str, str]]:
        """(kind, key) of every object the STATE stream holds now."""
        await self.replica.caught_up()
        return {(kinds.kind_of(o), kinds.key_of(o)) for o in kinds.objects(self.replica.state)}

    async def leases(self) -> KeyValue:
        ctx = self.ctx
        if ctx.settings.provision:
            return await leases_bucket(
                ctx.js, ctx.topology, ctx.settings.lease_ttl, ctx.settings.stream_replicas
            )
        return await ctx.js.key_value(ctx.topology.leases_bucket)

    async def start_sim(self, sim: SimCluster) -> None:
        """Publish the scenario, or take up the world a previous run left (journal)."""
        ctx = self.ctx
        await ctx.persevering("bind the leases bucket", self.leases)
        await ctx.persevering(
            "follow the lease",
            lambda: sim.follow_lease(ctx.nc, ctx.topology.leases_bucket),
        )
        lines = self.journal.lines() if self.journal is not None else []
        if any(line.loaded or line.fired is not None or line.evict for line in lines):
            await self.take_up(sim, lines)
            self.source.changes(force=True)  # the files as they are now: the baseline
            return
        if lines:
            # The previous run died while publishing the starting state: publish what
            # STATE does not have yet (what it has may have been changed since).
            await self.take_up(sim, lines)
            have = {(kinds.kind_of(o), kinds.key_of(o)) for o in kinds.objects(sim.world)}
            changes = self.source.changes(force=True)
            missing = [
                o
                for o in (changes[0] if changes is not None else [])
                if (kinds.kind_of(o), kinds.key_of(o)) not in have
            ]
            await self.publish(missing, [])
            log.info("starting state completed", published=len(missing), had=len(have))
        else:
            await ctx.persevering("learn the state chunks", self.reaper.learn)
            if self.journal is not None:
                self.journal.write(start=time.time())
            await self.publish_changes(force=True)
        await sim.flush()  # the starting state is on the bus before anything else
        if self.journal is not None:
            self.journal.write(loaded=time.time())

    async def take_up(self, sim: SimCluster, lines: list[Line]) -> None:
        """The world as STATE and the journal left it."""
        ctx = self.ctx
        start = next((line.start for line in lines if line.start is not None), time.time())
        self.started = time.monotonic() - (time.time() - start)
        self.fired = {line.fired for line in lines if line.fired is not None}
        self.played = set(self.fired)  # journaled once their changes were stored
        replica = StateReplica(ctx.nc, ctx.topology, "ingest", self.reaper.ledger)
        await ctx.persevering("follow the cluster state", replica.start)
        last = await ctx.persevering("read the cluster state", replica.caught_up)
        await replica.stop()
        await sim.restore(replica.state, last)

    async def mark_complete(self, source: str, objects: int) -> None:
        """The whole starting state is on STATE: say so (``StateComplete``)."""
        event = events.StateComplete(
            id=f"complete-{self.epoch}", occurred_at=self.ctx.now(), source=source, objects=objects
        )
        await self.ctx.persevering(
            "mark the starting state complete", lambda: self.ctx.publisher.publish(event)
        )
        log.info("starting state complete", source=source, objects=objects)
        freeze_heap()  # the world (sim) or the objects known (kubernetes) live on

    async def run(self) -> None:
        status = asyncio.ensure_future(self.serve_status())
        try:
            await self._run()
        finally:
            await self.reaper.close()
            status.cancel()
            with contextlib.suppress(BaseException):
                await status

    async def _run(self) -> None:
        ctx = self.ctx
        if self.kube is not None:
            await ctx.persevering("follow the cluster state", self.replica.start)
            marked = False

            async def publish(upserts: list[Any], deletes: list[tuple[str, str]]) -> None:
                nonlocal marked
                await self.publish(upserts, deletes)
                if not marked:  # the first publish is the whole cluster as listed
                    await self.mark_complete("kubernetes", len(upserts))
                    marked = True

            await self.kube.run(ctx.stop, publish)
            return
        if self.sim is not None:
            await self.start_sim(self.sim)
            await self.mark_complete("sim", len(kinds.objects(self.sim.world)))
        else:
            await ctx.persevering("learn the state chunks", self.reaper.learn)
            await ctx.persevering("publish the manifests", lambda: self.publish_changes(force=True))
            await self.mark_complete("manifests", len(self.source.differ.keys()))
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.watch())
            if self.sim is not None:
                tg.create_task(self.consumer.run(self.ctx.stop))
                tg.create_task(self.serve_requests())
                tg.create_task(self.run_timeline())
        if self.sim is not None:
            await self.sim.close()


async def main(ctx: ServiceContext) -> None:
    await Ingest(ctx).run()


__all__ = ["Ingest", "main"]
