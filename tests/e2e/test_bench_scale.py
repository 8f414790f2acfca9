"""The scale benchmark still runs (a tiny cluster, no timing asserted) and writes its
JSON: the services start on a dense cluster, every gang's saga ends in an actuated plan,
with and without churn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import scale as bench_scale

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_scale_bench_runs_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    bench_scale.main(
        ["--nodes", "40", "--gangs", "2", "--churn", "20", "--gang-pods", "8,2", "--out", str(out)]
    )
    (size,) = json.loads(out.read_text())["sizes"]
    assert set(size["by_gang"]) == {"8", "2"}
    assert size["by_gang"]["8"]["no_churn"] == size["no_churn"]  # the first size, as before
    for phases in size["by_gang"].values():
        for phase in phases.values():
            assert phase["outcomes"] == {"PlanActuated": 2}, phase
            # quota saw each gang arrive: the first hop is split at its seen_at
            assert phase["hops"]["seen -> requested"]["n"] == 2
    assert size["nodes"] == 40
    assert size["running_pods"] == 400
    assert size["initial"]["quota_caught_up_s"] >= size["initial"]["state_complete_s"] > 0
    for phase in ("no_churn", "churn"):
        assert size[phase]["outcomes"] == {"PlanActuated": 2}, size[phase]
        assert size[phase]["arrival_to_actuated"]["n"] == 2
    assert size["churn"]["changes_per_s"] > 0
    assert set(size["services"]) == {"ingest", "quota", "victims", "actuator"}
    assert all(s["peak_rss_mib"] > 0 for s in size["services"].values())
