"""Reading a job trace (the Philly layout) and what the replay synthesizes from it: pods
per gang, priorities, quotas per queue, the window."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gangpreempt.errors import InvalidInput
from gangpreempt.simulation.trace import (
    COLUMNS,
    HIGH,
    LOW,
    auto_quotas,
    in_window,
    parse_trace,
    parse_window,
    pods_of,
    prepare,
    read_trace,
)

pytestmark = pytest.mark.unit
HEADER = ",".join(COLUMNS)


def rows(*lines: str) -> list[str]:
    return [HEADER + "\n", *(line + "\n" for line in lines)]


def test_rows_are_read_with_unknowns_as_none() -> None:
    (a, b) = parse_trace(rows("j1,0,60,8,,vc1,,", "j2,5,30,3,3,vc2,7,alice"))
    assert (a.job_id, a.submit_s, a.duration_s, a.gpus, a.workers, a.priority) == (
        "j1",
        0,
        60,
        8,
        None,
        None,
    )
    assert (b.workers, b.priority, b.user) == (3, 7, "alice")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("j1,0,60,8,,vc1,", "line 2: 7 columns, expected 8"),
        ("j1,zero,60,8,,vc1,,", "line 2: submit_time_s: expected a whole number, got 'zero'"),
        ("j1,0,0,8,,vc1,,", "line 2: duration_s: expected at least 1, got 0"),
        ("j1,0,60,,,vc1,,", "line 2: num_gpus: empty, a number is needed"),
        ("j1,0,60,2,3,vc1,,", "line 2: num_workers: 3 workers for 2 GPUs"),
        (",0,60,2,,vc1,,", "line 2: job_id: empty"),
        ("j1,0,60,2,,,,", "line 2: queue: empty"),
    ],
)
def test_a_bad_row_names_its_line_and_column(line: str, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_trace(rows(line), "t.csv")
    assert str(err.value) == f"t.csv: {message}"


def test_order_ids_and_header_are_checked() -> None:
    with pytest.raises(InvalidInput, match="line 3: submit_time_s: 4 is before the row above"):
        parse_trace(rows("j1,5,60,1,,q,,", "j2,4,60,1,,q,,"))
    with pytest.raises(InvalidInput, match="line 3: job_id: 'j1' appears twice"):
        parse_trace(rows("j1,5,60,1,,q,,", "j1,6,60,1,,q,,"))
    with pytest.raises(InvalidInput, match="line 1: the header is"):
        parse_trace(["id,t\n"])
    with pytest.raises(InvalidInput, match="cannot read the trace"):
        read_trace("/nonexistent/trace.csv")


def test_gangs_are_split_into_pods_of_at_most_a_node() -> None:
    assert pods_of(1, None, 8) == (1,)
    assert pods_of(16, None, 8) == (8, 8)
    assert pods_of(12, None, 8) == (6, 6)
    assert pods_of(13, None, 8) == (7, 6)
    assert pods_of(12, 3, 8) == (4, 4, 4)
    with pytest.raises(InvalidInput, match="needs 12 GPUs on one node"):
        pods_of(24, 2, 8)


def test_priorities_are_synthesized_as_asked_and_reproducibly() -> None:
    lines = [f"j{i},{i},60,1,,{'big' if i % 4 else 'small'},," for i in range(2000)]
    jobs = parse_trace(rows(*lines, "given,2000,60,1,,small,5,"))
    two = prepare(jobs, 8, "two-class", seed=7)
    assert two == prepare(jobs, 8, "two-class", seed=7)
    assert two != prepare(jobs, 8, "two-class", seed=8)
    high = sum(1 for j in two[:-1] if j.priority == HIGH)
    assert {j.priority for j in two[:-1]} == {HIGH, LOW}
    assert 0.53 < high / 2000 < 0.61  # about 57%
    assert two[-1].priority == 5  # the trace's own priority wins
    by_queue = {j.queue: j.priority for j in prepare(jobs[:-1], 8, "by-queue", seed=0)}
    assert by_queue["big"] < by_queue["small"]  # the largest user of GPU time lowest
    with pytest.raises(InvalidInput, match="--priority 'vip'"):
        prepare(jobs, 8, "vip", seed=0)


def test_quotas_follow_the_share_of_gpu_time_and_add_up() -> None:
    jobs = parse_trace(rows("a1,0,100,8,,a,,", "b1,1,100,2,,b,,", "c1,2,100,1,,c,,"))
    quotas = auto_quotas(jobs, 64)
    assert sum(quotas.values()) == 64
    assert quotas["a"] > quotas["b"] > quotas["c"]
    # 64 x 8/11, 2/11, 1/11 = 46.5, 11.6, 5.8: floors 46, 11, 5, the 2 left to the
    # largest remainders (c, then b)
    assert quotas == {"a": 46, "b": 12, "c": 6}


def test_windows_are_dates_from_the_origin_or_seconds() -> None:
    origin = datetime(2017, 9, 4, 10, 30, 41, tzinfo=UTC)
    start, end = parse_window("2017-10-01:2017-10-08", origin)
    assert (start, end) == (2294959, 2294959 + 7 * 86400)
    assert parse_window("2017-10-01T10:30:41:2017-10-02T10:30:41", origin) == (
        27 * 86400,
        28 * 86400,
    )
    assert parse_window("100:200", None) == (100, 200)
    with pytest.raises(InvalidInput, match="origin is not known"):
        parse_window("2017-10-01:2017-10-08", None)
    with pytest.raises(InvalidInput, match="not after the start"):
        parse_window("200:100", None)
    jobs = parse_trace(rows("a,0,1,1,,q,,", "b,100,1,1,,q,,", "c,200,1,1,,q,,"))
    assert [j.job_id for j in in_window(jobs, 100, 200)] == ["b"]
