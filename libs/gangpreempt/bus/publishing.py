"""Publishing events: deterministic ``Nats-Msg-Id``, trace context in the headers, and a
size check on body plus headers before anything is sent (the server would otherwise
close the connection).

Group commit on DECISIONS: a decision event is sent at once when the publisher has
nothing in flight; the ones made while a send is being stored wait for its ack and then
go together, events of one type as one ``DecisionBatch`` message on their type's
subject (each keeping its id and trace context). So an idle publisher adds no wait, and
a busy one sends about one message per type per round trip instead of one per event.
The stream stores every event after the events made before it on its subject and about
its gang (``groups``); events about different gangs on different subjects, made in one
round, may be stored in another order than they were made.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.js.api import PubAck

from gangpreempt import events
from gangpreempt.bus.topology import Topology
from gangpreempt.errors import InvalidInput
from gangpreempt.telemetry import inject, metrics, publish_span

HEADER_TYPE = "gp-type"
HEADER_SERVICE = "gp-service"
HEADER_BATCH = "gp-batch"  # on a DecisionBatch: how many events it holds
# the headers every message gets from its publisher; the rest is trace context
OWN_HEADERS = frozenset(("Nats-Msg-Id", HEADER_TYPE, HEADER_SERVICE, HEADER_BATCH))
MAX_BATCH = 1000  # events in one DecisionBatch at most
ITEM_OVERHEAD = 16  # msgpack bytes around one item beside its body and trace context


class Oversized(InvalidInput):
    """An event larger than the server's max_payload (body and headers together). It
    carries what was not sent (the subject, the body and the headers), so the sender can
    dead-letter it (``bus.consuming.DeadLetters.send_unsent``) and go on."""

    def __init__(
        self,
        message: str,
        subject: str = "",
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.subject = subject
        self.body = body
        self.headers = dict(headers or {})

    @property
    def event_type(self) -> str:
        return self.headers.get(HEADER_TYPE, "")

    @property
    def event_id(self) -> str:
        return self.headers.get("Nats-Msg-Id", "")


def header_size(headers: dict[str, str]) -> int:
    """Bytes of a NATS header block: ``NATS/1.0\\r\\n``, one line per header, a blank line."""
    return 10 + sum(len(k) + 2 + len(v) + 2 for k, v in headers.items()) + 2


def subject_template(topology: Topology, subject: str) -> str:
    parts = subject.split(".")
    if len(parts) >= 5 and parts[1] == "state":
        return f"{topology.prefix}.state.{parts[2]}.{{namespace}}.{{name}}"
    return subject


def _stored(ack: asyncio.Future[PubAck], event: events.Event) -> None:
    """The stream stored ``event`` (a duplicate of one stored before is not counted)."""
    if not ack.cancelled() and ack.exception() is None and not ack.result().duplicate:
        metrics.published(event)


class _Waiting:
    """A decision event made while the publisher had a send in flight."""

    __slots__ = ("body", "etype", "future", "headers", "key", "size", "subject")

    def __init__(
        self, subject: str, etype: str, body: bytes, headers: dict[str, str], key: str | None
    ) -> None:
        self.subject = subject
        self.key = key
        self.etype = etype
        self.body = body
        self.headers = headers
        self.future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        # its bytes in a batch: body, trace context, the item's own framing
        trace = sum(len(k) + len(v) + 4 for k, v in headers.items() if k not in OWN_HEADERS)
        self.size = len(body) + trace + ITEM_OVERHEAD

    def trace(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k not in OWN_HEADERS}

    def settle(self, ack: PubAck | None, error: BaseException | None) -> None:
        if self.future.done():  # its caller stopped waiting
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            assert ack is not None
            self.future.set_result(ack)


def order_key(event: events.Event) -> str | None:
    """The gang an event is about (its order matters only against events about the same
    gang, and the events of its subject); None: it keeps its place against every event."""
    key = getattr(event, "preemptor", None) or getattr(event, "workload", None)
    return key if isinstance(key, str) and key else None


def groups(waiting: list[_Waiting], budget: int) -> list[list[_Waiting]]:
    """The events of a round in as few messages as their order allows, each at most
    ``budget`` bytes and ``MAX_BATCH`` events (an event alone may be larger: it was
    sized on its own). The stream stores them in the order of the returned groups; an
    event joins the last group of its subject unless an event made before it about the
    same gang (or one with no gang) is in a later group, so every event stays behind
    the earlier events of its subject and of its gang."""
    out: list[list[_Waiting]] = []
    sizes: list[int] = []
    last_of_subject: dict[str, int] = {}
    last_of_key: dict[str, int] = {}
    barrier = -1  # the last group holding an event about no gang
    for w in waiting:
        floor = len(out) - 1 if w.key is None else max(barrier, last_of_key.get(w.key, -1))
        g = last_of_subject.get(w.subject)
        if g is not None and g >= floor and len(out[g]) < MAX_BATCH and sizes[g] + w.size <= budget:
            out[g].append(w)
            sizes[g] += w.size
        else:
            g = len(out)
            out.append([w])
            sizes.append(w.size)
            last_of_subject[w.subject] = g
        if w.key is None:
            barrier = g
        else:
            last_of_key[w.key] = g
    return out


class Publisher:
    def __init__(
        self,
        nc: Client,
        topology: Topology,
        service: str,
        ack_timeout: float = 5.0,
        group_commit: bool = True,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.topology = topology
        self.service = service
        self.ack_timeout = ack_timeout
        self.group_commit = group_commit
        self._waiting: list[_Waiting] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batches = 0  # DecisionBatch messages sent
        self.batched = 0  # events sent in them

    async def publish(self, event: events.Event, *, subject: str | None = None) -> PubAck:
        """Publish to the event's subject (or ``subject``) and wait for the stream's ack."""
        ack = await self.send(event, subject=subject)
        return await asyncio.wait_for(ack, self.ack_timeout)

    async def send(
        self, event: events.Event, *, subject: str | None = None
    ) -> asyncio.Future[PubAck]:
        """Send now and return the stream's ack to await later. Sends from one task reach
        the stream in the order they were made, so a writer can keep several in flight
        without reordering them (the ack is awaited with a timeout by ``publish``; a
        caller of ``send`` does the same)."""
        subject = subject or self.topology.subject_of(event)
        body = events.encode(event)
        etype = events.event_type(event)
        headers = {"Nats-Msg-Id": event.id, HEADER_TYPE: etype, HEADER_SERVICE: self.service}
        template = subject_template(self.topology, subject)
        if template != subject:
            # A STATE object: no span of its own (one per object cost more CPU than the
            # publish itself); it carries the context of the batch it is part of.
            inject(headers)
            ack = await self._send(subject, body, headers, f"{etype} {event.id}")
            metrics.state_sent(etype)
            return ack
        with publish_span(subject, template, event.id, len(body)):
            inject(headers)
            if self.group_commit and self.topology.stream_for(subject) == (
                self.topology.decisions_stream
            ):
                ack = self._enqueue(subject, etype, body, headers, order_key(event))
            else:
                ack = await self._send(subject, body, headers, f"{etype} {event.id}")
        ack.add_done_callback(lambda done: _stored(done, event))
        return ack

    def _enqueue(
        self, subject: str, etype: str, body: bytes, headers: dict[str, str], key: str | None
    ) -> asyncio.Future[PubAck]:
        what = f"{etype} {headers['Nats-Msg-Id']}"
        self.check_size(body, headers, what=what, subject=subject)
        waiting = _Waiting(subject, etype, body, headers, key)
        self._waiting.append(waiting)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return waiting.future

    async def _flush(self) -> None:
        """Send what waits, one round at a time: a round's messages go out in order,
        and what is made while their acks are awaited waits for the next round."""
        while self._waiting:
            waiting, self._waiting = self._waiting, []
            sent: list[tuple[asyncio.Future[PubAck], list[_Waiting]]] = []
            for group in groups(waiting, self.nc.max_payload // 2):
                try:
                    sent.append((await self._send_group(group), group))
                except Exception as exc:  # NATS away: each caller sees it, and retries
                    for w in group:
                        w.settle(None, exc)
            for ack, group in sent:
                try:
                    stored = await asyncio.wait_for(ack, self.ack_timeout)
                except Exception as exc:
                    for w in group:
                        w.settle(None, exc)
                else:
                    for w in group:
                        w.settle(stored, None)

    async def _send_group(self, group: list[_Waiting]) -> asyncio.Future[PubAck]:
        first = group[0]
        stream = self.topology.stream_for(first.subject)
        if len(group) == 1:
            return await self.js.publish_async(
                first.subject, first.body, headers=first.headers, stream=stream
            )
        batch = events.batch([(w.body, w.trace()) for w in group], first.etype)
        headers = {
            "Nats-Msg-Id": batch.id,
            HEADER_TYPE: first.etype,
            HEADER_SERVICE: self.service,
            HEADER_BATCH: str(len(group)),
        }
        body = events.encode(batch)
        self.batches += 1
        self.batched += len(group)
        metrics.decision_batch(first.etype, len(group))
        return await self.js.publish_async(first.subject, body, headers=headers, stream=stream)

    async def _send(
        self, subject: str, body: bytes, headers: dict[str, str], what: str
    ) -> asyncio.Future[PubAck]:
        self.check_size(body, headers, what=what, subject=subject)
        return await self.js.publish_async(
            subject, body, headers=headers, stream=self.topology.stream_for(subject)
        )

    def check_size(
        self, body: bytes, headers: dict[str, str], what: str, subject: str = ""
    ) -> None:
        size = len(body) + header_size(headers)
        limit = self.nc.max_payload
        if size > limit:
            raise Oversized(
                f"{what}: {size} bytes with headers exceed the server's max_payload of "
                f"{limit} bytes; the event was not sent",
                subject,
                body,
                headers,
            )


__all__ = [
    "HEADER_BATCH",
    "HEADER_SERVICE",
    "HEADER_TYPE",
    "OWN_HEADERS",
    "Oversized",
    "Publisher",
    "groups",
    "header_size",
    "order_key",
]
