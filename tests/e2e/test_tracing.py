"""One trace per decision: the saga's spans, exported over OTLP to a receiver in this
process, share one trace id from the ``PreemptionRequested`` to the ``PlanActuated``
and the admission, across the four services, with the core calls inside."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import Services, of, wait_for
from tests.e2e.scenarios import full_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
GANG = "Workload/ml/gang"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    attributes: dict[str, object]
    links: tuple[str, ...]  # trace ids of the linked spans


class Receiver:
    """An OTLP/HTTP (protobuf) traces endpoint: ``POST /v1/traces``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    return
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                body = await reader.readexactly(length)
                self.take(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                    + f"Content-Length: {len(reply)}\r\n\r\n".encode()
                    + reply
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes: dict[str, object] = {}
                    for a in span.attributes:
                        v = a.value
                        attributes[a.key] = (
                            v.string_value if v.HasField("string_value") else v.int_value
                        )
                    self.spans.append(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            attributes=attributes,
                            links=tuple(link.trace_id.hex() for link in span.links),
                        )
                    )

    def published(self, message_id: str) -> ReceivedSpan | None:
        for s in self.spans:
            if (
                s.name.startswith("publish ")
                and s.attributes.get("messaging.message.id") == message_id
            ):
                return s
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, int]]:
    r = Receiver()
    port = free_port()
    server = await asyncio.start_server(r.handle, "127.0.0.1", port)
    try:
        yield r, port
    finally:
        server.close()
        await server.wait_closed()


WANTED = {"quota cycle", "admission_pass", "victim_search", "evict", "admit"}


async def test_one_trace_per_decision_across_the_services(
    nc: Client,
    topology: Topology,
    services: Services,
    scenario_dir: Path,
    receiver: tuple[Receiver, int],
) -> None:
    spans, port = receiver
    full_cluster(scenario_dir)
    services.start(
        extra={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
    )
    evs = await wait_for(
        nc, topology, lambda e: bool(of(e, events.Admitted, workload=GANG)), what="gang admitted"
    )
    (request,) = of(evs, events.PreemptionRequested, workload=GANG)
    (actuated,) = of(evs, events.PlanActuated, preemptor=GANG)
    (admitted,) = of(evs, events.Admitted, workload=GANG)

    def complete() -> bool:
        first = spans.published(request.id)
        if first is None:
            return False
        names = {(s.service, s.name) for s in spans.spans if s.trace_id == first.trace_id}
        # A parent span ends after its children, and may be exported in a later batch:
        # wait for each span the test reads, not only for the publishes.
        return (
            {name for _, name in names} >= WANTED
            and spans.published(actuated.id) is not None
            and spans.published(admitted.id) is not None
            and ("gangpreempt-victims", "victim_search") in names
            and ("gangpreempt-actuator", "evict") in names
            and any(s == "gangpreempt-ingest" for s, _ in names)
        )

    deadline = time.monotonic() + 30
    while not complete() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    first = spans.published(request.id)
    assert first is not None, "no span for the PreemptionRequested"
    trace_id = first.trace_id
    assert first.service == "gangpreempt-quota"
    # The decision's events, from the request to the actuation and the admission, are
    # published in that one trace.
    for event in (*of(evs, events.PlanProposed, preemptor=GANG), actuated, admitted):
        span = spans.published(event.id)
        assert span is not None, f"no span for {events.event_type(event)}"
        assert span.trace_id == trace_id, events.event_type(event)
    for victim in of(evs, events.VictimActuated, preemptor=GANG):
        span = spans.published(victim.id)
        assert span is not None
        assert span.trace_id == trace_id
    in_trace = [s for s in spans.spans if s.trace_id == trace_id]
    assert {s.service for s in in_trace} == {
        "gangpreempt-quota",
        "gangpreempt-victims",
        "gangpreempt-actuator",
        "gangpreempt-ingest",
    }
    names = {s.name for s in in_trace}
    # The core calls and the eviction are spans of the trace, with their numbers.
    assert names >= WANTED
    (search,) = [s for s in in_trace if s.name == "victim_search"]
    assert search.attributes["gangpreempt.victims"] == 1
    assert search.attributes["gangpreempt.outcome"] == "Preempt"
    assert search.attributes["gangpreempt.priority_ceiling"] == 100
    # The cycle is linked to the STATE batch that brought the gang in (ingest's trace).
    (cycle,) = [s for s in in_trace if s.name == "quota cycle"]
    assert cycle.links, "the cycle span links to the STATE changes it decided on"
    # The next decision is a trace of its own.
    others = {s.trace_id for s in spans.spans if s.name == "quota cycle" and s.trace_id != trace_id}
    assert others
