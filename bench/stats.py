"""What the benchmarks share: percentiles (medians and p99s of one run, in
milliseconds), the machine a run was on, and writing its JSON."""

from __future__ import annotations

import json
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def stats_ms(values: list[float]) -> dict[str, float]:
    """n, p50, p99 and max of durations in seconds, in milliseconds."""
    if not values:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    return {
        "n": len(values),
        "p50_ms": statistics.median(values) * 1e3,
        "p99_ms": pct(values, 99) * 1e3,
        "max_ms": max(values) * 1e3,
    }


def environment() -> dict[str, str]:
    return {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write_result(path: str, result: dict[str, object]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


__all__ = ["environment", "pct", "stats_ms", "write_result"]
