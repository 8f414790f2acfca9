"""A process whose spans go nowhere (no processor, no exporter) keeps only their ids:
logs and message headers still name the trace, a child span continues its parent's
trace, a message's context is continued on the other side, and a root is sampled so
that a service downstream that exports still records its part; a processor given later
gets a recording provider. Run in a subprocess: the tracer provider is the process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

PROGRAM = r"""
import json
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from gangpreempt.telemetry import setup_tracing, tracer
from gangpreempt.telemetry.tracing import extract, inject

provider = setup_tracing("probe")
out = {"provider": type(provider).__name__}
with tracer().start_as_current_span("root") as root:
    with tracer().start_as_current_span("child") as child:
        headers = inject({})
    out["root_trace"] = root.get_span_context().trace_id
    out["child_trace"] = child.get_span_context().trace_id
    out["ids_differ"] = root.get_span_context().span_id != child.get_span_context().span_id
    out["sampled"] = bool(root.get_span_context().trace_flags.sampled)
    out["recording"] = root.is_recording()
with tracer().start_as_current_span("remote", context=extract(headers)) as remote:
    out["remote_trace"] = remote.get_span_context().trace_id
with tracer().start_as_current_span("other") as other:
    out["other_trace"] = other.get_span_context().trace_id
out["traceparent"] = headers.get("traceparent", "")
exporter = InMemorySpanExporter()
out["late_provider"] = type(setup_tracing("probe", SimpleSpanProcessor(exporter))).__name__
with tracer().start_as_current_span("recorded"):
    pass
out["late_spans"] = [s.name for s in exporter.get_finished_spans()]
print(json.dumps(out))
"""


def test_spans_carry_ids_only_when_they_go_nowhere() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OTEL_EXPORTER_OTLP") and k != "GANGPREEMPT_TRACE_CONSOLE"
    }
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["provider"] == "IdsOnlyProvider"
    assert out["root_trace"] != 0
    assert out["child_trace"] == out["root_trace"]
    assert out["ids_differ"]
    assert out["sampled"]
    assert not out["recording"]
    assert out["remote_trace"] == out["root_trace"]  # continued from the headers
    assert out["other_trace"] not in (0, out["root_trace"])  # a new root, a new trace
    assert out["traceparent"].startswith("00-")
    assert out["traceparent"].endswith("-01")
    assert f"{out['root_trace']:032x}" in out["traceparent"]
    # a processor given later (a test after a benchmark, in one process) gets its spans
    assert out["late_provider"] == "TracerProvider"
    assert out["late_spans"] == ["recorded"]
