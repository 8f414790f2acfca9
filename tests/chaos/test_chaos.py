"""The short chaos suite that ``make test`` runs: one run of each fault class, from a
fixed seed, every invariant checked (``make chaos`` runs twenty of each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import FAULTS, chaos_run, describe, log_tails

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]
SEEDS = {  # a run of each class from the 20-run figures, among the shorter ones
    "nats": 7014,
    "kill": 7002,
    "pause": 7015,
    "actuators": 7001,
    "messages": 7000,
    "takeover": 7003,  # killed between its events and its actuated write
    "quota": 7003,
    "victims": 7016,
    "relist": 7004,
}


@pytest.mark.parametrize("fault", FAULTS)
async def test_the_saga_keeps_its_promise_under(fault: str, tmp_path: Path) -> None:
    result = await chaos_run(fault, SEEDS[fault], tmp_path)
    print(describe(result))
    assert result.injected, "no fault was injected"
    if not result.ok:
        pytest.fail(f"{describe(result)}\n{log_tails(tmp_path)}")
    assert result.evictions == result.plans_actuated + 4  # node gangs evict 2 units each
