"""``make demo``'s command on its bundled scenario: the saga as the README tells it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.scenarios import ADMITTED, CLUSTER, PENDING

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]


def up_until_settled(scenario: Path, store: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gangpreempt.cli",
            "up",
            "--scenario",
            str(scenario),
            "--until-settled",
            *more,
            "--store",
            str(store),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )


def test_up_plays_the_demo_scenario_until_settled(tmp_path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo:.*\n\t\$\(BIN\)/(gangpreempt up [^\n]+)", makefile, re.M)
    assert demo, "make demo must run gangpreempt up"
    args = [*demo.group(1).split()[1:], "--store", str(tmp_path / "store")]
    out = subprocess.run(
        [sys.executable, "-m", "gangpreempt.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())  # the console wraps long lines
    # gang-2's plan is confirmed then found stale by the actuator (dropped), or rejected
    # by quota if it saw the victim finish first: either way nothing is evicted for it.
    assert "plans proposed 3" in text
    assert re.search(r"actuated 2, dropped 1, rejected 0|actuated 2, dropped 0, rejected 1", text)
    assert "victims actuated 2" in text
    assert re.search(r"PlanActuated Workload/ml/gang-1", text)
    # On nodes: the training gang preempts the scavenger gang whole, then is bound to the
    # two nodes it frees; the notebook and the inference pod are untouched.
    assert re.search(r"VictimActuated PodGroup/ml/scavenger for PodGroup/ml/train", text)
    assert re.search(r"Admitted PodGroup/ml/train bound: train-0 -> gpu-0, train-1 -> gpu-1", text)
    assert "notebook" not in text
    assert "Pod/ml/inference" not in text
    assert re.search(
        r"PlanDropped Workload/ml/gang-2 .*stale|PlanRejected Workload/ml/gang-2", text
    )
    assert "Admitted Workload/ml/gang-2" in text
    assert "actuated -> admitted" in text  # the summary has the time of each step
    # ...and the life of each plan's durable record.
    assert re.search(
        r"Workload/ml/gang-1: requested > confirmed > actuating \(token \d+\) > actuated", text
    )
    assert re.search(r"Workload/ml/gang-2: requested > (confirmed > dropped|rejected)", text)


def test_up_stops_on_a_manifest_it_cannot_read_at_start(tmp_path: Path) -> None:
    """One unreadable file in the scenario: nothing starts on part of the cluster; ``up``
    stops at once and names the file and the field."""
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    for name in ("nodes.yaml", "cluster.yaml"):
        (scenario / name).write_text((ROOT / "examples" / "saga-demo" / name).read_text())
    (scenario / "broken.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\n  namespace: ml\n"
        "spec:\n  containers:\n  - name: c\n    resources:\n      requests:\n"
        "        cpu: lots\n"
    )
    out = up_until_settled(scenario, tmp_path / "store")
    text = " ".join(out.stdout.split())
    compact = "".join(out.stdout.split())  # the console wraps long lines, even mid-word
    assert out.returncode != 0, text
    assert "service ingest stopped on invalid input" in text, text
    assert "broken.yaml" in compact, text
    assert "requests.cpu" in compact, text
    assert "(line11)" in compact, text
    assert "keeps exiting" not in text  # stopped at the first exit, not after a crash loop


def test_up_until_settled_waits_for_the_timeline(tmp_path: Path) -> None:
    """Everything settles within seconds, but the timeline still has a step at 8 s:
    ``--until-settled`` stops only after that step has played and been decided on."""
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    (scenario / "cluster.yaml").write_text(
        CLUSTER
        + ADMITTED.format(name="running", minute=0, priority=100, cpus=4)
        + "---\n"
        + PENDING.format(name="early", minute=0, priority=100, cpus=2)
    )
    (scenario / "late.yaml").write_text(PENDING.format(name="late", minute=0, priority=100, cpus=2))
    (scenario / "timeline.yaml").write_text("- at: 8\n  apply: late.yaml\n")
    started = time.monotonic()
    out = up_until_settled(scenario, tmp_path / "store", "--termination-delay", "0.5")
    text = " ".join(out.stdout.split())
    assert out.returncode == 0, text + out.stderr
    assert "not settled" not in text, text
    assert time.monotonic() - started > 8
    assert re.search(r"Admitted Workload/ml/early", text), text
    assert re.search(r"Admitted Workload/ml/late", text), text
