"""The sim's timeline plays the steps due together as one batch: their changes go out back
to back, one flush and one journal write for all of them (a burst of arrivals reaches the
bus as a burst, as it reaches an API server's watchers), and a step due later waits."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from gangpreempt.config import Settings
from services.ingest.journal import Journal
from services.ingest.service import Ingest
from services.runtime import ServiceContext

WORKLOAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ml, name: w{i}, uid: w{i}}}
spec:
  queueName: q
  podSets: [{{name: main, count: 1, template: {{spec: {{containers: [{{name: c}}]}}}}}}]
"""


class RecordingSim:
    """Stands in for the sim cluster: what was upserted, and after how many of them each
    flush came."""

    def __init__(self) -> None:
        self.upserted: list[str] = []
        self.flushes: list[int] = []

    async def upsert(self, obj: Any) -> Any:
        self.upserted.append(obj.name)
        return obj

    async def flush(self) -> None:
        self.flushes.append(len(self.upserted))


def ingest_with(tmp_path: Path, at: list[float]) -> tuple[Ingest, RecordingSim, Journal]:
    (tmp_path / "cluster.yaml").write_text("")
    lines = []
    for i, t in enumerate(at):
        (tmp_path / f"w{i}.yaml").write_text(WORKLOAD.format(i=i))
        lines.append(f"- at: {t}\n  apply: w{i}.yaml\n")
    (tmp_path / "timeline.yaml").write_text("".join(lines))
    settings = Settings(scenario=str(tmp_path), sim_journal=str(tmp_path / "journal"))
    ingest = Ingest(ServiceContext("ingest", settings, Client(), asyncio.Event()))
    sim = RecordingSim()
    ingest.sim = sim  # type: ignore[assignment]
    ingest.started = time.monotonic()
    assert ingest.journal is not None
    return ingest, sim, ingest.journal


def test_steps_due_together_are_one_batch(tmp_path: Path) -> None:
    ingest, sim, journal = ingest_with(tmp_path, [0.0] * 30)
    asyncio.run(ingest.run_timeline())
    assert sim.upserted == [f"w{i}" for i in range(30)]  # in the timeline's order
    assert sim.flushes == [30]  # one flush once all of them are out
    assert [line.fired for line in journal.lines()] == list(range(30))
    assert ingest.played == set(range(30))


def test_a_later_step_is_a_batch_of_its_own(tmp_path: Path) -> None:
    ingest, sim, journal = ingest_with(tmp_path, [0.0, 0.0, 0.2, 0.0])
    asyncio.run(ingest.run_timeline())
    assert sim.upserted == ["w0", "w1", "w3", "w2"]  # by time, then by position
    assert sim.flushes == [3, 4]
    assert [line.fired for line in journal.lines()] == [0, 1, 3, 2]


def test_a_fired_step_is_not_played_again(tmp_path: Path) -> None:
    ingest, sim, journal = ingest_with(tmp_path, [0.0, 0.0, 0.0])
    ingest.fired = {1}  # fired before a restart (the journal said so)
    asyncio.run(ingest.run_timeline())
    assert sim.upserted == ["w0", "w2"]
    assert [line.fired for line in journal.lines()] == [0, 2]
