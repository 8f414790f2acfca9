"""The services reach the decisions ``gangpreempt plan`` reaches, on the scenario suite:
ingest watches a folder (no sim) and each bundle is swapped into it in turn, its objects
(and their deletion) in STATE chunks."""

from __future__ import annotations

import asyncio
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology, follow
from gangpreempt.bus.status import quota_caught_up
from gangpreempt.manifests import load
from gangpreempt.planning import plan
from tests.e2e.harness import Services
from tests.scenarios.runner import bundles, expectation, manifest_files

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
OUTCOME = {
    events.Admitted: "Admit",
    events.Pending: "Pending",
    events.PreemptionRequested: "Preempt",
}


def suite() -> list[Path]:
    """Every fourth bundle that names one workload, in each family (so every family is in
    it): the services run the same decision code as ``plan``, what this checks is the way
    there; a fourth keeps the suite within its time on a busy machine."""
    named = [
        b for b in bundles() if "workload" in (exp := expectation(b)) and "assignment" not in exp
    ]
    families: dict[Path, list[Path]] = {}
    for b in named:
        families.setdefault(b.parent, []).append(b)
    return [b for members in families.values() for b in members[::4]]


async def test_services_and_plan_agree_on_the_scenario_suite(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    seen: list[events.Event] = []
    last_seq = [0]  # the decisions stream's sequence the test has taken in

    async def on_msg(msg: object) -> None:
        seen.extend(events.decode_all(msg.data))  # type: ignore[attr-defined]
        last_seq[0] = msg.metadata.sequence.stream  # type: ignore[attr-defined]

    sub = await follow(nc, f"{topology.prefix}.>", topology.decisions_stream, on_msg)
    state_seen: list[events.Event] = []

    async def on_state(msg: object) -> None:
        state_seen.append(events.decode(msg.data))  # type: ignore[attr-defined]

    state_sub = await follow(nc, f"{topology.prefix}.state.>", topology.state_stream, on_state)
    services.start(
        extra={
            "GANGPREEMPT_SIM": "false",
            "GANGPREEMPT_SINK": "log",
            "GANGPREEMPT_POLL_INTERVAL": "0.05",
            # a bundle's objects (and their deletion) in STATE chunks of 4
            "GANGPREEMPT_STATE_CHUNK": "4",
        }
    )

    async def until(check, timeout: float, what: str):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out: {what}")

    def live_objects() -> set[tuple[str, str]]:
        live: set[tuple[str, str]] = set()
        for m in state_seen:
            for e in m.changes if isinstance(m, events.StateChunk) else (m,):
                if isinstance(e, events.ObjectUpserted):
                    live.add((e.kind, e.key))
                elif isinstance(e, events.ObjectDeleted):
                    live.discard((e.kind, e.key))
        return live

    checked = 0
    disagreements = []
    for folder in suite():
        exp = expectation(folder)
        target = exp["workload"]
        # Empty the folder and wait until every object is gone from the state.
        for f in scenario_dir.iterdir():
            f.unlink()
        await until(lambda: not live_objects() or None, 10, f"{folder.name}: cleared")
        # Copy the bundle; the services decide; so does plan, on the same manifests.
        start = len(seen)
        for f in manifest_files(folder):
            shutil.copy(f, scenario_dir / Path(f).name)
        await until(
            lambda start=start, target=target: next(
                (e for e in seen[start:] if type(e) in OUTCOME and e.workload == target), None
            ),
            15,
            f"{folder.name}: a decision for {target}",
        )

        # The services' decision is their last one once quota has decided on everything
        # STATE holds, and the test has taken in every decision it published.
        async def settled() -> bool:
            if not await quota_caught_up(nc, topology):
                return False
            info = await nc.jetstream().stream_info(topology.decisions_stream)
            return last_seq[0] >= info.state.last_seq

        deadline = time.monotonic() + 15
        while not await settled():
            assert time.monotonic() < deadline, f"{folder.name}: quota did not settle"
            await asyncio.sleep(0.02)
        decision_event = [e for e in seen[start:] if type(e) in OUTCOME and e.workload == target][
            -1
        ]
        state = load(manifest_files(folder)).state
        now = datetime.now(UTC)
        expected = next(d for d in plan(state, now).decisions if d.preemptor == target)
        got = OUTCOME[type(decision_event)]
        if got != expected.outcome:
            said = getattr(decision_event, "message", "")
            disagreements.append(
                f"{folder.name}: services {got} ({said}), plan {expected.outcome} ({expected.message})"
            )
            continue
        if isinstance(decision_event, events.PreemptionRequested):
            answer = await until(
                lambda start=start, request=decision_event: next(
                    (
                        e
                        for e in seen[start:]
                        if isinstance(e, events.PlanProposed | events.PreemptionInfeasible)
                        and e.request_id == request.request_id
                    ),
                    None,
                ),
                15,
                f"{folder.name}: the victims' answer",
            )
            assert isinstance(answer, events.PlanProposed), f"{folder.name}: {answer}"
            want = plan(state, now, target, excluded=decision_event.claimed).decisions[0]
            got_victims = {(v.object, v.reason) for v in answer.victims}
            want_victims = {(v.object, v.reason) for v in want.victims}
            if got_victims != want_victims:
                disagreements.append(
                    f"{folder.name}: services {sorted(got_victims)}, plan {sorted(want_victims)}"
                )
        checked += 1
    await sub.unsubscribe()
    await state_sub.unsubscribe()
    assert not disagreements, disagreements
    assert checked >= 100, f"only {checked} bundles checked"
    assert all(services.alive().values())
