"""A GPU-cluster job trace, read and completed for a replay.

The layout (one job per row, one job one gang):
``job_id,submit_time_s,duration_s,num_gpus,num_workers,queue,priority,user``. Empty
means unknown; what the replay needs and the trace does not say is synthesized here, and
every choice is a named option so a report can say which was used:

- **pods**: ``num_workers`` when given, else ``ceil(num_gpus / gpus_per_node)`` pods of
  at most ``gpus_per_node`` GPUs each (the GPUs spread as evenly as whole numbers allow);
- **priority** (``two-class``, ``by-queue``, ``random``): ``two-class`` draws high (1000)
  for about 57% of the jobs and low (100) for the rest, from a seeded generator (the pod
  QoS mix of Alibaba's 2023 GPU trace, as the trace's README suggests); ``by-queue``
  ranks the queues by their share of GPU time in the window, the largest lowest;
  ``random`` draws 0-999; a ``priority`` column in the trace wins over all three;
- **quotas** (``auto``): one ClusterQueue per trace queue, nominal GPUs in proportion to
  the queue's share of GPU time in the window (largest remainders, every queue at least
  0), all in one cohort so that idle quota is borrowed.

A row that cannot be read is an error naming the file, the line and the column."""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import msgspec

from gangpreempt.errors import InvalidInput

COLUMNS = (
    "job_id",
    "submit_time_s",
    "duration_s",
    "num_gpus",
    "num_workers",
    "queue",
    "priority",
    "user",
)
HIGH, LOW = 1000, 100
HIGH_SHARE = 0.57  # of the jobs, in ``two-class``
PRIORITY_MODES = ("two-class", "by-queue", "random")


class TraceJob(msgspec.Struct, frozen=True):
    """One row as the trace gives it (``None``: the trace does not say)."""

    job_id: str
    submit_s: int
    duration_s: int
    gpus: int
    workers: int | None
    queue: str
    priority: int | None
    user: str


class Job(msgspec.Struct, frozen=True):
    """A job ready to replay: its pods' GPUs (one gang) and its priority."""

    job_id: str
    submit_s: int
    duration_s: int
    queue: str
    priority: int
    pods: tuple[int, ...]  # GPUs of each pod

    @property
    def gpus(self) -> int:
        return sum(self.pods)


def read_trace(path: str) -> list[TraceJob]:
    """Every row of the CSV at ``path``, in file order."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return parse_trace(fh, path)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the trace: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text ({exc.reason})") from exc


def parse_trace(lines: Iterable[str], where: str = "<trace>") -> list[TraceJob]:
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise InvalidInput(f"{where}: empty: expected the header {','.join(COLUMNS)}")
    if tuple(h.strip() for h in header) != COLUMNS:
        raise InvalidInput(
            f"{where}: line 1: the header is {','.join(header)!r}, expected {','.join(COLUMNS)}"
        )
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    last = -1
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(COLUMNS):
            raise InvalidInput(f"{where}: line {line}: {len(row)} columns, expected {len(COLUMNS)}")
        cells = dict(zip(COLUMNS, (c.strip() for c in row), strict=True))
        number = _Numbers(cells, f"{where}: line {line}")

        job_id = cells["job_id"]
        if not job_id:
            raise InvalidInput(f"{where}: line {line}: job_id: empty")
        if job_id in seen:
            raise InvalidInput(f"{where}: line {line}: job_id: {job_id!r} appears twice")
        seen.add(job_id)
        submit = number("submit_time_s", 0)
        assert submit is not None
        if submit < last:
            raise InvalidInput(
                f"{where}: line {line}: submit_time_s: {submit} is before the row above "
                f"({last}); rows must be sorted by it"
            )
        last = submit
        duration, gpus = number("duration_s", 1), number("num_gpus", 1)
        assert duration is not None
        assert gpus is not None
        workers = number("num_workers", 1, required=False)
        if workers is not None and workers > gpus:
            raise InvalidInput(
                f"{where}: line {line}: num_workers: {workers} workers for {gpus} GPUs"
            )
        if not cells["queue"]:
            raise InvalidInput(f"{where}: line {line}: queue: empty")
        priority = number("priority", -(2**31), required=False)
        jobs.append(
            TraceJob(
                job_id=job_id,
                submit_s=submit,
                duration_s=duration,
                gpus=gpus,
                workers=workers,
                queue=cells["queue"],
                priority=priority,
                user=cells["user"],
            )
        )
    return jobs


class _Numbers:
    """The whole numbers of one row, read with errors that name the line and column."""

    def __init__(self, cells: dict[str, str], where: str) -> None:
        self.cells = cells
        self.where = where

    def __call__(self, column: str, minimum: int, required: bool = True) -> int | None:
        text = self.cells[column]
        if not text:
            if required:
                raise InvalidInput(f"{self.where}: {column}: empty, a number is needed")
            return None
        try:
            value = int(text)
        except ValueError:
            raise InvalidInput(
                f"{self.where}: {column}: expected a whole number, got {text!r}"
            ) from None
        if value < minimum:
            raise InvalidInput(f"{self.where}: {column}: expected at least {minimum}, got {value}")
        return value


def parse_window(text: str, origin: datetime | None) -> tuple[int, int]:
    """``START:END`` as seconds from the trace's origin: dates (``2017-10-01``, or with a
    time) when the origin is known, else seconds."""
    start_text, sep, end_text = text.partition(":") if "T" not in text else _split_iso(text)
    if not sep or not start_text or not end_text:
        raise InvalidInput(f"--window {text!r}: expected START:END")

    def point(part: str) -> int:
        try:
            return int(part)
        except ValueError:
            pass
        if origin is None:
            raise InvalidInput(
                f"--window {text!r}: {part!r} is a date, but the trace's origin is not known: "
                "give seconds, or --origin DATE"
            )
        try:
            when = datetime.fromisoformat(part)
        except ValueError:
            raise InvalidInput(
                f"--window {text!r}: {part!r} is neither seconds nor a date"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return int((when - origin).total_seconds())

    start, end = point(start_text), point(end_text)
    if end <= start:
        raise InvalidInput(f"--window {text!r}: the end is not after the start")
    return start, end


def _split_iso(text: str) -> tuple[str, str, str]:
    """``A:B`` where A and B may hold times (``2017-10-01T00:00:00``): split at the colon
    between the two parts, the one followed by a date."""
    for i, ch in enumerate(text):
        if (
            ch == ":"
            and i + 11 <= len(text)
            and text[i + 1 : i + 5].isdigit()
            and text[i + 5] == "-"
        ):
            return text[:i], ":", text[i + 1 :]
    return text, "", ""


def in_window(jobs: Sequence[TraceJob], start: int, end: int) -> list[TraceJob]:
    return [j for j in jobs if start <= j.submit_s < end]


def gpu_shares(jobs: Sequence[TraceJob]) -> dict[str, float]:
    """Each queue's share of the jobs' GPU time."""
    totals: dict[str, int] = {}
    for j in jobs:
        totals[j.queue] = totals.get(j.queue, 0) + j.gpus * j.duration_s
    whole = sum(totals.values()) or 1
    return {q: t / whole for q, t in sorted(totals.items())}


def pods_of(gpus: int, workers: int | None, per_node: int) -> tuple[int, ...]:
    """The GPUs of each pod: ``workers`` pods (else as few as fit ``per_node`` each),
    the GPUs spread as evenly as whole numbers allow."""
    count = workers if workers is not None else math.ceil(gpus / per_node)
    base, extra = divmod(gpus, count)
    pods = tuple(base + (1 if i < extra else 0) for i in range(count))
    if max(pods) > per_node:
        raise InvalidInput(
            f"a job of {gpus} GPUs in {count} pods needs {max(pods)} GPUs on one node, more "
            f"than --gpus-per-node {per_node}"
        )
    return pods


def prepare(jobs: Sequence[TraceJob], per_node: int, priority: str, seed: int) -> list[Job]:
    """The jobs with pods and priorities (see the module's text for the rules)."""
    if priority not in PRIORITY_MODES:
        raise InvalidInput(f"--priority {priority!r}: expected one of {', '.join(PRIORITY_MODES)}")
    rng = random.Random(seed)
    ranks: dict[str, int] = {}
    if priority == "by-queue":
        order = sorted(gpu_shares(jobs).items(), key=lambda qs: (-qs[1], qs[0]))
        ranks = {q: (i + 1) * 10 for i, (q, _share) in enumerate(order)}
    out = []
    for j in jobs:
        if j.priority is not None:
            value = j.priority
        elif priority == "two-class":
            value = HIGH if rng.random() < HIGH_SHARE else LOW
        elif priority == "by-queue":
            value = ranks[j.queue]
        else:
            value = rng.randrange(1000)
        out.append(
            Job(
                job_id=j.job_id,
                submit_s=j.submit_s,
                duration_s=j.duration_s,
                queue=j.queue,
                priority=value,
                pods=pods_of(j.gpus, j.workers, per_node),
            )
        )
    return out


def auto_quotas(jobs: Sequence[TraceJob], total_gpus: int) -> dict[str, int]:
    """Nominal GPUs per queue, in proportion to its share of GPU time (largest
    remainders; the sum is ``total_gpus``)."""
    shares = gpu_shares(jobs)
    raw = {q: s * total_gpus for q, s in shares.items()}
    quotas = {q: int(v) for q, v in raw.items()}
    rest = total_gpus - sum(quotas.values())
    for q in sorted(raw, key=lambda q: (-(raw[q] - quotas[q]), q))[:rest]:
        quotas[q] += 1
    return quotas


def origin_of(text: str | None) -> datetime | None:
    """``--origin DATE`` (a date or date-time; UTC unless it says otherwise)."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"--origin {text!r}: expected a date such as 2017-09-04T10:30:41"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def at(origin: datetime | None, seconds: int) -> str:
    """A trace time for people: a date when the origin is known, else seconds."""
    if origin is None:
        return f"{seconds} s"
    return (origin + timedelta(seconds=seconds)).isoformat()


__all__ = [
    "COLUMNS",
    "Job",
    "TraceJob",
    "at",
    "auto_quotas",
    "gpu_shares",
    "in_window",
    "origin_of",
    "parse_trace",
    "parse_window",
    "pods_of",
    "prepare",
    "read_trace",
]
