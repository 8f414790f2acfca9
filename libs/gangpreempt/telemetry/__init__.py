"""Logs (structlog JSON) and traces (OpenTelemetry) for the services."""

from gangpreempt.telemetry import metrics
from gangpreempt.telemetry.logs import setup_logging
from gangpreempt.telemetry.tracing import (
    extract,
    inject,
    process_span,
    publish_batch_span,
    publish_span,
    setup_tracing,
    shutdown_tracing,
    tracer,
)

__all__ = [
    "extract",
    "inject",
    "metrics",
    "process_span",
    "publish_batch_span",
    "publish_span",
    "setup_logging",
    "setup_tracing",
    "shutdown_tracing",
    "tracer",
]
