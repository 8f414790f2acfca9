from __future__ import annotations

from pathlib import Path

import pytest

from gangpreempt.errors import ManifestError
from gangpreempt.manifests import load

pytestmark = pytest.mark.unit

CQ_V1BETA1 = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: "10", borrowingLimit: "5", lendingLimit: 2500m}
      - {name: memory, nominalQuota: 10Gi}
  flavorFungibility: {whenCanBorrow: Borrow, whenCanPreempt: Preempt}
  preemption:
    withinClusterQueue: LowerOrNewerEqualPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
"""

CQ_V1BETA2 = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohortName: all
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 4}]
  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor, preference: PreemptionOverBorrowing}
"""

WORKLOAD = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: train, namespace: ml, uid: u1, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  queueName: q
  priorityClassName: high
  priorityClassSource: kueue.x-k8s.io/workloadpriorityclass
  podSets:
  - name: workers
    count: 3
    template:
      spec:
        nodeSelector: {gpu: a100}
        tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
        initContainers:
        - {name: init, resources: {requests: {cpu: "4"}}}
        - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: 500m}}}
        containers:
        - {name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}
        - {name: b, resources: {limits: {cpu: "2", nvidia.com/gpu: 1}}}
        overhead: {cpu: 100m}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 5000
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_both_cluster_queue_spellings(tmp_path: Path) -> None:
    loaded = load([write(tmp_path, "a.yaml", CQ_V1BETA1), write(tmp_path, "b.yaml", CQ_V1BETA2)])
    a = loaded.state.cluster_queues["team-a"]
    b = loaded.state.cluster_queues["team-b"]
    assert (a.cohort, b.cohort) == ("all", "all")
    q = a.resource_groups[0].flavors[0].resources["cpu"]
    assert (q.nominal, q.borrowing_limit, q.lending_limit) == (10_000, 5_000, 2_500)
    assert a.resource_groups[0].flavors[0].resources["memory"].nominal == 10 * 2**30
    # v1beta1's Borrow / Preempt are today's MayStopSearch.
    assert (a.flavor_fungibility.when_can_borrow, a.flavor_fungibility.when_can_preempt) == (
        "MayStopSearch",
        "MayStopSearch",
    )
    assert a.preemption.borrow_within_cohort == "LowerPriority"
    assert a.preemption.max_priority_threshold == 100
    assert b.queueing_strategy == "StrictFIFO"
    assert b.flavor_fungibility.preference == "PreemptionOverBorrowing"


def test_workload_requests_and_priority(tmp_path: Path) -> None:
    loaded = load([write(tmp_path, "w.yaml", WORKLOAD)])
    wl = loaded.state.workloads["ml/train"]
    ps = wl.pod_sets[0]
    # containers 1 + 2 (limits stand in) + sidecar 0.5 = 3.5; init peak 4 + 0 = 4; +0.1 overhead
    assert ps.requests == {"cpu": 4100, "memory": 2**30, "nvidia.com/gpu": 1}
    assert ps.count == 3
    assert ps.scheduling.node_selector == {"gpu": "a100"}
    assert loaded.state.priority_of(wl) == 5000


def test_priority_class_ref_v1beta2(tmp_path: Path) -> None:
    text = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: prod}
value: 700
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: w, namespace: default}
spec:
  priorityClassRef: {group: scheduling.k8s.io, kind: PriorityClass, name: prod}
  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]
"""
    loaded = load([write(tmp_path, "p.yaml", text)])
    assert loaded.state.priority_of(loaded.state.workloads["default/w"]) == 700


def test_list_is_flattened_and_unknown_kinds_warn_once(tmp_path: Path) -> None:
    text = """
apiVersion: v1
kind: List
items:
- apiVersion: kueue.x-k8s.io/v1beta2
  kind: ResourceFlavor
  metadata: {name: spot}
- {apiVersion: batch/v1, kind: Job, metadata: {name: j1, namespace: default}}
- {apiVersion: batch/v1, kind: Job, metadata: {name: j2, namespace: default}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: default}}
"""
    loaded = load([write(tmp_path, "list.yaml", text)])
    assert "spot" in loaded.state.flavors
    assert len(loaded.warnings) == 2
    assert any("2 Job objects without a kueue.x-k8s.io/queue-name" in w for w in loaded.warnings)
    assert any("1 object of unsupported kind ConfigMap (v1)" in w for w in loaded.warnings)


def test_folder_is_read_recursively(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path, "a.yaml", CQ_V1BETA1)
    write(tmp_path / "sub", "b.yml", CQ_V1BETA2)
    write(tmp_path, "notes.txt", "not yaml: [")
    loaded = load([str(tmp_path)])
    assert set(loaded.state.cluster_queues) == {"team-a", "team-b"}


def test_error_names_file_document_object_field_and_line(tmp_path: Path) -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: b}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: train
  namespace: default
spec:
  podSets:
  - name: main
    count: -1
    template: {spec: {containers: []}}
"""
    path = write(tmp_path, "workloads.yaml", text)
    with pytest.raises(ManifestError) as err:
        load([path])
    assert str(err.value).startswith(
        f"{path}: document 3 (Workload default/train): spec.podSets[0].count: expected a positive integer"
    )
    assert err.value.line == 18


@pytest.mark.parametrize(
    ("snippet", "field", "message"),
    [
        (
            "spec: {queueingStrategy: Sometimes}",
            "spec.queueingStrategy",
            "expected one of BestEffortFIFO, StrictFIFO",
        ),
        (
            "spec: {preemption: {withinClusterQueue: Always}}",
            "spec.preemption.withinClusterQueue",
            "expected one of Never",
        ),
        (
            "spec: {resourceGroups: [{coveredResources: [cpu], flavors: [{name: f, resources: [{name: cpu, nominalQuota: lots}]}]}]}",
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "expected a Kubernetes quantity",
        ),
        (
            "spec: {resourceGroups: [{coveredResources: [cpu], flavors: [{name: f, resources: [{name: gpu, nominalQuota: 1}]}]}]}",
            "spec.resourceGroups[0].flavors[0].resources[0].name",
            "resource gpu is not in the group's coveredResources",
        ),
    ],
)
def test_cluster_queue_field_errors(tmp_path: Path, snippet: str, field: str, message: str) -> None:
    text = f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: q}}\n{snippet}\n"
    path = write(tmp_path, "cq.yaml", text)
    with pytest.raises(ManifestError) as err:
        load([path])
    assert f"document 1 (ClusterQueue q): {field}: {message}" in str(err.value)


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "kind: ClusterQueue\nmetadata: {name: [unclosed\n")
    with pytest.raises(ManifestError) as err:
        load([path])
    assert "invalid YAML" in str(err.value)
    assert err.value.line is not None


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file or folder"):
        load([str(tmp_path / "absent.yaml")])


def test_duplicate_objects_warn_and_last_wins(tmp_path: Path) -> None:
    one = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\nspec: {nodeLabels: {v: '1'}}\n"
    two = one.replace("'1'", "'2'")
    loaded = load([write(tmp_path, "a.yaml", one), write(tmp_path, "b.yaml", two)])
    assert loaded.state.flavors["f"].node_labels == {"v": "2"}
    assert any("defined more than once" in w for w in loaded.warnings)
