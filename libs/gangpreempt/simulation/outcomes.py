"""What a replay cost, from its log: the measures every preemption policy is compared on.

A replay writes one ``Record`` per thing that happened to a job, in time order (the
records of one instant in the order they happened):
``arrived``; ``started`` (its pods bound, ``gpus`` of them busy); ``evicted`` (as a
victim of ``preemptor``: ``pods`` of its ``of_pods`` pods evicted); ``gone`` (the
victim's pods have terminated, its GPUs are free); ``finished``; ``held`` (its
preemption held back by the disruption budget, logged once per incarnation). From it:

- **evictions**, and the victims' pods and GPUs;
- **unnecessary evictions**: the preemptor did not start by one cycle after the last of
  its victims (of that preemption) was gone;
- **partial-gang evictions**: fewer pods evicted than the job runs (the rest of the
  gang is then useless);
- **thrash**: a job evicted again within ``thrash_window_s`` (an hour) of an earlier
  eviction, having been started again in between; also per pair of ClusterQueues (the
  victim's and the preemptor's), where fair sharing's loops would show;
- **lost GPU-hours**: for each eviction, the work since the victim's last checkpoint
  (checkpoints every ``checkpoint_interval_s`` from its latest start) times its GPUs;
- the **wait** from arrival to first start, per priority (p50 / p95 / p99), and the
  **completion time** from arrival to finish;
- **GPU utilization** over time, in buckets;
- **held by the budget**: the preemptions the disruption budget held back at least once.

Every measure is computed from the log alone: the same code judges every policy."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec

ARRIVED = "arrived"
STARTED = "started"
EVICTED = "evicted"
GONE = "gone"
FINISHED = "finished"
HELD = "held"
KINDS = (ARRIVED, STARTED, EVICTED, GONE, FINISHED, HELD)


class Record(msgspec.Struct, frozen=True, omit_defaults=True):
    at: float  # seconds of the replay
    kind: str
    job: str
    gpus: int = 0  # started / evicted: the job's GPUs
    priority: int = 0  # arrived, held: the job's priority
    preemptor: str = ""  # evicted: for whom
    pods: int = 0  # evicted: pods evicted
    of_pods: int = 0  # evicted: pods the job runs
    queue: str = ""  # arrived: the job's ClusterQueue


class Percentiles(msgspec.Struct, frozen=True):
    n: int
    p50: float
    p95: float
    p99: float


class QueuePairThrash(msgspec.Struct, frozen=True):
    """Thrash between two ClusterQueues (a victim's and its preemptor's, in name order;
    twice the same name: within one queue)."""

    queues: tuple[str, str]
    thrash: int


class Outcomes(msgspec.Struct, frozen=True):
    evictions: int
    victim_pods: int
    victim_gpus: int
    unnecessary_evictions: int
    partial_gang_evictions: int
    thrash: int
    lost_gpu_hours: float
    wait_s: dict[str, Percentiles]  # by priority
    completion_s: Percentiles
    jobs_started: int
    jobs_finished: int
    budget_held: int = 0  # preemptions the disruption budget held back at least once
    # thrash per pair of ClusterQueues, the most first
    thrash_by_queues: list[QueuePairThrash] = msgspec.field(default_factory=list)


def percentiles(values: Sequence[float]) -> Percentiles:
    """Nearest-rank percentiles (0 for none)."""
    if not values:
        return Percentiles(0, 0.0, 0.0, 0.0)
    ordered = sorted(values)

    def rank(q: float) -> float:
        k = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
        return float(ordered[k])

    return Percentiles(len(ordered), rank(0.50), rank(0.95), rank(0.99))


def outcomes(
    log: Iterable[Record],
    cycle_s: float,
    checkpoint_interval_s: float,
    thrash_window_s: float = 3600.0,
) -> Outcomes:
    records = sorted(log, key=lambda r: r.at)  # stable: same instant, in the order logged
    for r in records:
        if r.kind not in KINDS:
            raise ValueError(f"record of {r.job} at {r.at}: unknown kind {r.kind!r}")
    arrived: dict[str, tuple[float, int]] = {}
    first_start: dict[str, float] = {}
    running_since: dict[str, float] = {}
    last_eviction: dict[str, float] = {}
    restarted_since_eviction: set[str] = set()
    # per preemption (preemptor, eviction time): its victims' gone times
    plans: dict[tuple[str, float], list[str]] = {}
    gone_at: dict[tuple[str, float], float] = {}  # (victim, its eviction time) -> gone
    evictions = victim_pods = victim_gpus = partial = thrash = held = 0
    lost = 0.0
    finished: list[float] = []
    evicted_at: dict[str, float] = {}
    queue_of: dict[str, str] = {}
    pairs: dict[tuple[str, str], int] = {}
    for r in records:
        if r.kind == ARRIVED:
            arrived[r.job] = (r.at, r.priority)
            queue_of[r.job] = r.queue
        elif r.kind == STARTED:
            first_start.setdefault(r.job, r.at)
            running_since[r.job] = r.at
            if r.job in last_eviction:
                restarted_since_eviction.add(r.job)
        elif r.kind == EVICTED:
            evictions += 1
            victim_pods += r.pods
            victim_gpus += r.gpus
            if r.pods < r.of_pods:
                partial += 1
            since = running_since.pop(r.job, r.at)
            ran = max(0.0, r.at - since)
            lost += (ran % checkpoint_interval_s) * r.gpus / 3600.0
            previous = last_eviction.get(r.job)
            if (
                previous is not None
                and r.job in restarted_since_eviction
                and r.at - previous <= thrash_window_s
            ):
                thrash += 1
                a, b = sorted((queue_of.get(r.job, ""), queue_of.get(r.preemptor, "")))
                pairs[(a, b)] = pairs.get((a, b), 0) + 1
            last_eviction[r.job] = r.at
            restarted_since_eviction.discard(r.job)
            plans.setdefault((r.preemptor, r.at), []).append(r.job)
            evicted_at[r.job] = r.at
        elif r.kind == GONE:
            if r.job in evicted_at:
                gone_at[(r.job, evicted_at[r.job])] = r.at
        elif r.kind == FINISHED:
            running_since.pop(r.job, None)
            if r.job in arrived:
                finished.append(r.at - arrived[r.job][0])
        elif r.kind == HELD:
            held += 1
    starts: dict[str, list[float]] = {}
    for r in records:
        if r.kind == STARTED:
            starts.setdefault(r.job, []).append(r.at)
    unnecessary = 0
    for (preemptor, at), victims in plans.items():
        left = [gone_at.get((v, at)) for v in victims]
        if any(t is None for t in left):
            deadline = None  # a victim never left within the replay
        else:
            deadline = max(t for t in left if t is not None) + cycle_s
        started = [t for t in starts.get(preemptor, []) if t >= at]
        if deadline is None or not started or min(started) > deadline:
            unnecessary += len(victims)
    waits: dict[str, list[float]] = {}
    for job, (at, priority) in arrived.items():
        if job in first_start:
            waits.setdefault(str(priority), []).append(first_start[job] - at)
    return Outcomes(
        evictions=evictions,
        victim_pods=victim_pods,
        victim_gpus=victim_gpus,
        unnecessary_evictions=unnecessary,
        partial_gang_evictions=partial,
        thrash=thrash,
        lost_gpu_hours=round(lost, 6),
        wait_s={p: percentiles(v) for p, v in sorted(waits.items())},
        completion_s=percentiles(finished),
        jobs_started=len(first_start),
        jobs_finished=len(finished),
        budget_held=held,
        thrash_by_queues=[
            QueuePairThrash(k, n) for k, n in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
    )


def utilization(log: Iterable[Record], capacity_gpus: int, bucket_s: float) -> list[float]:
    """The share of the GPUs busy in each bucket of the replay (time-weighted)."""
    if capacity_gpus <= 0 or bucket_s <= 0:
        raise ValueError("capacity and bucket must be positive")
    records = sorted(log, key=lambda r: r.at)  # stable: same instant, in the order logged
    if not records:
        return []
    end = records[-1].at
    buckets = [0.0] * (int(end // bucket_s) + 1)
    busy = 0
    busy_by_job: dict[str, int] = {}
    t = records[0].at
    for r in records:
        _spread(buckets, t, r.at, busy, bucket_s)
        t = r.at
        if r.kind == STARTED:
            busy_by_job[r.job] = r.gpus
            busy += r.gpus
        elif r.kind in (GONE, FINISHED):
            busy -= busy_by_job.pop(r.job, 0)
    return [round(b / (capacity_gpus * bucket_s), 6) for b in buckets]


def queue_gpus(log: Iterable[Record], bucket_s: float) -> dict[str, list[float]]:
    """Each ClusterQueue's GPUs busy in each bucket of the replay (time-weighted mean),
    for the queues the arrivals name."""
    if bucket_s <= 0:
        raise ValueError("bucket must be positive")
    records = sorted(log, key=lambda r: r.at)  # stable: same instant, in the order logged
    if not records:
        return {}
    size = int(records[-1].at // bucket_s) + 1
    queue_of = {r.job: r.queue for r in records if r.kind == ARRIVED and r.queue}
    buckets = {q: [0.0] * size for q in sorted(set(queue_of.values()))}
    busy = {q: 0 for q in buckets}
    busy_by_job: dict[str, int] = {}
    t = records[0].at
    for r in records:
        if r.at > t:
            for q, gpus in busy.items():
                _spread(buckets[q], t, r.at, gpus, bucket_s)
            t = r.at
        queue = queue_of.get(r.job)
        if queue is None:
            continue
        if r.kind == STARTED:
            busy_by_job[r.job] = r.gpus
            busy[queue] += r.gpus
        elif r.kind in (GONE, FINISHED):
            busy[queue] -= busy_by_job.pop(r.job, 0)
    return {q: [round(b / bucket_s, 3) for b in bs] for q, bs in buckets.items()}


def _spread(buckets: list[float], start: float, end: float, gpus: int, size: float) -> None:
    """Add ``gpus`` busy from ``start`` to ``end`` into the buckets it covers."""
    while start < end and gpus:
        i = int(start // size)
        edge = min(end, (i + 1) * size)
        buckets[i] += gpus * (edge - start)
        start = edge


__all__ = [
    "ARRIVED",
    "EVICTED",
    "FINISHED",
    "GONE",
    "HELD",
    "STARTED",
    "Outcomes",
    "Percentiles",
    "QueuePairThrash",
    "Record",
    "outcomes",
    "percentiles",
    "queue_gpus",
    "utilization",
]
