"""Consuming events from a durable pull consumer with explicit acks.

Settlement, classified once here: an event of a type the consumer was told its handler
ignores (``ignores``, by the ``gp-type`` header) -> ack, unread; the handler returns
normally -> ack; it returns
``HOLD`` -> it keeps the message and settles it later; it raises ``Transient`` (or any
unexpected error, up to ``max_attempts``) -> nak with backoff; the message does not
decode, is an event of a type that does not belong on its subject, or the handler raises
``InvalidInput`` -> term, and a copy goes to ``<prefix>.dlq.<service>`` with the reason
(the decode error's field path), the event type and id. The loop never dies: not on a bad
message, and not while NATS is away (a fetch or a settlement that fails is logged and
the loop goes on; what was not acknowledged comes back after the consumer's AckWait).

Batches (issue 25): nothing fetched is redelivered while it is still being worked on,
and no replica hoards what another could take.

- *Keep-alive.* While a batch is handled, every message of it not yet settled (waiting
  for its turn, or in its handler) is reported in progress (``msg.in_progress()``, the
  "working" ack, which restarts its AckWait) every ``KEEP_ALIVE`` x AckWait: from a
  timer while the handlers await, and before each message starts (a handler that
  blocks the loop stops the timer; the report before the next message then goes out,
  and the loop turns once so the client writes it and the acks before it). A single
  message whose handler holds the loop longer than AckWait cannot be helped here.
- *HOLD.* A held message is the handler's: the keep-alive stops for it when the
  handler returns ``HOLD``. The handler settles it, and reports it in progress itself
  if it means to hold it longer than AckWait; a hold that is forgotten then comes back
  after AckWait instead of being kept alive for good.
- *Batch size.* The consumer keeps an EWMA of the wall-clock seconds a batch took per
  message (handlers interleaved up to ``concurrency``) and fetches what it can handle
  in ``BATCH_BUDGET`` x AckWait: between 1 and ``batch`` (all of ``batch`` until the
  first measurement). AckWait is read from the server when binding (an admin
  configured it; ``ack_wait`` here is only what a consumer this side creates gets).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from gangpreempt import events
from gangpreempt.bus.publishing import (
    HEADER_BATCH,
    HEADER_SERVICE,
    HEADER_TYPE,
    header_size,
    subject_template,
)
from gangpreempt.bus.topology import Topology
from gangpreempt.errors import InvalidInput, Transient
from gangpreempt.telemetry import metrics, process_span
from gangpreempt.waiting import sleep_or_stop

log = structlog.get_logger("gangpreempt.bus")

HOLD = object()  # returned by a handler that settles the message itself later

KEEP_ALIVE = 0.25  # x AckWait: how often an unsettled message of a batch is kept alive
BATCH_BUDGET = 0.1  # x AckWait: how long a batch should take, by the measured rate
EWMA_WEIGHT = 0.3  # of the last batch's seconds per message in the running estimate


class Delivery:
    __slots__ = ("msg", "num_delivered", "subject")

    def __init__(self, msg: Msg) -> None:
        self.msg = msg
        self.subject = msg.subject
        try:
            self.num_delivered = msg.metadata.num_delivered
        except Exception:
            self.num_delivered = 1


Handler = Callable[[Any, Delivery], Awaitable[object]]


def describe_undecodable(data: bytes) -> tuple[str, str]:
    """Best-effort (type, id) of a message that failed to decode as an event."""
    try:
        raw = msgspec.msgpack.decode(data)
    except Exception:
        return "", ""
    if isinstance(raw, dict):
        return str(raw.get("type", "")), str(raw.get("id", ""))
    return "", ""


def dead_letter_class(reason: str) -> str:
    """The metric label of a dead letter's reason (the reasons ``Consumer`` gives)."""
    if reason.startswith("cannot decode"):
        return "decode"
    if reason.startswith("invalid:") and "does not belong on" in reason:
        return "wrong_subject"
    if reason.startswith("invalid"):
        return "invalid"
    if reason.startswith("handler failed"):
        return "handler_failed"
    if reason.startswith("cannot apply state"):
        return "state"
    if reason.startswith("oversized"):
        return "oversized"
    return "other"


class DeadLetters:
    def __init__(self, nc: Client, topology: Topology, service: str) -> None:
        self.js = nc.jetstream()
        self.nc = nc
        self.topology = topology
        self.service = service

    async def send(self, msg: Msg, reason: str, etype: str = "", eid: str = "") -> None:
        try:
            seq = str(msg.metadata.sequence.stream)
        except Exception:
            seq = "?"
        dedup = f"dlq-{self.service}-{msg.subject}-{seq}"
        await self._send(msg.subject, msg.data, seq, dedup, reason, etype, eid)

    async def send_item(
        self, msg: Msg, data: bytes, reason: str, etype: str = "", eid: str = ""
    ) -> None:
        """Dead-letter one event of a ``DecisionBatch`` message (``data``, its bytes):
        the batch's other events are handled."""
        try:
            seq = str(msg.metadata.sequence.stream)
        except Exception:
            seq = "?"
        dedup = f"dlq-{self.service}-{msg.subject}-{seq}-{eid}"
        await self._send(msg.subject, data, seq, dedup, reason, etype, eid)

    async def send_unsent(
        self, subject: str, data: bytes, reason: str, etype: str = "", eid: str = ""
    ) -> None:
        """Dead-letter an event that was never stored (a publisher refused it: it is
        ``Oversized``); ``subject`` is the one it was meant for, ``eid`` its id."""
        dedup = f"dlq-{self.service}-{subject}-{eid}"
        await self._send(subject, data, "", dedup, reason, etype, eid)

    async def _send(
        self,
        subject: str,
        data: bytes,
        seq: str,
        dedup: str,
        reason: str,
        etype: str,
        eid: str,
    ) -> None:
        headers = {
            "Nats-Msg-Id": dedup,
            "gp-dlq-reason": reason[:2000],
            "gp-dlq-subject": subject,
            "gp-dlq-stream-seq": seq,
            "gp-dlq-type": etype,
            "gp-dlq-id": eid,
            HEADER_SERVICE: self.service,
        }
        body = data
        room = self.nc.max_payload - header_size(headers)
        if len(body) > room:
            body = body[: max(0, room - 64)]
        dlq = self.topology.dlq_subject(self.service)
        await self.js.publish(dlq, body, headers=headers, stream=self.topology.dlq_stream)
        metrics.DEAD_LETTERS.labels(self.service, dead_letter_class(reason)).inc()
        log.warning("dead-lettered", subject=subject, reason=reason, event_type=etype, event_id=eid)


def _pending(msg: Msg) -> int | None:
    """Messages stored for the consumer behind this one, when the server said."""
    try:
        return int(msg.metadata.num_pending)
    except Exception:  # not a JetStream delivery (a test's hand-made message)
        return None


def backoff(num_delivered: int) -> float:
    return float(min(5.0, 0.2 * 2 ** max(0, num_delivered - 1)))


def batch_size(per_message: float | None, ack_wait: float, batch: int) -> int:
    """How many messages to fetch: what ``per_message`` seconds each lets a batch handle
    in ``BATCH_BUDGET`` x ``ack_wait``, between 1 and ``batch`` (``batch`` before any
    measurement)."""
    if per_message is None:
        return batch
    fits = int(ack_wait * BATCH_BUDGET / max(per_message, 1e-9))
    return max(1, min(batch, fits))


class KeepAlive:
    """The messages of a batch not yet settled, reported in progress to JetStream (which
    restarts their AckWait) once every ``period`` seconds at most."""

    def __init__(self, msgs: list[Msg], period: float) -> None:
        self.unsettled: dict[int, Msg] = dict(enumerate(msgs))
        self.period = period
        self.last = time.monotonic()  # the fetch: AckWait started then
        self.sent = 0

    def settled(self, index: int) -> None:
        """The message is acked, nak'd, termed, held by its handler or left to AckWait."""
        self.unsettled.pop(index, None)

    async def beat(self) -> None:
        """Report the unsettled messages in progress if a period has passed, then let the
        loop turn once (the client writes the reports and acks before the next handler,
        which may hold the loop, starts)."""
        now = time.monotonic()
        if self.unsettled and now - self.last >= self.period:
            self.last = now
            for msg in list(self.unsettled.values()):
                try:
                    await msg.in_progress()
                except Exception as exc:  # NATS away: it comes back after AckWait
                    log.debug("in-progress report failed", subject=msg.subject, error=repr(exc))
                else:
                    self.sent += 1
        await asyncio.sleep(0)

    async def ticking(self) -> None:
        """Beat on time for as long as the batch's handlers await (cancelled after it)."""
        while True:
            await asyncio.sleep(max(0.001, self.last + self.period - time.monotonic()))
            await self.beat()


class Consumer:
    """One durable pull consumer on ``subjects`` of ``stream``, dispatching to ``handler``."""

    def __init__(
        self,
        nc: Client,
        topology: Topology,
        service: str,
        *,
        durable: str,
        stream: str,
        subjects: list[str],
        handler: Handler,
        batch: int = 64,
        ack_wait: float = 30.0,
        max_attempts: int = 5,
        deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
        concurrency: int = 1,
        bind: bool = False,
        ignores: Callable[[str], bool] | None = None,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.topology = topology
        self.service = service
        self.durable = durable
        self.stream = stream
        self.subjects = subjects
        self.handler = handler
        self.batch = batch
        self.ack_wait = ack_wait
        self.max_attempts = max_attempts
        self.deliver_policy = deliver_policy
        self.concurrency = concurrency
        self.bind = bind  # bind to a consumer an admin created, never create one
        # Event types (by the publisher's ``gp-type`` header) the handler would do nothing
        # with: acknowledged unread, without decoding or a span (ingest reads every
        # decision for its sim, and needs only a few).
        self.ignores = ignores
        self.skipped = 0
        self.dead_letters = DeadLetters(nc, topology, service)
        self._psub: Any = None
        self.ready = asyncio.Event()
        self.per_message: float | None = None  # EWMA of a batch's seconds per message
        self.kept_alive = 0  # in-progress reports sent
        # ids of events handled (or dead-lettered): an event that comes again, in a
        # batch composed differently or in a batch given back, is dropped
        self.handled: OrderedDict[str, None] = OrderedDict()
        self.in_hand: set[str] = set()  # ids in their handlers now
        self.duplicates = 0

    async def settled(self, timeout: float = 2.0) -> None:
        """Wait until every message already stored for this consumer has been handled and
        acknowledged (for consumers whose handlers never hold messages), e.g. before
        answering a read that must reflect them."""
        await self.ready.wait()
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            info = await self._psub.consumer_info()
            if not info.num_pending and not info.num_ack_pending:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise Transient(f"{self.durable}: {info.num_pending} messages still pending")
            await asyncio.sleep(0.002)

    async def _subscribe(self) -> Any:
        if self.bind:
            return await self.js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
        return await self.js.pull_subscribe(
            "",
            durable=self.durable,
            stream=self.stream,
            config=ConsumerConfig(
                durable_name=self.durable,
                filter_subjects=self.subjects,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.ack_wait,
                max_ack_pending=10_000,
                deliver_policy=self.deliver_policy,
            ),
        )

    async def run(self, stop: asyncio.Event) -> None:
        while self._psub is None:
            try:
                self._psub = await self._subscribe()
            except Exception as exc:
                log.warning(
                    "consumer not bound yet; retrying", durable=self.durable, error=repr(exc)
                )
                if await sleep_or_stop(stop, 0.5):
                    return
        psub = self._psub
        await self._read_ack_wait(psub)
        self.ready.set()
        while not stop.is_set():
            try:
                msgs = await psub.fetch(self.fetch_size(), timeout=0.5)
            except (TimeoutError, NatsTimeoutError):
                metrics.idle(self.durable)
                continue
            except Exception as exc:  # NATS away: the client reconnects, we try again
                log.warning("fetch failed", durable=self.durable, error=repr(exc))
                await sleep_or_stop(stop, 0.2)
                continue
            await self._process_batch(msgs, stop)
        with contextlib.suppress(Exception):
            await psub.unsubscribe()
        # bound again by the next run (quota's next term as the lease holder)
        self._psub = None
        self.ready.clear()

    async def _read_ack_wait(self, psub: Any) -> None:
        """Take the consumer's AckWait from the server (a bound consumer's is whatever
        its provisioner gave it); keep ``ack_wait`` if the server does not say."""
        try:
            info = await psub.consumer_info()
            ack_wait = float(info.config.ack_wait or 0)
        except Exception as exc:
            log.warning("cannot read the consumer's AckWait", durable=self.durable, error=repr(exc))
            return
        if ack_wait > 0:
            self.ack_wait = ack_wait

    def fetch_size(self) -> int:
        """The next fetch's size: what the measured rate handles in a fraction of AckWait."""
        return batch_size(self.per_message, self.ack_wait, self.batch)

    def _measured(self, count: int, seconds: float) -> None:
        sample = seconds / count
        if self.per_message is None:
            self.per_message = sample
        else:
            self.per_message += EWMA_WEIGHT * (sample - self.per_message)

    async def _process_batch(self, msgs: list[Msg], stop: asyncio.Event) -> None:
        """Handle a batch, up to ``concurrency`` events at a time (handlers must then be
        safe to interleave at their awaits), keeping its unsettled messages alive. The
        events of a ``DecisionBatch`` message are handled like messages of their own;
        the message is settled once, when the last of them is."""
        started = time.monotonic()
        keep = KeepAlive(msgs, self.ack_wait * KEEP_ALIVE)
        ticker = asyncio.ensure_future(keep.ticking())
        units: list[tuple[Opened, events.AnyEvent, dict[str, str]]] = []
        try:
            for index, msg in enumerate(msgs):
                opened = await self._open(index, msg, keep)
                if opened is not None:
                    units += [(opened, event, headers) for event, headers in opened.events]

            async def one(opened: Opened, event: events.AnyEvent, headers: dict[str, str]) -> None:
                try:
                    if stop.is_set():
                        opened.give_back = True  # shutting down: back at once, not after AckWait
                    elif not self._handled_before(event.id):
                        await keep.beat()
                        self.in_hand.add(event.id)
                        try:
                            await self._handle(opened, event, headers)
                        finally:
                            self.in_hand.discard(event.id)
                except Exception as exc:  # a dead letter or span that failed: AckWait
                    log.warning(
                        "message not settled; it comes back after AckWait",
                        subject=opened.msg.subject,
                        error=repr(exc),
                    )
                    opened.held = True
                finally:
                    opened.left -= 1
                    if opened.left == 0:
                        await self._settle(opened)
                        keep.settled(opened.index)

            if self.concurrency <= 1:
                for unit in units:
                    await one(*unit)
            else:
                gate = asyncio.Semaphore(self.concurrency)

                async def gated(
                    opened: Opened, event: events.AnyEvent, headers: dict[str, str]
                ) -> None:
                    async with gate:
                        await one(opened, event, headers)

                await asyncio.gather(*(gated(*unit) for unit in units))
        finally:
            ticker.cancel()  # it only sleeps and reports: nothing to wait for
            self.kept_alive += keep.sent
        if msgs and not stop.is_set():
            self._measured(len(msgs), time.monotonic() - started)

    async def _open(self, index: int, msg: Msg, keep: KeepAlive) -> Opened | None:
        """The events ``msg`` holds, to be handled; None when it is settled already
        (ignored, or dead-lettered whole). An item of a batch that is not a valid event
        for this subject is dead-lettered alone, and the others are handled."""
        try:
            opened = await self._events_of(index, msg)
        except Exception as exc:  # a settlement or dead letter that could not be sent
            log.warning(
                "message not settled; it comes back after AckWait",
                subject=msg.subject,
                error=repr(exc),
            )
            keep.settled(index)
            return None
        if opened is None:
            keep.settled(index)
            return None
        if not opened.events:  # every item was dead-lettered
            await self._settle(opened)
            keep.settled(index)
            return None
        return opened

    async def _events_of(self, index: int, msg: Msg) -> Opened | None:
        headers = msg.headers or {}
        if self.ignores is not None and self.ignores(headers.get(HEADER_TYPE, "")):
            self.skipped += 1
            metrics.skipped(self.durable, _pending(msg))
            await msg.ack()
            return None
        try:
            event = events.decode(msg.data)
        except msgspec.DecodeError as exc:
            etype, eid = describe_undecodable(msg.data)
            etype = etype or headers.get(HEADER_TYPE, "")
            eid = eid or headers.get("Nats-Msg-Id", "")
            await self.dead_letters.send(msg, f"cannot decode: {exc}", etype, eid)
            await msg.term()
            return None
        opened = Opened(index, msg)
        if not isinstance(event, events.DecisionBatch):
            if await self._misplaced(msg, event):
                await msg.term()
                return None
            opened.events.append((event, headers))
        else:
            for n, item in enumerate(event.items):
                await self._open_item(opened, event, n, item)
        opened.left = len(opened.events)
        return opened

    async def _open_item(
        self, opened: Opened, batch: events.DecisionBatch, n: int, item: events.BatchItem
    ) -> None:
        msg = opened.msg
        try:
            inner = events.decode(item.event)
        except msgspec.DecodeError as exc:
            etype, eid = describe_undecodable(bytes(item.event))
            await self.dead_letters.send_item(
                msg,
                bytes(item.event),
                f"cannot decode: {exc} (item {n} of {batch.id})",
                etype or batch.kind,
                eid,
            )
            return
        if isinstance(inner, events.DecisionBatch):
            await self.dead_letters.send_item(
                msg,
                bytes(item.event),
                f"invalid: item {n} of {batch.id} is a batch itself",
                batch.kind,
                inner.id,
            )
            return
        if await self._misplaced(msg, inner, bytes(item.event)):
            return
        headers = dict(item.trace)
        headers["Nats-Msg-Id"] = inner.id
        opened.events.append((inner, headers))

    async def _misplaced(self, msg: Msg, event: events.AnyEvent, item: bytes | None = None) -> bool:
        """Dead-letter ``event`` (a message, or ``item`` of a batch) when its type does
        not belong on the subject it came on."""
        expected = self.topology.subject_of(event)
        if msg.subject == expected:
            return False
        reason = (
            f"invalid: {events.event_type(event)} {event.id} does not belong on "
            f"{msg.subject} (its subject is {expected})"
        )
        if item is None:
            await self.dead_letters.send(msg, reason, events.event_type(event), event.id)
        else:
            await self.dead_letters.send_item(msg, item, reason, events.event_type(event), event.id)
        return True

    def _handled_before(self, event_id: str) -> bool:
        if event_id in self.handled or event_id in self.in_hand:
            self.duplicates += 1
            return True
        return False

    def _handled(self, event_id: str) -> None:
        self.handled[event_id] = None
        if len(self.handled) > HANDLED_KEPT:
            self.handled.popitem(last=False)

    async def _settle(self, opened: Opened) -> None:
        msg = opened.msg
        try:
            if opened.held:
                return
            if opened.give_back:
                await msg.nak()
            elif opened.retry_in is not None:
                await msg.nak(delay=opened.retry_in)
            elif opened.dead:
                await msg.term()
            else:
                await msg.ack()
        except Exception as exc:  # NATS away: it comes back after AckWait
            log.warning(
                "message not settled; it comes back after AckWait",
                subject=msg.subject,
                error=repr(exc),
            )

    async def _handle(
        self, opened: Opened, event: events.AnyEvent, headers: dict[str, str]
    ) -> None:
        """Run the handler on one event and note its outcome on its message."""
        msg = opened.msg
        template = subject_template(self.topology, msg.subject)
        single = len(opened.events) == 1 and not opened.batch
        with process_span(msg.subject, template, headers, self.durable) as span:
            structlog.contextvars.bind_contextvars(
                event_id=event.id, event_type=events.event_type(event)
            )
            delivery = Delivery(msg)
            metrics.consumed(event, self.durable, delivery.num_delivered, _pending(msg))
            try:
                result = await self.handler(event, delivery)
            except InvalidInput as exc:
                span.set_attribute("error.type", type(exc).__name__)
                await self._dead_letter(opened, event, f"invalid: {exc}", single)
                return
            except (Transient, TimeoutError, nats.errors.Error, OSError) as exc:
                # NATS away or slow counts as transient: retried, never dead-lettered.
                span.set_attribute("error.type", "Transient")
                log.info("transient failure, will retry", error=str(exc))
                opened.retry(backoff(delivery.num_delivered))
                return
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__name__)
                if delivery.num_delivered >= self.max_attempts:
                    reason = f"handler failed {delivery.num_delivered} times: {exc!r}"
                    await self._dead_letter(opened, event, reason, single)
                else:
                    log.exception("handler failed, will retry")
                    opened.retry(backoff(delivery.num_delivered))
                return
            finally:
                structlog.contextvars.unbind_contextvars("event_id", "event_type")
            if result is HOLD:
                opened.held = True  # the handler's now: it may come back to it
            else:
                self._handled(event.id)

    async def _dead_letter(
        self, opened: Opened, event: events.AnyEvent, reason: str, single: bool
    ) -> None:
        """Dead-letter one event: its message when it came alone (then termed), else
        the event on its own (the batch's other events are settled as they go)."""
        etype = events.event_type(event)
        try:
            if single:
                await self.dead_letters.send(opened.msg, reason, etype, event.id)
                opened.dead = True
            else:
                await self.dead_letters.send_item(
                    opened.msg, events.encode(event), reason, etype, event.id
                )
        except Exception as exc:  # NATS away: the message comes back after AckWait
            log.warning("dead letter not sent", event_id=event.id, error=repr(exc))
            opened.retry(backoff(1))
            return
        self._handled(event.id)


HANDLED_KEPT = 65_536  # ids of handled events a consumer remembers, to drop repeats


class Opened:
    """A fetched message being handled: the events it holds (in order, with their
    headers), how many are still in their handlers, and how it is to be settled."""

    __slots__ = ("batch", "dead", "events", "give_back", "held", "index", "left", "msg", "retry_in")

    def __init__(self, index: int, msg: Msg) -> None:
        self.index = index
        self.msg = msg
        self.events: list[tuple[events.AnyEvent, dict[str, str]]] = []
        self.batch = (msg.headers or {}).get(HEADER_BATCH) is not None
        self.left = 0
        self.give_back = False  # shutting down: nak at once
        self.retry_in: float | None = None  # nak with this delay (a transient failure)
        self.dead = False  # termed (its only event dead-lettered)
        self.held = False  # a handler keeps it and settles it itself

    def retry(self, delay: float) -> None:
        self.retry_in = max(self.retry_in or 0.0, delay)


__all__ = [
    "HOLD",
    "Consumer",
    "DeadLetters",
    "Delivery",
    "Handler",
    "KeepAlive",
    "backoff",
    "batch_size",
]
