"""A service's own copy of the cluster state, rebuilt from the STATE stream (the last
message of every subject) and kept current by a ``Follower`` (which survives NATS
restarts). A state event that does not decode, is not a state event, or carries an
object that fails validation (a negative count or quantity, a priority outside int32)
is dead-lettered with the reason and not applied.

A ``StateChunk`` is applied change by change, in order, as if each had come on its own
subject: listeners hear each change; one change that does not apply is dead-lettered
(the chunk, with the change named) and the others apply.

``complete`` turns true once the replica has seen ingest's ``StateComplete`` marker: from
then on it holds at least the whole starting state (listeners hear it as a change of
kind ``StateComplete`` with no object)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from opentelemetry import trace

from gangpreempt import events
from gangpreempt.bus.consuming import DeadLetters, describe_undecodable
from gangpreempt.bus.following import Follower
from gangpreempt.bus.statechunks import ChunkLedger, Ref
from gangpreempt.bus.topology import Topology
from gangpreempt.errors import Transient
from gangpreempt.model import kinds
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.telemetry import metrics
from gangpreempt.telemetry.tracing import MAX_LINKS, link_of

log = structlog.get_logger("gangpreempt.replica")


class StateReplica:
    def __init__(
        self, nc: Client, topology: Topology, service: str, ledger: ChunkLedger | None = None
    ) -> None:
        self.nc = nc
        # told of every object's stored version in stream order (ingest: which chunks
        # are no longer needed)
        self.ledger = ledger
        self.js = nc.jetstream()
        self.topology = topology
        self.state = ClusterState()
        self.seq = 0  # last STATE stream sequence applied
        self.complete = False  # ingest's starting state is all here
        self._advanced = asyncio.Condition()
        self._listeners: list[Callable[[str, Any, Any], None]] = []
        self.pods = PodIndex(self.state)  # pods by node and by gang, in step with the state
        self.dead_letters = DeadLetters(nc, topology, service)
        self._pending_dlq: set[asyncio.Task[None]] = set()
        metrics.state_objects(self, lambda replica: kinds.counts(replica.state))
        # Span contexts of the STATE messages applied since ``take_links`` last ran.
        self._links: dict[int, trace.SpanContext] = {}
        self._last_parent: str | None = None
        self.follower = Follower(
            nc,
            topology.state_stream,
            topology.state_wildcard,
            self._on_msg,
            DeliverPolicy.LAST_PER_SUBJECT,
        )

    def on_change(self, listener: Callable[[str, Any, Any], None]) -> None:
        """``listener(kind, old, new)`` after each applied change (None for absent)."""
        self._listeners.append(listener)

    async def start(self) -> None:
        await self.follower.start()

    async def stop(self) -> None:
        await self.follower.stop()

    def take_links(self) -> list[trace.SpanContext]:
        """The span contexts of the STATE batches applied since the last call (what a
        quota cycle links its span to), newest last."""
        links = list(self._links.values())
        self._links.clear()
        return links

    async def _on_msg(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        parent = msg.headers.get("traceparent") if msg.headers else None
        if parent is not None and parent != self._last_parent:  # a batch shares one
            self._last_parent = parent
            link = link_of(msg.headers)
            if link is not None:
                self._links.pop(link.span_id, None)
                self._links[link.span_id] = link
                if len(self._links) > MAX_LINKS:
                    self._links.pop(next(iter(self._links)))
        # Set before the changes apply, so listeners see the sequence they come from;
        # nothing awaits until they are applied, so no waiter sees it early.
        self.seq = max(self.seq, seq)
        # the objects this message stored, for a ledger only (none: not collected)
        refs: list[Ref] | None = [] if self.ledger is not None else None
        chunk = False
        change: tuple[str, Any, Any] | None = None
        failed: Exception | None = None  # a listener's, raised once the message is in
        try:
            event = events.decode(msg.data)
            if msg.subject != self.topology.subject_of(event):
                raise msgspec.ValidationError(
                    f"{events.event_type(event)} {event.id} does not belong on {msg.subject}"
                )
            if isinstance(event, events.StateChunk):
                chunk = True
                bad, failed = self._apply_chunk(event, refs)
                if bad:
                    self._dead_letter(msg, f"cannot apply state: chunk {event.id}: {bad}")
            elif isinstance(event, events.ObjectUpserted | events.ObjectDeleted):
                change = self._apply(event)
                if refs is not None:
                    refs.append((event.kind, event.key))
            elif isinstance(event, events.StateComplete):
                if not self.complete:
                    log.info("starting state complete", source=event.source, seq=seq)
                self.complete = True
                change = ("StateComplete", None, None)
            else:
                raise msgspec.ValidationError(f"{events.event_type(event)} is not a state event")
        except (msgspec.DecodeError, KeyError) as exc:
            self._dead_letter(msg, f"cannot apply state: {exc}")
        if change is not None:
            failed = self._heard(change)
        if self.ledger is not None and refs:
            self.ledger.note(seq, refs, chunk)
        async with self._advanced:
            self._advanced.notify_all()
        if failed is not None:
            raise failed  # a listener's bug: reported as before, the state kept whole

    def _heard(self, change: tuple[str, Any, Any]) -> Exception | None:
        """``_notify``; a listener's error is logged and returned, not raised, so that
        what the message holds still applies in full (the rest of a chunk, the ledger's
        note, the waiters)."""
        try:
            self._notify(change)
        except Exception as exc:
            log.exception("a state listener failed", kind=change[0])
            return exc
        return None

    def _notify(self, change: tuple[str, Any, Any]) -> None:
        self.pods.changed(*change)
        for listener in self._listeners:
            listener(*change)

    def _apply(self, event: events.ObjectUpserted | events.ObjectDeleted) -> tuple[str, Any, Any]:
        """One object's change applied to the state: (kind, old, new)."""
        if isinstance(event, events.ObjectUpserted):
            new = kinds.decode_object(event.kind, event.body)
            if kinds.key_of(new) != event.key:
                raise msgspec.ValidationError(
                    f"{event.kind} {event.key}: its body is {kinds.key_of(new)}"
                )
            old = kinds.get(self.state, event.kind, kinds.key_of(new))
            kinds.put(self.state, new)
            return (event.kind, old, new)
        return (event.kind, kinds.remove(self.state, event.kind, event.key), None)

    def _apply_chunk(
        self, event: events.StateChunk, refs: list[Ref] | None
    ) -> tuple[str, Exception | None]:
        """A chunk's changes applied in order, each heard by the listeners before the
        next applies; one that does not apply is left out (and named in the returned
        reason), the others still apply. A listener that fails on one change does not
        keep the next ones out either: the first such error is returned, as one message
        per object would have raised it."""
        bad: list[str] = []
        failed: Exception | None = None
        for change in event.changes:
            try:
                applied = self._apply(change)
            except (msgspec.DecodeError, KeyError) as exc:
                bad.append(f"{change.id}: {exc}")
                continue
            if refs is not None:
                refs.append((change.kind, change.key))
            error = self._heard(applied)
            if failed is None:
                failed = error
        return "; ".join(bad), failed

    def _dead_letter(self, msg: Msg, reason: str) -> None:
        etype, eid = describe_undecodable(msg.data)
        task = asyncio.ensure_future(self.dead_letters.send(msg, reason, etype, eid))
        self._pending_dlq.add(task)
        task.add_done_callback(self._pending_dlq.discard)

    async def wait_seq(self, seq: int, timeout: float = 5.0) -> None:
        if self.seq >= seq:  # the usual case: already there
            return
        try:
            async with asyncio.timeout(timeout), self._advanced:
                await self._advanced.wait_for(lambda: self.seq >= seq)
        except TimeoutError as exc:
            raise Transient(f"state replica at {self.seq}, not yet at {seq}") from exc

    async def caught_up(self, timeout: float = 5.0) -> int:
        """Wait until every STATE message stored before this call has been applied."""
        info = await self.js.stream_info(self.topology.state_stream)
        await self.wait_seq(info.state.last_seq, timeout)
        return self.seq


__all__ = ["StateReplica"]
