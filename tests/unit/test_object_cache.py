"""The kubernetes source's incremental decode (``manifests.objects.ObjectCache``) gives
the state a whole decode gives, whatever changed, and decodes only what changed."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from gangpreempt.manifests.objects import ObjectCache, load_objects

pytestmark = pytest.mark.unit

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def bundle_objects(bundle: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(bundle.glob("*.yaml")):
        if f.name in ("expect.yaml", "timeline.yaml"):
            continue
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and "metadata" in doc:
                out.append(doc)
            elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
                out.extend(i for i in doc["items"] if isinstance(i, dict))
    return out


def keyed(objects: list[dict[str, Any]]) -> list[tuple[Any, str, dict[str, Any]]]:
    rows = []
    for i, obj in enumerate(objects):
        meta = obj.get("metadata") or {}
        key = (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"), i)
        rows.append((key, str(meta.get("resourceVersion", "")), obj))
    return rows


def same(a: Any, b: Any) -> bool:
    return msgspec.to_builtins(a.state) == msgspec.to_builtins(b.state) and sorted(
        a.rejected
    ) == sorted(b.rejected)


BUNDLES = sorted(p for p in SCENARIOS.glob("*/*") if p.is_dir())


@pytest.mark.parametrize("bundle", BUNDLES[::7], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_incremental_equals_whole_through_changes(bundle: Path) -> None:
    rng = random.Random(bundle.name)
    objects = bundle_objects(bundle)
    for i, obj in enumerate(objects):
        obj.setdefault("metadata", {})["resourceVersion"] = str(i + 1)
    cache = ObjectCache("test")
    assert same(cache.load(keyed(objects)), load_objects("test", objects))
    assert cache.decoded == len(objects)
    for round_ in range(3):
        objects = copy.deepcopy(objects)
        changed = rng.sample(range(len(objects)), k=min(2, len(objects)))
        for i in changed:  # a new version: priority or labels changed
            meta = objects[i]["metadata"]
            meta["resourceVersion"] = f"{meta['resourceVersion']}-{round_}"
            meta.setdefault("labels", {})["touched"] = str(round_)
        if objects and rng.random() < 0.5:
            objects.pop(rng.randrange(len(objects)))  # one deleted
            changed = []  # indexes moved: the decoded count is not checked this round
        got = cache.load(keyed(objects))
        assert same(got, load_objects("test", objects))
        if changed:
            assert cache.decoded == len(changed)


def test_an_invalid_object_is_rejected_from_the_cache_too() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "a", "resourceVersion": "1"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
    }
    cache = ObjectCache("kubernetes")
    for _ in range(2):
        loaded = cache.load([("p", "1", pod)])
        assert loaded.state.pods == {}
        (error,) = loaded.rejected
        assert "Pod a/p" in error
        assert "cpu" in error
    assert cache.decoded == 0  # the second time from the cache


def test_a_gang_joins_across_cached_and_new_objects() -> None:
    """Pods joining a scheduling.k8s.io Workload through spec.workloadRef: the Workload
    decoded once, a pod arriving later still joins its group."""
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "a", "resourceVersion": "1"},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]},
    }

    def pod(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "a", "resourceVersion": "1"},
            "spec": {
                "workloadRef": {"name": "w", "podGroup": "workers"},
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
        }

    cache = ObjectCache("kubernetes")
    first = cache.load([("w", "1", workload), ("p0", "1", pod("p0"))])
    assert first.state.pods["a/p0"].group == "a/w-workers"
    second = cache.load([("w", "1", workload), ("p0", "1", pod("p0")), ("p1", "1", pod("p1"))])
    assert cache.decoded == 1
    assert second.state.pods["a/p1"].group == "a/w-workers"
    assert second.state.pod_groups["a/w-workers"].min_count == 2


def test_a_live_clusters_unreadable_toleration_policy_is_kept_with_a_warning() -> None:
    """One typo on one PriorityClass of a live cluster: the class is read without a
    toleration (as the plugin does), said in a warning each load, and the pods that use
    it are read; a pod that cannot be read at all is left out, the rest is read."""
    bad_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": "low",
            "resourceVersion": "1",
            "annotations": {
                "preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority": "1k"
            },
        },
        "value": 10,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "resourceVersion": "2"},
        "spec": {"priorityClassName": "low", "containers": [{"name": "c"}]},
    }
    broken = copy.deepcopy(pod)
    broken["metadata"]["name"] = "q"
    broken["spec"]["containers"] = "none"
    cache = ObjectCache("kubernetes")
    for _ in range(2):  # the second load takes the class from the cache: still said
        loaded = cache.load(keyed([bad_class, pod, broken]))
        assert loaded.state.priority_classes["low"].minimum_preemptable_priority is None
        assert sorted(loaded.state.pods) == ["ml/p"]
        [warning] = loaded.warnings
        assert "PriorityClass low" in warning
        assert "minimum-preemptable-priority" in warning
        [rejected] = loaded.rejected
        assert "Pod ml/q" in rejected
        assert "spec.containers" in rejected
