"""The short chaos suite that ``make test`` runs: one run of each fault class, from a
fixed seed, every invariant checked (``make chaos`` runs twenty of each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import FAULTS, chaos_run, describe, log_tails

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]
SEEDS = {
    "nats": 7014,
    "kill": 11,
    "pause": 7015,
    "actuators": 10,
    "messages": 10,
    "takeover": 103,
    "quota": 2,
    "victims": 1,
    "relist": 5,
}


@pytest.mark.parametrize("fault", FAULTS)
async def test_the_saga_keeps_its_promise_under(fault: str, tmp_path: Path) -> None:
    result = await chaos_run(fault, SEEDS[fault], tmp_path)
    print(describe(result))
    assert result.injected, "no fault was injected"
    if not result.ok:
        pytest.fail(f"{describe(result)}\n{log_tails(tmp_path)}")
    assert result.evictions == result.plans_actuated + 4  # node gangs evict 2 units each
