"""OpenTelemetry tracing: one provider per process, W3C trace context in NATS headers,
spans named after the messaging conventions (``publish <subject>``, ``process
<subject>``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Span, SpanKind, TraceFlags

TRACER = "gangpreempt"
OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
MESSAGING_SYSTEM = "nats"

_provider: TracerProvider | IdsOnlyProvider | None = None
_tracer: trace.Tracer | None = None  # the installed provider's


class IdsOnlyTracer(trace.Tracer):
    """Spans that carry ids and nothing else, for a process whose spans go nowhere: a
    span continues its parent's trace (a new one, sampled, at a root) with an id of its
    own, so logs and message headers still name the trace, and a service downstream
    that exports still records its part; no attributes, times or links are kept (an
    SDK span costs more CPU than many a message's handling)."""

    def __init__(self) -> None:
        self._ids = RandomIdGenerator()

    def start_span(
        self,
        name: str,
        context: context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = trace.get_current_span(context).get_span_context()
        if parent.is_valid:
            trace_id, flags, state = parent.trace_id, parent.trace_flags, parent.trace_state
        else:
            trace_id, flags, state = (
                self._ids.generate_trace_id(),
                TraceFlags(TraceFlags.SAMPLED),
                None,
            )
        return trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id,
                self._ids.generate_span_id(),
                is_remote=False,
                trace_flags=flags,
                trace_state=state,
            )
        )

    # The API's is a context manager for sync and async use alike; only ``with`` here.
    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context)
        with trace.use_span(span, end_on_exit=end_on_exit) as current:
            yield current


class IdsOnlyProvider(trace.TracerProvider):
    def __init__(self) -> None:
        self._tracer = IdsOnlyTracer()

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return self._tracer


def setup_tracing(
    service: str, processor: SpanProcessor | None = None
) -> TracerProvider | IdsOnlyProvider:
    """Install the process's tracer provider (idempotent). Spans are exported over OTLP
    (HTTP/protobuf) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (the exporter reads the standard
    ``OTEL_EXPORTER_OTLP_*`` variables), printed with ``GANGPREEMPT_TRACE_CONSOLE=1``, and
    handed to ``processor`` when given; otherwise they only carry ids into logs and
    headers (``IdsOnlyProvider``). A processor given once the ids-only provider is in
    place gets an SDK provider in its stead (``tracer`` hands out its tracer from then
    on; OpenTelemetry's global provider stays the first one)."""
    global _provider, _tracer
    if _provider is not None:
        if processor is None:
            return _provider
        if isinstance(_provider, TracerProvider):
            _provider.add_span_processor(processor)
            return _provider
    otlp = any(os.environ.get(v) for v in OTLP_VARIABLES)
    console = os.environ.get("GANGPREEMPT_TRACE_CONSOLE") == "1"
    provider: TracerProvider | IdsOnlyProvider
    if processor is None and not otlp and not console:
        provider = IdsOnlyProvider()
    else:
        provider = TracerProvider(
            resource=Resource.create({"service.name": f"gangpreempt-{service}"})
        )
        if processor is not None:
            provider.add_span_processor(processor)
        if otlp:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        if console:
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    if _provider is None:
        trace.set_tracer_provider(provider)
    _provider = provider
    _tracer = provider.get_tracer(TRACER)
    return provider


def shutdown_tracing() -> None:
    if isinstance(_provider, TracerProvider):
        _provider.shutdown()


def tracer() -> trace.Tracer:
    """The project's tracer: the installed provider's, else OpenTelemetry's proxy."""
    return _tracer if _tracer is not None else trace.get_tracer(TRACER)


def inject(headers: dict[str, str]) -> dict[str, str]:
    propagate.inject(headers)
    return headers


def extract(headers: Mapping[str, str] | None) -> context.Context:
    return propagate.extract(headers or {})


def _publish(template: str, extra: dict[str, str | int]) -> Any:
    """A producer span named after the messaging conventions."""
    return tracer().start_as_current_span(
        f"publish {template}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.name": "publish",
            "messaging.operation.type": "send",
            "messaging.destination.template": template,
            **extra,
        },
    )


@contextlib.contextmanager
def publish_span(subject: str, template: str, message_id: str, size: int) -> Iterator[Span]:
    with _publish(
        template,
        {
            "messaging.destination.name": subject,
            "messaging.message.id": message_id,
            "messaging.message.body.size": size,
        },
    ) as span:
        yield span


@contextlib.contextmanager
def publish_batch_span(template: str, count: int) -> Iterator[Span]:
    """One span for a batch of messages sent together (the STATE objects of one change
    set): the messages carry its context and open no span of their own."""
    with _publish(template, {"messaging.batch.message_count": count}) as span:
        yield span


@contextlib.contextmanager
def process_span(
    subject: str, template: str, headers: Mapping[str, str] | None, consumer: str
) -> Iterator[Span]:
    parent = extract(headers)
    link_ctx = trace.get_current_span(parent).get_span_context()
    links = [trace.Link(link_ctx)] if link_ctx.is_valid else []
    token = context.attach(parent)
    try:
        with tracer().start_as_current_span(
            f"process {template}",
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.destination.name": subject,
                "messaging.destination.template": template,
                "messaging.consumer.group.name": consumer,
                "messaging.message.id": (headers or {}).get("Nats-Msg-Id", ""),
            },
        ) as span:
            yield span
    finally:
        context.detach(token)


MAX_LINKS = 32  # links a root span keeps to the messages that led to it


def link_of(headers: Mapping[str, str] | None) -> trace.SpanContext | None:
    """The span context a message's headers carry, if any."""
    if not headers or "traceparent" not in headers:
        return None
    ctx = trace.get_current_span(extract(headers)).get_span_context()
    return ctx if ctx.is_valid else None


def root_span(
    name: str,
    links: list[trace.SpanContext] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> contextlib.AbstractContextManager[Span]:
    """A span that starts a trace of its own (whatever is current), linked to the span
    contexts that led to it (the STATE messages a quota cycle decided on), the last
    ``MAX_LINKS`` of them."""
    return continued_span(name, None, (links or [])[-MAX_LINKS:], attributes)


@contextlib.contextmanager
def continued_span(
    name: str,
    carrier: Mapping[str, str] | None,
    links: list[trace.SpanContext] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span that continues the trace ``carrier`` holds (the W3C headers saved with a
    plan record), linked to ``links``; a new trace when the carrier holds none."""
    parent = extract(carrier) if carrier else context.Context()
    token = context.attach(parent)
    try:
        with tracer().start_as_current_span(
            name,
            links=[trace.Link(c) for c in (links or [])],
            attributes=dict(attributes or {}),
        ) as span:
            yield span
    finally:
        context.detach(token)


def current_carrier() -> dict[str, str]:
    """The current span's context as W3C headers (to save with a record)."""
    return inject({})


__all__ = [
    "continued_span",
    "current_carrier",
    "extract",
    "inject",
    "link_of",
    "process_span",
    "publish_batch_span",
    "publish_span",
    "root_span",
    "setup_tracing",
    "shutdown_tracing",
    "tracer",
]
