"""Typos in manifests: a key that is not a field of its kind is a warning naming file,
line and the nearest known field; ``--strict`` makes warnings exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gangpreempt.cli import cli
from gangpreempt.manifests import apifields, load
from tests.apifields import generate

pytestmark = pytest.mark.unit

TYPOS = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq
spec:
  premption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources:
      - name: cpu
        nominalQuota: 9
        borowingLimit: 1
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml, lables: {a: b}}
spec:
  containers:
  - name: c
    resources:
      requets: {cpu: 1}
"""


def test_typos_are_warnings_with_line_and_the_nearest_field(tmp_path: Path) -> None:
    path = tmp_path / "typos.yaml"
    path.write_text(TYPOS)
    warnings = [w for w in load([str(path)]).warnings if "is not a field" in w]
    assert warnings == [
        f"{path}: document 1 (ClusterQueue cq): spec: 'premption' is not a field of "
        "ClusterQueueSpec; did you mean 'preemption'? (line 6)",
        f"{path}: document 1 (ClusterQueue cq): spec.resourceGroups[0].flavors[0].resources[0]: "
        "'borowingLimit' is not a field of ResourceQuota; did you mean 'borrowingLimit'? (line 15)",
        f"{path}: document 2 (Pod ml/p): metadata: 'lables' is not a field of ObjectMeta; "
        "did you mean 'labels'? (line 19)",
        f"{path}: document 2 (Pod ml/p): spec.containers[0].resources: 'requets' is not a "
        "field of ResourceRequirements; did you mean 'requests'? (line 24)",
    ]


def test_strict_makes_warnings_exit_2_and_decides_nothing(tmp_path: Path) -> None:
    path = tmp_path / "typos.yaml"
    path.write_text(TYPOS)
    loose = CliRunner().invoke(cli, ["plan", "-f", str(path), "-o", "json"])
    assert loose.exit_code == 0
    assert json.loads(loose.stdout)["decisions"][0]["preemptor"] == "Pod/ml/p"
    strict = CliRunner().invoke(cli, ["plan", "-f", str(path), "-o", "json", "--strict"])
    assert strict.exit_code == 2
    assert strict.stdout == ""
    assert "error: --strict: 4 problems in the input; nothing decided" in strict.stderr


def test_valid_manifests_have_no_unknown_fields() -> None:
    root = Path(__file__).resolve().parents[2]
    for folder in [*sorted((root / "tests/scenarios").glob("*/*")), root / "examples"]:
        files = [
            str(f)
            for f in sorted(folder.rglob("*.yaml"))
            if f.name not in ("expect.yaml", "timeline.yaml")
        ]
        if files:
            loaded = load(files)
            assert not [w for w in loaded.warnings if "is not a field" in w], folder


def test_the_shipped_core_fields_are_the_kubernetes_clients() -> None:
    """``apifields.json`` names no field the kubernetes client's models do not (newer
    clients only add fields); regenerate it with ``python -m tests.apifields``."""
    shipped = apifields.types()
    generated = generate()
    for name, fields in generated.items():
        extra = apifields.CORE_EXTRA.get(name, {})
        assert set(shipped[name]) - set(extra) <= set(fields), name
    assert set(apifields.CORE_ROOTS) <= set(shipped)
