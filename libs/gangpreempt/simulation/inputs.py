"""From a trace and the options of ``gangpreempt simulate`` to what a replay runs on: the
window's jobs (times from the window's start), the cluster's size, the quotas, the
durations. Every choice the trace leaves open is named here, so a report can say it."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import msgspec

from gangpreempt.errors import InvalidInput
from gangpreempt.planning.budget import Budget
from gangpreempt.simulation.queueconfig import nominal_gpus, read_queue_config
from gangpreempt.simulation.replay import Settings
from gangpreempt.simulation.trace import (
    Job,
    TraceJob,
    auto_quotas,
    in_window,
    parse_window,
    prepare,
)

# Traces whose origin (the instant of submit_time_s 0) is known, by the file's sha256.
KNOWN_ORIGINS = {
    # Microsoft Philly 2017 as converted for the replay: its earliest submission,
    # wall-clock time as the source has it (no time zone given; read as UTC).
    "7fe71a7395f6d1f0cfcbc0082752bd5102a5af60dadd90230209929167d5ae53": "2017-09-04T10:30:41",
}
# Default cluster: the window's mean GPU demand plus a quarter (Philly's October, about
# 510 GPUs asked on average, gets 640: contention at the peaks, not a queue that never
# drains).
HEADROOM = 1.25
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class ReplayInput(msgspec.Struct, frozen=True):
    jobs: list[Job]  # arrival order, submit_s from the window's start
    settings: Settings
    window: tuple[int, int]  # seconds from the trace's origin
    nodes_from_trace: bool  # the node count was sized from the window's load
    offered_gpus: float  # the window's GPU-time over its length: the mean GPUs asked


def parse_duration(option: str, text: str) -> float:
    """``30m``, ``30s``, ``1h``, ``1.5d``, ``250ms`` or plain seconds -> seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise InvalidInput(f"{option} {text!r}: expected a duration such as 30s, 30m or 1h")
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def known_origin(path: str) -> str | None:
    """The origin of a trace this tool knows (by its content), else None."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return KNOWN_ORIGINS.get(digest.hexdigest())


def offered_gpus(jobs: Sequence[TraceJob], start: int, end: int) -> float:
    """The window's jobs' GPU-time over the window's length (each job's whole run)."""
    return sum(j.gpus * j.duration_s for j in jobs) / max(1, end - start)


def replay_input(
    trace: Sequence[TraceJob],
    window_text: str | None,
    origin: datetime | None,
    *,
    nodes: int | None,
    gpus_per_node: int,
    quotas: Mapping[str, int] | None,
    priority: str,
    seed: int,
    checkpoint_interval_s: float,
    termination_delay_s: float,
    cycle_s: float,
    victim_cost: str = "",
    min_runtime_s: float = 0.0,
    disruption_budget: Budget | None = None,
    queues_path: str | None = None,
) -> ReplayInput:
    """``queues_path``: the operator's Kueue configuration (``queueconfig``), read for the
    window's queues; else ``quotas`` (trace queue -> nominal GPUs; None: ``auto_quotas``)."""
    if gpus_per_node < 1:
        raise InvalidInput(f"--gpus-per-node {gpus_per_node}: expected at least 1")
    if nodes is not None and nodes < 1:
        raise InvalidInput(f"--nodes {nodes}: expected at least 1")
    if not trace:
        raise InvalidInput("the trace has no jobs")
    if window_text:
        start, end = parse_window(window_text, origin)
    else:
        start, end = trace[0].submit_s, trace[-1].submit_s + 1
    chosen = in_window(trace, start, end)
    if not chosen:
        raise InvalidInput(f"--window {window_text}: no job of the trace was submitted in it")
    load_gpus = offered_gpus(chosen, start, end)
    sized = nodes is None
    if nodes is None:
        widest = max(j.gpus for j in chosen)
        wanted = HEADROOM * load_gpus / gpus_per_node
        nodes = max(math.ceil(wanted), math.ceil(widest / gpus_per_node), 1)
    total = nodes * gpus_per_node
    jobs = [
        msgspec.structs.replace(j, submit_s=j.submit_s - start)
        for j in prepare(chosen, gpus_per_node, priority, seed)
    ]
    config = None
    if queues_path is not None:
        config = read_queue_config(queues_path, [j.queue for j in chosen])
        quotas = nominal_gpus(config)
    elif quotas is None:
        quotas = auto_quotas(chosen, total)
    base = origin if origin is not None else datetime.fromisoformat("2000-01-01T00:00:00+00:00")
    settings = Settings(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        quotas=dict(quotas),
        origin=base + timedelta(seconds=start),
        checkpoint_interval_s=checkpoint_interval_s,
        termination_delay_s=termination_delay_s,
        cycle_s=cycle_s,
        victim_cost=victim_cost,
        min_runtime_s=min_runtime_s,
        disruption_budget=disruption_budget,
        queue_config=config,
    )
    return ReplayInput(jobs, settings, (start, end), sized, round(load_gpus, 1))


__all__ = [
    "KNOWN_ORIGINS",
    "ReplayInput",
    "known_origin",
    "offered_gpus",
    "parse_duration",
    "replay_input",
]
