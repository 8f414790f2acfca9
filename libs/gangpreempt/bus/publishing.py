"""Publishing events: deterministic ``Nats-Msg-Id``, trace context in the headers, and a
size check on body plus headers before anything is sent (the server would otherwise
close the connection)."""

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


class Publisher:
    def __init__(
        self, nc: Client, topology: Topology, service: str, ack_timeout: float = 5.0
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.topology = topology
        self.service = service
        self.ack_timeout = ack_timeout

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
            ack = await self._send(subject, body, headers, f"{etype} {event.id}")
        ack.add_done_callback(lambda done: _stored(done, event))
        return ack

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


__all__ = ["HEADER_SERVICE", "HEADER_TYPE", "Oversized", "Publisher", "header_size"]
