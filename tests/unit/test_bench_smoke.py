"""The benchmark still runs (tiny shape, no timing asserted) and writes its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import quota as bench_quota

pytestmark = pytest.mark.unit


def test_quota_bench_runs_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "quota.json"
    args = [
        "--cohorts",
        "2",
        "--queues",
        "5",
        "--admitted",
        "400",
        "--pending",
        "20",
        "--passes",
        "1",
    ]
    bench_quota.main([*args, "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["shape"]["cluster_queues"] == 10
    assert result["shape"]["admitted"] > 300
    assert result["decision_all"]["n"] == 20
    assert sum(result["decision_outcomes"].values()) == 20
    assert sum(result["admission_pass_outcomes"].values()) == 20
