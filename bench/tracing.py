"""Tracing benchmark: the CPU one message's spans cost a service, with the SDK's spans
(what a process without an exporter made before) against the ids-only spans it makes now.

Each round runs, in a fresh process per mode (the tracer provider is the process's), a
loop of ``--messages`` pairs: a ``publish`` span with the context injected into headers,
and a ``process`` span continuing a message's headers (what every hop of the saga makes).
Modes: ``sdk`` (the SDK's TracerProvider, no processor), ``ids`` (``setup_tracing``
without an exporter). Rounds are interleaved. Prints medians and the ratio, writes
``bench/results/tracing.json``. Nothing is asserted.

    python bench/tracing.py [--messages 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.stats import environment, write_result

LOOP = r"""
import json, sys, time
from gangpreempt.telemetry import setup_tracing
from gangpreempt.telemetry.tracing import inject, process_span, publish_span
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
else:
    setup_tracing("bench")
headers = inject({})
started = time.process_time()
for _ in range(n):
    with publish_span("gp.quota.x", "gp.quota.x", "id", 100):
        inject({})
    with process_span("gp.quota.x", "gp.quota.x", headers, "durable"):
        pass
print(json.dumps((time.process_time() - started) / n * 1e6))
"""


def one(mode: str, messages: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", LOOP, mode, str(messages)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "tracing.json"))
    args = ap.parse_args(argv)
    runs: dict[str, list[float]] = {"sdk": [], "ids": []}
    for _ in range(args.rounds):
        for mode in runs:
            runs[mode].append(one(mode, args.messages))
    medians = {mode: statistics.median(v) for mode, v in runs.items()}
    result: dict[str, object] = {
        "messages": args.messages,
        "rounds": args.rounds,
        "us_per_message": {mode: [round(x, 2) for x in v] for mode, v in runs.items()},
        "median_us_per_message": {mode: round(m, 2) for mode, m in medians.items()},
        "ratio_sdk_over_ids": round(medians["sdk"] / medians["ids"], 2),
        **environment(),
    }
    print(f"tracing benchmark: {args.messages} messages x {args.rounds} interleaved rounds")
    for mode, label in (("sdk", "SDK spans (before)"), ("ids", "ids-only spans (now)")):
        print(f"{label:<24} median {medians[mode]:6.1f} us CPU per message (publish + process)")
    print(f"ratio {result['ratio_sdk_over_ids']}x")
    write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
