"""The measures of a replay, on logs built by hand where the right numbers are known: an
unnecessary eviction, a partial gang, a thrash loop, lost work since a checkpoint, waits
and utilization."""

from __future__ import annotations

import pytest

from gangpreempt.simulation.outcomes import (
    ARRIVED,
    EVICTED,
    FINISHED,
    GONE,
    STARTED,
    Record,
    outcomes,
    percentiles,
    utilization,
)

pytestmark = pytest.mark.unit
CYCLE = 10.0
CHECKPOINT = 1800.0


def run(job: str, at: float, gpus: int = 8, priority: int = 100) -> list[Record]:
    return [Record(at, ARRIVED, job, priority=priority), Record(at, STARTED, job, gpus=gpus)]


def evict(
    job: str, at: float, preemptor: str, gone: float, gpus: int = 8, pods: int = 1, of: int = 1
) -> list[Record]:
    return [
        Record(at, EVICTED, job, gpus=gpus, preemptor=preemptor, pods=pods, of_pods=of),
        Record(gone, GONE, job),
    ]


def test_an_eviction_is_unnecessary_when_its_preemptor_does_not_start_in_time() -> None:
    log = [
        *run("v1", 0),
        *run("v2", 0),
        Record(5, ARRIVED, "p1", priority=1000),
        Record(5, ARRIVED, "p2", priority=1000),
        *evict("v1", 10, "p1", gone=40),  # p1 starts one cycle after v1 left: needed
        Record(50, STARTED, "p1", gpus=8),
        *evict("v2", 10, "p2", gone=40),  # p2 never starts: unnecessary
    ]
    out = outcomes(log, CYCLE, CHECKPOINT)
    assert out.evictions == 2
    assert out.unnecessary_evictions == 1
    late = [*log[:-2], *evict("v2", 10, "p2", gone=40), Record(51, STARTED, "p2", gpus=8)]
    assert outcomes(late, CYCLE, CHECKPOINT).unnecessary_evictions == 1  # 51 > 40 + 10


def test_a_gang_evicted_in_part_is_counted() -> None:
    log = [
        *run("gang", 0, gpus=16),
        *run("whole", 0, gpus=16),
        Record(1, ARRIVED, "p", priority=1000),
        *evict("gang", 10, "p", gone=20, gpus=8, pods=1, of=2),
        *evict("whole", 10, "p", gone=20, gpus=16, pods=2, of=2),
        Record(25, STARTED, "p", gpus=24),
    ]
    out = outcomes(log, CYCLE, CHECKPOINT)
    assert out.partial_gang_evictions == 1
    assert (out.victim_pods, out.victim_gpus) == (3, 24)
    assert out.unnecessary_evictions == 0


def test_thrash_is_an_eviction_again_within_the_hour_after_a_restart() -> None:
    log = [
        *run("v", 0),
        *run("w", 0),
        Record(1, ARRIVED, "p", priority=1000),
        *evict("v", 100, "p", gone=130),
        *evict("w", 100, "p", gone=130),
        Record(135, STARTED, "p", gpus=16),
        Record(200, STARTED, "v", gpus=8),  # v back
        Record(900, STARTED, "w", gpus=8),
        *evict("v", 1000, "q", gone=1030),  # again within the hour: thrash
        *evict("w", 5000, "q", gone=5030),  # again, but after the hour
    ]
    assert outcomes(log, CYCLE, CHECKPOINT).thrash == 1


def test_lost_work_is_since_the_last_checkpoint_of_the_latest_start() -> None:
    log = [*run("v", 0, gpus=8), Record(1, ARRIVED, "p"), *evict("v", 4000, "p", gone=4030)]
    # ran 4,000 s, checkpoints at 1,800 and 3,600: 400 s lost on 8 GPUs
    assert outcomes(log, CYCLE, CHECKPOINT).lost_gpu_hours == pytest.approx(400 * 8 / 3600)
    restarted = [*log, Record(5000, STARTED, "v", gpus=8), *evict("v", 5100, "p", gone=5130)]
    assert outcomes(restarted, CYCLE, CHECKPOINT).lost_gpu_hours == pytest.approx(500 * 8 / 3600)


def test_waits_per_priority_and_completion() -> None:
    log = [
        Record(0, ARRIVED, "a", priority=1000),
        Record(10, STARTED, "a", gpus=1),
        Record(0, ARRIVED, "b", priority=100),
        Record(30, STARTED, "b", gpus=1),
        Record(100, FINISHED, "a"),
        Record(130, FINISHED, "b"),
        Record(5, ARRIVED, "c", priority=100),  # never started
    ]
    out = outcomes(log, CYCLE, CHECKPOINT)
    assert out.wait_s["1000"].p50 == 10
    assert out.wait_s["100"].n == 1
    assert out.wait_s["100"].p99 == 30
    assert (out.completion_s.n, out.completion_s.p50, out.completion_s.p99) == (2, 100, 130)
    assert (out.jobs_started, out.jobs_finished) == (2, 2)


def test_percentiles_are_nearest_rank() -> None:
    p = percentiles(list(range(1, 101)))
    assert (p.p50, p.p95, p.p99) == (50, 95, 99)
    assert percentiles([7]).p99 == 7
    assert percentiles([]).n == 0


def test_utilization_counts_a_victim_busy_until_it_is_gone() -> None:
    log = [
        Record(0, STARTED, "v", gpus=8),
        Record(50, EVICTED, "v", gpus=8, preemptor="p", pods=1, of_pods=1),
        Record(75, GONE, "v"),
        Record(100, STARTED, "p", gpus=16),
        Record(200, FINISHED, "p"),
    ]
    # 16 GPUs; buckets of 100 s: v busy 0-75 (8 GPUs), p busy 100-200 (16 GPUs)
    assert utilization(log, 16, 100) == [pytest.approx(75 * 8 / 1600), 1.0, 0.0]


def test_a_victim_started_again_at_the_instant_it_is_gone_is_busy_once() -> None:
    """Records of one instant are taken in the order logged: gone, then started again."""
    log = [
        Record(0, STARTED, "v", gpus=8),
        Record(50, EVICTED, "v", gpus=8, preemptor="p", pods=1, of_pods=1),
        Record(100, GONE, "v"),
        Record(100, STARTED, "v", gpus=8),
        Record(200, FINISHED, "v"),
        Record(300, FINISHED, "other"),
    ]
    assert utilization(log, 8, 100) == [1.0, 1.0, 0.0, 0.0]
    assert outcomes(log, CYCLE, CHECKPOINT).jobs_finished == 0  # no arrival logged
