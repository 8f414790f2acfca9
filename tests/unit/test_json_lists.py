"""A JSON List (``kubectl get -o json``) is read item by item: its items are decoded one
at a time (``yamlio.LazyItems``), and the List reads as the same objects would as YAML
documents, errors included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangpreempt.errors import ManifestError
from gangpreempt.manifests import load
from gangpreempt.manifests.yamlio import LazyItems, fast_documents

pytestmark = pytest.mark.unit

ITEMS: list[dict[str, Any]] = [
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a"}},
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "z1"}},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}},
    },
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "ml"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
        },
        "status": {"phase": "Running"},
    },
]


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def test_a_json_lists_items_are_decoded_one_by_one(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(as_list(ITEMS)))
    ((_, doc),) = list(fast_documents(str(path)))
    assert isinstance(doc["items"], LazyItems)
    assert doc["kind"] == "List"
    assert doc["metadata"] == {}
    assert list(doc["items"]) == ITEMS
    assert doc["items"][1:] == ITEMS[1:]


def test_a_json_list_reads_as_the_same_yaml_documents(tmp_path: Path) -> None:
    (tmp_path / "j").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "j" / "cluster.json").write_text(json.dumps(as_list(ITEMS)))
    (tmp_path / "y" / "cluster.yaml").write_text(yaml.safe_dump_all(ITEMS))
    from_json, from_yaml = load([str(tmp_path / "j")]), load([str(tmp_path / "y")])
    assert from_json.state.flavors == from_yaml.state.flavors
    assert from_json.state.nodes == from_yaml.state.nodes
    assert from_json.state.pods == from_yaml.state.pods


def test_a_bad_item_of_a_json_list_is_named(tmp_path: Path) -> None:
    bad = {**ITEMS[1], "status": {"allocatable": {"cpu": "lots"}}}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(as_list([ITEMS[0], bad])))
    with pytest.raises(ManifestError) as err:
        load([str(path)])
    assert "cluster.json" in str(err.value)
    assert "items[1]" in str(err.value), str(err.value)


def test_json_that_is_not_a_list_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "flavor.json"
    path.write_text("  \n" + json.dumps(ITEMS[0]))
    ((_, doc),) = list(fast_documents(str(path)))
    assert doc == ITEMS[0]
    odd = tmp_path / "odd.json"  # a List-like kind whose items are not a list
    odd.write_text(json.dumps({"apiVersion": "v1", "kind": "FooList", "items": 3}))
    ((_, doc),) = list(fast_documents(str(odd)))
    assert doc["items"] == 3
