"""A replay's result for people and programs: the measures of ``outcomes`` per policy,
the run's own figures (decisions per second, time, peak memory), and the series the
plots draw (utilization over time, evictions per day, waits per priority)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from gangpreempt.simulation.outcomes import (
    ARRIVED,
    EVICTED,
    STARTED,
    Outcomes,
    Record,
    outcomes,
    queue_gpus,
    utilization,
)
from gangpreempt.simulation.replay import Stats

HOUR = 3600.0
DAY = 86400.0


class Series(msgspec.Struct, frozen=True):
    """What the plots draw for one policy."""

    utilization: list[float]  # per hour of the replay
    evictions_per_day: list[int]
    waits: dict[str, list[float]]  # priority -> every started job's wait, seconds, sorted
    # ClusterQueue -> its GPUs busy per hour over its nominal GPUs (1: at its quota)
    queue_share: dict[str, list[float]] = msgspec.field(default_factory=dict)


class PolicyReport(msgspec.Struct, frozen=True):
    policy: str
    outcomes: Outcomes
    utilization_mean: float  # over the window (busy GPU-time / capacity), 0..1
    cycles: int
    decisions: int
    decisions_per_s: float
    preemptions: int
    plans_rejected: int
    seconds: float
    peak_memory_mb: float
    replayed_s: float  # virtual time until the last job ended (or could not start)
    parked: int = 0  # of the decisions, those given without a search (parking: exact)


def series(
    log: Sequence[Record],
    capacity_gpus: int,
    window_s: float,
    nominal: Mapping[str, int] | None = None,
) -> Series:
    """The plots' series over the window (the utilization of each hour in it; with
    ``nominal``, ClusterQueue -> nominal GPUs, each queue's use of its quota per hour)."""
    hours = utilization(log, capacity_gpus, HOUR) if log else []
    count = max(1, int(-(-window_s // HOUR)))
    hours = (hours + [0.0] * count)[:count]
    share: dict[str, list[float]] = {}
    if nominal:
        for queue, gpus in queue_gpus(log, HOUR).items():
            if nominal.get(queue):
                used = (gpus + [0.0] * count)[:count]
                share[queue] = [round(g / nominal[queue], 4) for g in used]
    days = [0] * max(1, int(-(-window_s // DAY)))
    for r in log:
        if r.kind == EVICTED and r.at < len(days) * DAY:
            days[int(r.at // DAY)] += 1
    arrived: dict[str, tuple[float, int]] = {}
    started: set[str] = set()
    waits: dict[str, list[float]] = {}
    for r in sorted(log, key=lambda r: r.at):
        if r.kind == ARRIVED:
            arrived[r.job] = (r.at, r.priority)
        elif r.kind == STARTED and r.job not in started and r.job in arrived:
            started.add(r.job)
            at, priority = arrived[r.job]
            waits.setdefault(str(priority), []).append(r.at - at)
    return Series(hours, days, {p: sorted(v) for p, v in sorted(waits.items())}, share)


def policy_report(
    policy: str,
    log: Sequence[Record],
    stats: Stats,
    *,
    cycle_s: float,
    checkpoint_interval_s: float,
    capacity_gpus: int,
    window_s: float,
    peak_memory_mb: float,
    nominal: Mapping[str, int] | None = None,
) -> tuple[PolicyReport, Series]:
    drawn = series(log, capacity_gpus, window_s, nominal)
    mean = sum(drawn.utilization) / len(drawn.utilization) if drawn.utilization else 0.0
    report = PolicyReport(
        policy=policy,
        outcomes=outcomes(log, cycle_s, checkpoint_interval_s),
        utilization_mean=round(mean, 4),
        cycles=stats.cycles,
        decisions=stats.decisions,
        decisions_per_s=round(stats.decisions / stats.seconds, 1) if stats.seconds else 0.0,
        preemptions=stats.preemptions,
        plans_rejected=stats.rejected,
        seconds=round(stats.seconds, 2),
        peak_memory_mb=round(peak_memory_mb, 1),
        replayed_s=stats.end_s,
        parked=stats.parked,
    )
    return report, drawn


__all__ = ["PolicyReport", "Series", "policy_report", "series"]
