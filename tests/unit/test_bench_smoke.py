"""The benchmark still runs (tiny shape, no timing asserted) and writes its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ingest as bench_ingest
from bench import quota as bench_quota
from bench import victims as bench_victims

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("fair", [False, True])
def test_quota_bench_runs_and_writes_results(tmp_path: Path, fair: bool) -> None:
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
    bench_quota.main([*args, *(["--fair-sharing"] if fair else []), "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["shape"]["fair_sharing"] is fair
    assert result["shape"]["cluster_queues"] == 10
    assert result["shape"]["admitted"] > 300
    assert result["decision_all"]["n"] == 20
    assert sum(result["decision_outcomes"].values()) == 20
    assert sum(result["admission_pass_outcomes"].values()) == 20


def test_victims_bench_runs_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "victims.json"
    args = ["--nodes", "40", "--singles", "3", "--gangs8", "1", "--gangs64", "0"]
    bench_victims.main([*args, "--quality", "5", "--out", str(out)])
    result = json.loads(out.read_text())
    assert [s["shape"]["nodes"] for s in result["sizes"]] == [40]
    size = result["sizes"][0]
    assert size["shape"]["gpus"] == 320
    assert size["shape"]["running_pods"] > 0
    assert size["index_build_s"] >= 0
    kinds = size["kinds"]
    assert set(kinds) == {"single", "gang8", "gang64"}
    for kind, n in (("single", 3), ("gang8", 1), ("gang64", 0)):
        assert kinds[kind]["n"] == n
        assert kinds[kind]["decision"]["n"] == n
        assert sum(kinds[kind]["outcomes"].values()) == n
    assert kinds["single"]["outcomes"] == {"Preempt": 3}
    assert kinds["single"]["full_rebuild_decision"]["n"] == 3  # the old path, beside it
    assert size["shape"]["pods_per_node"] == 10
    assert size["churn"]["change"]["n"] == bench_victims.CHURN_CHANGES
    assert size["index_builds"] == 1  # the churn was taken in, not rebuilt
    assert kinds["gang8"]["outcomes"] == {"Preempt": 1}
    assert set(size["profile_one_decision"]) == {"single", "gang8"}
    quality = result["quality"]
    assert quality["instances"] == 5
    assert sum(k["instances"] for k in quality["by_kind"].values()) == 5
    assert quality["ratio_p50"] >= 1.0
    assert quality["missed"] == 0
    assert quality["invalid"] == 0


def test_ingest_bench_runs_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    bench_ingest.main(["--pods", "200", "--rounds", "1", "--publish", "0", "--out", str(out)])
    result = json.loads(out.read_text())
    assert set(result["tracing"]) == {"span_per_object_us", "context_only_us"}
    (size,) = result["sizes"]
    assert size["pods"] == 200
    assert size["nodes"] == 10
    assert size["objects_published_first"] == 210
    assert size["batch_whole_decode_p50_s"] >= 0
    assert size["objects_decoded_per_batch"] == 1  # one pod changed: one decoded again
