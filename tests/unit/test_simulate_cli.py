"""``gangpreempt simulate`` end to end on a small trace: every policy's measures in the
JSON (and the table), the optimum's sample, the plots; bad options exit 2 and say why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
TRACE = str(Path(__file__).parent.parent / "data" / "replay" / "small.csv")


def simulate(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gangpreempt.cli", "simulate", "--trace", TRACE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
        cwd=cwd,
    )


def test_json_has_every_policy_the_optimum_and_the_plots(tmp_path: Path) -> None:
    out = simulate(
        "--window",
        "0:7200",
        "--nodes",
        "3",
        "--policy",
        "gangpreempt",
        "--policy",
        "pod-immediate",
        "--policy",
        "no-preemption",
        "-o",
        "json",
        "--plots",
        str(tmp_path),
        "--optimum-sample",
        "20",
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # nothing else on standard output
    assert [p["policy"] for p in result["policies"]] == [
        "gangpreempt",
        "pod-immediate",
        "no-preemption",
    ]
    jobs = result["window"]["jobs"]
    rows = Path(TRACE).read_text().splitlines()[1:]
    assert jobs == sum(1 for line in rows if int(line.split(",")[1]) < 7200)
    by = {p["policy"]: p for p in result["policies"]}
    for p in by.values():
        o = p["outcomes"]
        assert o["jobs_finished"] == jobs  # every job ends once the window's work is done
        assert 0 < p["utilization_mean"] <= 1
        assert p["peak_memory_mb"] > 0
        assert p["decisions_per_s"] > 0
    assert by["no-preemption"]["outcomes"]["evictions"] == 0
    assert by["gangpreempt"]["outcomes"]["partial_gang_evictions"] == 0
    assert by["gangpreempt"]["outcomes"]["thrash"] == 0
    assert result["cluster"] == {**result["cluster"], "nodes": 3, "gpus": 24}
    assert sum(result["cluster"]["quotas"].values()) == 24
    opt = result["optimum"]
    assert opt["decisions"] >= opt["sampled"] > 0
    assert {f["objective"] for f in opt["objectives"]} == {"kube-scheduler", "lost-gpu-hours"}
    for f in opt["objectives"]:
        assert f["measured"] + opt["outside"] == opt["sampled"]
        assert 1.0 <= f["ratio_p50"] <= f["ratio_p95"] <= f["ratio_max"]
    pngs = sorted(p.name for p in tmp_path.iterdir())
    assert pngs == ["evictions_per_day.png", "queue_share.png", "utilization.png", "wait_cdf.png"]
    assert all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in pngs)


def test_the_table_names_the_measures_and_the_sample() -> None:
    out = simulate(
        "--window", "0:3600", "--policy", "gangpreempt", "--optimum-sample", "5", "--no-plots"
    )
    assert out.returncode == 0, out.stderr
    for words in (
        "unnecessary evictions",
        "partial-gang evictions",
        "thrash",
        "lost GPU-hours",
        "wait p99, priority 1000",
        "exact optimum",
    ):
        assert words in out.stdout
    assert "sized from the load" in out.stdout


def test_by_default_every_policy_and_the_plots_in_the_working_directory(
    tmp_path: Path,
) -> None:
    out = simulate("--window", "0:1800", "-o", "json", "--optimum-sample", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    policies = [p["policy"] for p in json.loads(out.stdout)["policies"]]
    assert policies == [
        "gangpreempt",
        "pod-immediate",
        "gang-unconfirmed",
        "no-preemption",
        "optimal-victims",
    ]
    assert len(list((tmp_path / "gangpreempt-plots").glob("*.png"))) == 4


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--window", "2017-10-01:2017-10-08"], "origin is not known"),
        (["--window", "500:100"], "the end is not after the start"),
        (["--window", "999999:9999999"], "no job of the trace"),
        (["--checkpoint-interval", "soon"], "--checkpoint-interval 'soon'"),
        (["--gpus-per-node", "0"], "--gpus-per-node 0: expected at least 1"),
    ],
)
def test_bad_options_exit_2_and_say_why(args: list[str], says: str) -> None:
    out = simulate(*args)
    assert out.returncode == 2
    assert says in out.stderr
    assert out.stdout == ""


def test_a_minimum_runtime_is_read_and_changes_the_replay() -> None:
    def run(*extra: str) -> dict[str, object]:
        out = simulate(
            "--window", "0:7200", "--nodes", "3", "--policy", "gangpreempt", "--no-plots",
            "--optimum-sample", "0", "-o", "json", *extra,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert isinstance(doc, dict)
        return doc

    plain, held = run(), run("--min-runtime", "1h")
    assert plain["synthesized"]["min_runtime_s"] == 0  # type: ignore[index]
    assert held["synthesized"]["min_runtime_s"] == 3600  # type: ignore[index]
    before = plain["policies"][0]["outcomes"]  # type: ignore[index]
    after = held["policies"][0]["outcomes"]  # type: ignore[index]
    assert before["evictions"] > 0
    assert (after["evictions"], after["lost_gpu_hours"]) != (
        before["evictions"],
        before["lost_gpu_hours"],
    )
