"""What ``simulate``'s options become: durations, the trace's known origin, the cluster
sized from the load (the operator's Kueue configuration: test_replay_queue_config)."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gangpreempt.errors import InvalidInput
from gangpreempt.simulation.inputs import (
    HEADROOM,
    KNOWN_ORIGINS,
    ReplayInput,
    known_origin,
    parse_duration,
    replay_input,
)
from gangpreempt.simulation.trace import TraceJob

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "seconds"), [("30m", 1800), ("30s", 30), ("1h", 3600), ("1.5d", 129600), ("45", 45)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration("--x", text) == seconds


def test_a_bad_duration_names_the_option() -> None:
    with pytest.raises(InvalidInput, match="--termination-delay '3 parsecs'"):
        parse_duration("--termination-delay", "3 parsecs")


def test_the_origin_is_known_by_content(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"job_id,submit_time_s\n")
    assert known_origin(str(trace)) is None
    digest = hashlib.sha256(trace.read_bytes()).hexdigest()
    KNOWN_ORIGINS[digest] = "2017-01-02T03:04:05"
    try:
        assert known_origin(str(trace)) == "2017-01-02T03:04:05"
    finally:
        del KNOWN_ORIGINS[digest]


def jobs(*rows: tuple[int, int, int, str]) -> list[TraceJob]:
    return [TraceJob(f"j{i}", s, d, g, None, q, None, "") for i, (s, d, g, q) in enumerate(rows)]


def sized(trace: list[TraceJob], window: str) -> ReplayInput:
    return replay_input(
        trace,
        window,
        None,
        nodes=None,
        gpus_per_node=8,
        quotas=None,
        priority="two-class",
        seed=1,
        checkpoint_interval_s=1800,
        termination_delay_s=30,
        cycle_s=10,
    )


def test_the_cluster_is_sized_from_the_windows_load() -> None:
    trace = jobs((0, 1000, 8, "a"), (10, 1000, 8, "b"), (500, 500, 4, "a"), (5000, 10, 64, "b"))
    made = sized(trace, "0:1000")
    load = (8 * 1000 + 8 * 1000 + 4 * 500) / 1000
    assert made.offered_gpus == load
    assert made.settings.nodes == math.ceil(HEADROOM * load / 8)
    assert [j.job_id for j in made.jobs] == ["j0", "j1", "j2"]
    assert sum(made.settings.quotas.values()) == made.settings.nodes * 8
    later = sized(trace, "10:6000")
    assert later.settings.nodes >= 8  # room for the widest job, 64 GPUs
    assert [j.submit_s for j in later.jobs] == [0, 490, 4990]  # from the window's start
    assert later.settings.origin == datetime(2000, 1, 1, tzinfo=UTC).replace(second=10)
