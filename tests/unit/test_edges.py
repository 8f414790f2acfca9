"""Edges that do not fall over (issue 25): quantities that parse but do not fit, numbers
too long to convert, and objects with a megabyte of labels. Every reader refuses such
a quantity by name (file, line, object, field), never with a traceback; what is kept
of labels is bounded, and ordinary labels are all kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gangpreempt.cli import cli
from gangpreempt.manifests import load
from gangpreempt.manifests.labels import MAX_LABEL_CHARACTERS, bounded_labels
from gangpreempt.manifests.objects import load_objects
from gangpreempt.model import kinds
from gangpreempt.model.bounds import INT64_MAX
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.model.quantity import MAX_AMOUNT
from services.ingest.sources import Differ

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
NOW = "2026-01-01T00:00:00Z"
DIGITS_5000 = "9" * 5000
QUOTA_FIELD = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def quota_demo(tmp_path: Path, nominal: str) -> Path:
    """examples/quota-demo with the standalone ClusterQueue's cpu quota set to
    ``nominal`` (the one ``nominalQuota: 4`` of cluster.yaml, on line 31)."""
    folder = tmp_path / "demo"
    shutil.copytree(ROOT / "examples/quota-demo", folder)
    path = folder / "cluster.yaml"
    text = path.read_text()
    assert text.count("nominalQuota: 4\n") == 1
    path.write_text(text.replace("nominalQuota: 4\n", f"nominalQuota: {nominal}\n"))
    return folder


def decisions(out: str) -> dict[str, str]:
    return {d["preemptor"]: d["outcome"] for d in json.loads(out)["decisions"]}


def test_the_edited_quota_is_the_one_read(tmp_path: Path) -> None:
    """The control of the tests below: the quota they edit decides the standalone
    queue's preemptor (4 CPUs, all used: it preempts; 100: it fits)."""
    code, out, err = run("plan", "-f", str(quota_demo(tmp_path, "4")), "--now", NOW, "-o", "json")
    assert code == 0, err
    assert decisions(out)["Workload/default/in"] == "Preempt"
    code, out, err = run(
        "plan", "-f", str(quota_demo(tmp_path / "b", "100")), "--now", NOW, "-o", "json"
    )
    assert code == 0, err
    assert decisions(out)["Workload/default/in"] == "Admit"


@pytest.mark.parametrize(
    ("nominal", "message"),
    [
        ("20Ei", "beyond the largest quantity gangpreempt computes with (9.01e+12 cores)"),
        ("9e25", "beyond the largest quantity gangpreempt computes with (9.01e+12 cores)"),
        ("9Ei", "beyond the largest quantity gangpreempt computes with (9.01e+12 cores)"),
        (DIGITS_5000, "a number of 5000 digits is out of range"),  # a YAML integer
        (f"'{DIGITS_5000}'", "a number of 5000 digits is out of range"),  # a string
        (f"{DIGITS_5000}Ki", "a number of 5000 digits is out of range"),
        (f"1e{DIGITS_5000}", "exponent too long"),
    ],
    ids=["20Ei", "9e25", "9Ei", "5000-digit-int", "5000-digit-string", "5000-digit-Ki", "exp"],
)
def test_a_quota_that_does_not_fit_exits_2_naming_it(
    tmp_path: Path, nominal: str, message: str
) -> None:
    folder = quota_demo(tmp_path, nominal)
    code, out, err = run("plan", "-f", str(folder), "--now", NOW)
    assert code == 2, err
    assert out == ""
    assert "Traceback" not in err
    path = folder / "cluster.yaml"
    assert f"{path}: document 4 (ClusterQueue standalone): {QUOTA_FIELD}: " in err
    assert message in err
    assert "(line 31)" in err
    assert len(err) < 2000  # the value is not printed whole


def test_the_largest_quota_is_taken(tmp_path: Path) -> None:
    code, out, err = run(
        "plan", "-f", str(quota_demo(tmp_path, f"{MAX_AMOUNT}m")), "--now", NOW, "-o", "json"
    )
    assert code == 0, err
    assert decisions(out)["Workload/default/in"] == "Admit"
    code, _out, err = run("plan", "-f", str(quota_demo(tmp_path / "b", f"{MAX_AMOUNT + 1}m")))
    assert code == 2
    assert "beyond the largest quantity" in err


def workload(usage: str, count: int = 1000, request: str = "1Ti") -> str:
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\n"
        "metadata: {name: big, namespace: default}\n"
        "spec:\n  queueName: main\n  podSets:\n  - name: main\n"
        f"    count: {count}\n    template:\n      spec:\n        containers:\n"
        f"        - {{name: c, resources: {{requests: {{memory: '{request}'}}}}}}\n"
        "status:\n  admission:\n    clusterQueue: standalone\n    podSetAssignments:\n"
        f"    - name: main\n      flavors: {{memory: default}}\n"
        f"      resourceUsage: {{memory: '{usage}'}}\n      count: {count}\n"
    )


def test_a_recorded_usage_is_a_sum_bounded_by_int64(tmp_path: Path) -> None:
    """A pod set's usage (1000 pods of 16 TiB: 16,000 TiB, past the bound of one
    amount) is read; one past what the model encodes is refused by name."""
    path = tmp_path / "wl.yaml"
    path.write_text(workload("16000Ti", request="16Ti"))
    loaded = load([str(path)], references=False)
    (wl,) = loaded.state.workloads.values()
    assert wl.admission is not None
    usage = wl.admission.pod_set_assignments[0].resource_usage["memory"]
    assert MAX_AMOUNT < usage == 16000 * 2**40 <= INT64_MAX
    path.write_text(workload("8Ei"))
    code, _out, err = run("plan", "-f", str(path))
    assert code == 2
    assert "Workload default/big" in err
    assert "status.admission.podSetAssignments[0].resourceUsage.memory" in err
    assert "beyond the largest quantity" in err


def test_a_pod_whose_containers_sum_past_the_bound_is_named(tmp_path: Path) -> None:
    """Each container's request fits; their sum, the pod's request, does not."""
    path = tmp_path / "pod.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n"
        "  containers:\n"
        "  - {name: a, resources: {requests: {memory: 6Pi}}}\n"
        "  - {name: b, resources: {requests: {memory: 6Pi}}}\n"
    )
    code, _out, err = run("plan", "-f", str(path))
    assert code == 2
    assert "Pod ml/p): spec.containers: the pod's memory request, summed over its" in err
    assert "beyond the largest quantity gangpreempt computes with (8Pi)" in err


@pytest.mark.parametrize(
    "field",
    ["spec.priority", "metadata.labels.team", "metadata.resourceVersion"],
)
def test_a_5000_digit_integer_anywhere_is_no_traceback(tmp_path: Path, field: str) -> None:
    """The fast YAML reader gives integers of any length; Python refuses to print one
    of 5,000 digits. The lined reading takes it as text, and the field says so."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"team": "a"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    where, key = field.rsplit(".", 1)
    target = doc
    for part in where.split("."):
        target = target[part]
    target[key] = "@@"
    path = tmp_path / "pod.yaml"
    path.write_text(json.dumps(doc).replace('"@@"', DIGITS_5000))
    result = CliRunner().invoke(cli, ["plan", "-f", str(path)])
    assert result.exit_code in (0, 2), result.exc_info
    assert "Traceback" not in result.stderr


def big_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels, "resourceVersion": "1"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def test_a_megabyte_label_is_left_out_and_the_others_kept() -> None:
    labels = {"app": "train", "huge": "x" * 2**20, "scheduling.x-k8s.io/pod-group": "g"}
    loaded = load_objects("kubernetes", [big_pod("p", labels)])
    pod = loaded.state.pods["ml/p"]
    assert pod.labels == {"app": "train", "scheduling.x-k8s.io/pod-group": "g"}
    assert pod.group == "ml/g"  # the labels read by name are read
    (warning,) = loaded.warnings
    assert "Pod ml/p: metadata.labels: 1 label(s) longer than Kubernetes allows" in warning
    assert "'huge': its value has 1048576 characters (at most 63)" in warning
    assert len(kinds.encode_object(pod)) < 1000


def test_thousands_of_valid_labels_are_kept_up_to_the_budget() -> None:
    """Each label is one Kubernetes accepts; together they are over the budget: the
    labels gangpreempt reads by name stay, the others are kept in key order until the
    budget is spent."""
    labels = {f"l{i:05d}.example.com/k": "v" * 63 for i in range(8000)}
    labels["kueue.x-k8s.io/podset"] = "workers"
    kept, message = bounded_labels(labels)
    assert kept["kueue.x-k8s.io/podset"] == "workers"
    assert sum(len(k) + len(v) for k, v in kept.items()) <= MAX_LABEL_CHARACTERS
    others = sorted(k for k in kept if k.startswith("l"))
    assert others == sorted(k for k in labels if k.startswith("l"))[: len(others)]
    assert message is not None
    assert f"{8001 - len(kept)} label(s) left out past" in message


def test_ordinary_labels_are_all_kept() -> None:
    labels = {
        "app.kubernetes.io/name": "trainer",
        "batch.kubernetes.io/controller-uid": "0c3a2f8e-5f6b-4d6e-9c1a-2b7d9e4f1a3c",
        "p" * 253 + "/" + "n" * 63: "v" * 63,  # the longest Kubernetes accepts
        "empty": "",
    }
    kept, message = bounded_labels(labels)
    assert kept == labels
    assert message is None


def test_pods_with_a_megabyte_label_are_decided_as_without_it(tmp_path: Path) -> None:
    """Through ``plan -f``, on pods a PodDisruptionBudget selects by label: a warning
    naming each pod and its line, and the same decisions as without the label."""
    source = ROOT / "tests/scenarios/nodes/gang-pdb-reprieval/cluster.yaml"
    path = tmp_path / "cluster.yaml"
    shutil.copy(source, path)
    code, before, err = run("plan", "-f", str(path), "--now", NOW, "-o", "json")
    assert code == 0, err
    text = path.read_text()
    selected = "  labels:\n    app: db\n"
    assert text.count(selected) == 2
    path.write_text(text.replace(selected, f"  labels:\n    huge: {'x' * 2**20}\n    app: db\n"))
    code, after, err = run("plan", "-f", str(path), "--now", NOW, "-o", "json")
    assert code == 0, err
    assert json.loads(after)["decisions"] == json.loads(before)["decisions"]
    assert json.loads(before)["decisions"]  # something was decided
    warnings = [line for line in err.splitlines() if "metadata.labels" in line]
    assert len(warnings) == 2
    for warning in warnings:
        assert f"{path}: document" in warning
        assert "1 label(s) longer than Kubernetes allows left out" in warning
        assert "(line " in warning


def test_api_objects_that_do_not_fit_are_left_out_by_name() -> None:
    """The kubernetes source's reader: each such object is rejected with its field;
    the ordinary objects beside it are read."""

    def queue(name: str, nominal: str) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [{"name": "cpu", "nominalQuota": nominal}],
                            }
                        ],
                    }
                ]
            },
        }

    objects = [queue("a", "20Ei"), queue("b", "9e25"), queue("c", DIGITS_5000), queue("ok", "8")]
    loaded = load_objects("kubernetes", objects)
    assert sorted(loaded.state.cluster_queues) == ["ok"]
    assert len(loaded.rejected) == 3
    for name, error in zip("abc", sorted(loaded.rejected), strict=True):
        assert error.startswith(f"kubernetes: ClusterQueue {name}: {QUOTA_FIELD}: ")


def test_the_differ_leaves_out_an_object_it_cannot_encode() -> None:
    """A number past int64 that no reader bounded (a pod's priority from a file) is
    left out of what ingest publishes, and the rest goes on."""
    state = ClusterState()
    kinds.put(state, Pod("ml", "huge", {"cpu": 1000}, priority=2**70))
    kinds.put(state, Pod("ml", "ok", {"cpu": 1000}, priority=1))
    differ = Differ()
    upserts, deletes = differ.diff(state)
    assert [kinds.key_of(o) for o in upserts] == ["ml/ok"]
    assert deletes == []
    assert differ.keys() == {("Pod", "ml/ok")}
