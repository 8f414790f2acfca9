"""No input makes ``plan`` fail with a traceback: manifests that are valid to start with
(the scenario bundles, Kueue's site examples, the integrations) are damaged at random
places with hostile values (huge, negative, NaN-like, deeply nested, wrong types), and
random text is fed as a file; ``plan`` exits 0 (decided) or 2 (the input is named as
invalid), never 1."""

from __future__ import annotations

import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.cli import cli

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def _corpus() -> list[list[Any]]:
    """Bundles of documents that ``plan`` reads without error."""
    folders = sorted(p.parent for p in (ROOT / "tests/scenarios").glob("*/*/expect.yaml"))
    bundles: list[list[Any]] = []
    for folder in folders[::7]:  # a spread of them: quota, hierarchy, nodes, policies
        docs: list[Any] = []
        for f in sorted(folder.glob("*.yaml")):
            if f.name not in ("expect.yaml", "timeline.yaml"):
                docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d is not None)
        bundles.append(docs)
    site = [
        d
        for f in sorted((ROOT / "tests/data/kueue-site").glob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if d is not None
    ]
    bundles.append(site)
    bundles.append([*site, _jobset(), _pytorch_job(), _node()])
    return bundles


def _template(requests: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}


def _jobset() -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": _template({"cpu": 1})}},
                }
            ],
        },
    }


def _pytorch_job() -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": _template({"cpu": 1})},
                "Worker": {"replicas": 2, "template": _template({"cpu": 2})},
            }
        },
    }


def _node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


CORPUS = _corpus()


def _deep(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


HOSTILE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            "",
            "NaN",
            "-NaN",
            "Infinity",
            "-1",
            "-0.5",
            "1e400",
            "1e-400",
            "99999999999999999999999Ei",
            "10000000000000000",
            "0x10",
            "1.5.5",
            "3s",
            "~",
            "\x00",
            "é" * 300,
            2**63,
            -(2**63),
            10**40,
            -1,
            0,
            math.nan,
            math.inf,
            -math.inf,
            1.5,
            [],
            {},
            [1, "a", None],
            {"a": {"b": [None]}},
        ]
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=20),
    st.integers(min_value=50, max_value=400).map(_deep),
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a document a value can be replaced at."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*path, i)))
    return out


def _replace(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _replace(doc[head], rest, new)}
    out = list(doc)
    out[head] = _replace(doc[head], rest, new)
    return out


@st.composite
def damaged(draw: st.DrawFn) -> list[Any]:
    docs = list(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if not docs:
            break
        i = draw(st.integers(min_value=0, max_value=len(docs) - 1))
        path = draw(st.sampled_from(_paths(docs[i])))
        docs[i] = _replace(docs[i], path, draw(HOSTILE))
    return docs


def _write(tmp: Path, docs: list[Any], as_json: bool) -> Path:
    path = tmp / ("input.json" if as_json else "input.yaml")
    if as_json:
        # A JSON List, as kubectl get -o json prints (NaN and Infinity as Python writes
        # them: not JSON, which the reader must say).
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    else:
        # PyYAML's writer recurses a few frames per level: a 400-deep value fails or not
        # with the depth of the stack it is called from (hypothesis's replay differs).
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20_000))
        try:
            path.write_text(yaml.safe_dump_all(docs, allow_unicode=True))
        finally:
            sys.setrecursionlimit(limit)
    return path


def _plan(path: Path, *args: str) -> None:
    result = CliRunner().invoke(
        cli, ["plan", "-f", str(path), "--now", "2026-01-01T00:00:00Z", *args]
    )
    if result.exit_code not in (0, 2):
        trace = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
        pytest.fail(
            f"exit {result.exit_code} on {path.read_text()[:2000]!r}\n{result.stderr}\n{trace}"
        )


@SETTINGS
@given(docs=damaged(), as_json=st.booleans(), output=st.sampled_from(["json", "table"]))
def test_damaged_manifests_exit_0_or_2(
    tmp_path_factory: pytest.TempPathFactory, docs: list[Any], as_json: bool, output: str
) -> None:
    _plan(_write(tmp_path_factory.mktemp("hostile"), docs, as_json), "-o", output)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.one_of(st.text(max_size=300), st.binary(max_size=300).map(repr)))
def test_random_text_exits_0_or_2(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("text") / "input.yaml"
    path.write_text(text)
    _plan(path)


@pytest.mark.parametrize(
    "text",
    [
        # block nesting deeper than the YAML reader's recursion
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        + "".join("  " * (i + 2) + "- \n" for i in range(400)),
        # flow nesting
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: "
        + "[" * 5000
        + "]" * 5000
        + "}\n",
        # a Job of a billion pods on a cluster with a node
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: 4}}\n---\n"
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: "
        "{kueue.x-k8s.io/queue-name: q}}\nspec: {parallelism: 1000000000, suspend: true, "
        "template: {spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}}\n",
        # a pod of a List whose labels are not a map (found by the property above)
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n"
        "  metadata: {name: p, labels: true}\n"
        "  spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}\n",
    ],
)
def test_known_hostile_shapes_exit_2(tmp_path: Path, text: str) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["plan", "-f", str(path)])
    assert result.exit_code == 2, result.stderr
    assert str(path) in result.stderr
