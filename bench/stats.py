"""Percentiles for the benchmarks (medians and p99s of one run, in milliseconds)."""

from __future__ import annotations

import statistics


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


__all__ = ["pct", "stats_ms"]
