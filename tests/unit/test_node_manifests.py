"""Reading the node-level objects: Node, Pod (effective requests, priority, toleration
times, gang membership in every spelling), PDB, PriorityClass tolerations, gangs,
ElasticQuota; and the errors bad ones get."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from gangpreempt.errors import InvalidInput, ManifestError
from gangpreempt.manifests import load
from gangpreempt.placement.cluster import NodeCluster

pytestmark = pytest.mark.unit


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


NODE = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {zone: a}}
spec:
  unschedulable: true
  taints: [{key: gpu, value: "true", effect: NoSchedule}]
status:
  allocatable: {cpu: "96", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
"""

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: w-0
  namespace: ml
  labels: {scheduling.x-k8s.io/pod-group: train}
  deletionTimestamp: "2026-01-01T00:10:00Z"
spec:
  nodeName: gpu-1
  priorityClassName: low
  preemptionPolicy: Never
  nodeSelector: {zone: a}
  tolerations: [{key: gpu, operator: Exists}]
  overhead: {cpu: 100m}
  initContainers:
  - {name: init, resources: {requests: {cpu: "4"}}}
  - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: 500m}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", nvidia.com/gpu: "4"}}}
  - {name: b, resources: {limits: {cpu: "2", memory: 1Gi}}}
status:
  phase: Running
  startTime: "2026-01-01T00:00:00Z"
  conditions:
  - {type: PodScheduled, status: "True", lastTransitionTime: "2026-01-01T00:00:01Z"}
"""


CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""


def test_node_and_pod_fields(tmp_path: Path) -> None:
    state = load([write(tmp_path, NODE + "---" + POD + "---" + CLASSES)]).state
    node = state.nodes["gpu-1"]
    assert node.allocatable["nvidia.com/gpu"] == 8
    assert node.unschedulable
    assert [str(t) for t in node.taints] == ["gpu=true:NoSchedule"]
    pod = state.pods["ml/w-0"]
    # max(init 4 (no sidecar started before it), containers 1 + 2 + sidecar 0.5) = 4 CPU,
    # plus 0.1 overhead; limits stand in for the missing requests of container b.
    assert pod.requests["cpu"] == 4100
    assert pod.requests["nvidia.com/gpu"] == 4
    assert pod.node_name == "gpu-1"
    assert pod.terminating
    assert pod.preemption_policy == "Never"
    assert pod.group == "ml/train"
    assert pod.scheduled_at == datetime.fromisoformat("2026-01-01T00:00:01+00:00")
    assert pod.scheduling.node_selector == {"zone": "a"}
    # a label without a PodGroup object: an implicit all-or-nothing gang of its pods
    group = state.pod_groups["ml/train"]
    assert group.min_count == 1
    assert group.preemption_mode == "PodGroup"


def test_priority_class_toleration_annotations(tmp_path: Path) -> None:
    text = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: low-10min
  annotations:
    preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority: "10000"
    preemption-toleration.scheduling.x-k8s.io/toleration-seconds: "600"
value: 8000
"""
    pc = load([write(tmp_path, text)]).state.priority_classes["low-10min"]
    assert pc.minimum_preemptable_priority == 10000
    assert pc.toleration_seconds == 600


def test_bad_toleration_annotation_is_no_toleration_with_a_warning(tmp_path: Path) -> None:
    """As the Preemption Toleration plugin reads it: an unreadable policy tolerates
    nothing; the class is kept, and the warning names it, the annotation and the line."""
    text = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: low
  annotations:
    preemption-toleration.scheduling.x-k8s.io/toleration-seconds: "ten"
value: 8000
"""
    loaded = load([write(tmp_path, text)])
    pc = loaded.state.priority_classes["low"]
    assert (pc.value, pc.minimum_preemptable_priority, pc.toleration_seconds) == (8000, None, None)
    [message] = loaded.warnings
    assert "PriorityClass low" in message
    assert "toleration-seconds" in message
    assert "no toleration" in message


GANG_SHAPES = """
apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {name: old, namespace: ml}
spec:
  priorityClassName: high
  podGroups:
  - {name: workers, policy: {gang: {minCount: 2}}}
---
apiVersion: v1
kind: Pod
metadata: {name: old-0, namespace: ml}
spec:
  workloadRef: {name: old, podGroup: workers, podGroupReplicaKey: "1"}
  containers: [{name: c}]
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: Workload
metadata: {name: new, namespace: ml}
spec:
  podGroupTemplates:
  - {name: replica, schedulingPolicy: {gang: {minCount: 3}}, disruptionMode: PodGroup,
     priorityClassName: high}
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: new-0, namespace: ml}
spec:
  podGroupTemplateRef: {workload: {workloadName: new, podGroupTemplateName: replica}}
  schedulingPolicy: {gang: {minCount: 3}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: union, namespace: ml}
spec:
  schedulingPolicy: {gang: {minCount: 4}}
  disruptionMode: {all: {}}
---
apiVersion: v1
kind: Pod
metadata: {name: new-0-a, namespace: ml}
spec:
  schedulingGroup: {podGroupName: new-0}
  containers: [{name: c}]
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata: {name: legacy, namespace: ml}
spec: {minMember: 5}
"""


def test_gang_shapes(tmp_path: Path) -> None:
    state = load([write(tmp_path, GANG_SHAPES + "---" + CLASSES)]).state
    replica = state.pod_groups["ml/old-workers-1"]
    assert replica.min_count == 2
    assert replica.priority_class_name == "high"
    assert replica.preemption_mode == "Pod"  # KEP-5710's default
    assert state.pods["ml/old-0"].group == "ml/old-workers-1"
    assert state.gang_workload("ml/old") == ("ml/old-workers-1",)
    new = state.pod_groups["ml/new-0"]
    assert new.min_count == 3
    assert new.priority_class_name == "high"  # from its template
    assert state.pods["ml/new-0-a"].group == "ml/new-0"
    assert state.gang_workload("ml/new") == ("ml/new-0",)
    assert state.pod_groups["ml/union"].preemption_mode == "PodGroup"
    assert state.pod_groups["ml/legacy"].min_count == 5


def test_pdb_and_elastic_quota(tmp_path: Path) -> None:
    text = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db, namespace: ml}
spec:
  selector:
    matchLabels: {app: db}
    matchExpressions: [{key: tier, operator: NotIn, values: [cache]}]
status: {disruptionsAllowed: 1, disruptedPods: {db-0: "2026-01-01T00:00:00Z"}}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: team-a, namespace: ml}
spec: {min: {nvidia.com/gpu: 8}, max: {nvidia.com/gpu: "16"}}
"""
    state = load([write(tmp_path, text)]).state
    pdb = state.pdbs["ml/db"]
    assert pdb.disruptions_allowed == 1
    assert pdb.disrupted_pods == frozenset({"db-0"})
    assert pdb.selector.matches({"app": "db"})
    assert not pdb.selector.matches({"app": "db", "tier": "cache"})
    eq = state.elastic_quotas["ml/team-a"]
    assert (eq.min["nvidia.com/gpu"], eq.max["nvidia.com/gpu"]) == (8, 16)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: lots}}\n",
            "status.allocatable.cpu",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priority: high}\n",
            "spec.priority",
        ),
        (
            "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\n"
            "spec: {minMember: 0}\n",
            "spec.minMember",
        ),
        (
            "apiVersion: scheduling.k8s.io/v1alpha2\nkind: PodGroup\nmetadata: {name: g}\n"
            "spec: {disruptionMode: Sometimes}\n",
            "spec.disruptionMode",
        ),
        (
            "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: ElasticQuota\nmetadata: {name: q}\n"
            "spec: {min: {cpu: 4}, max: {cpu: 2}}\n",
            "spec.min",
        ),
        (
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: b}\n"
            "spec: {selector: {matchExpressions: [{key: a, operator: Near}]}}\n",
            "operator",
        ),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priority: '--5'}\n", "priority"),
        (
            "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\n"
            "spec: {minMember: '\u00b2'}\n",
            "spec.minMember",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, "
            "resources: {requests: {cpu: 1e999999999}}}]}\n",
            "out of range",
        ),
    ],
)
def test_bad_node_objects_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ManifestError) as err:
        load([write(tmp_path, text)])
    assert field in str(err.value)


def test_preemption_priority_below_scheduling_priority_is_refused(tmp_path: Path) -> None:
    text = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: g, namespace: ml}
spec:
  schedulingPolicy: {gang: {minCount: 1}}
  priorityClassName: high
  preemptionPriorityClassName: low
"""
    state = load([write(tmp_path, text)]).state
    with pytest.raises(InvalidInput) as err:
        NodeCluster(state)
    message = str(err.value)
    assert "PodGroup ml/g" in message
    assert "preemptionPriorityClassName" in message
    assert "below the scheduling priority" in message


def test_unknown_priority_class_leaves_the_pod_out_naming_file_and_line(
    tmp_path: Path,
) -> None:
    """The API server would not take such a pod: it is reported, with the file and the
    line of the pod, and left out; the rest is read (and decided)."""
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: ok, namespace: ml}\n"
    text += "spec: {containers: [{name: c}]}\n---\n"
    text += "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\n"
    text += "spec: {priorityClassName: nope, containers: [{name: c}]}\n"
    path = write(tmp_path, text)
    loaded = load([path])
    assert sorted(loaded.state.pods) == ["ml/ok"]
    assert loaded.rejected == [
        f"{path}: document 2 (line 6): Pod ml/p: spec.priorityClassName: "
        "PriorityClass 'nope' not found; Pod ml/p is left out"
    ]
    NodeCluster(loaded.state)  # what is left is decided


def test_unknown_priority_class_of_a_pod_group_leaves_it_out_with_its_pods(
    tmp_path: Path,
) -> None:
    text = GANG_SHAPES.replace("priorityClassName: high", "priorityClassName: nosuch")
    loaded = load([write(tmp_path, text)])
    assert "ml/old-workers-1" not in loaded.state.pod_groups
    assert "ml/old-0" not in loaded.state.pods
    assert any("PodGroup ml/old-workers-1" in r and "'nosuch'" in r for r in loaded.rejected)


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff}\n")
    with pytest.raises(ManifestError, match=r"bad.yaml: not UTF-8"):
        load([str(path)])


GROUP_PODS = """
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: ml}
spec:
  priority: 10
  schedulingGroup: {podGroupName: %(group)s}
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
  nodeName: n1
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: ml}
spec:
  priority: 20
  schedulingGroup: {podGroupName: %(group)s}
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
  nodeName: n1
status: {phase: Running}
"""


def test_a_pod_groups_spec_priority_is_every_members_priority(tmp_path: Path) -> None:
    """A scheduling.k8s.io PodGroup's ``spec.priority`` (admission's resolution of its
    class) is the group's priority, whatever its pods say; an int32."""
    group = """
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: g, namespace: ml}
spec:
  schedulingPolicy: {gang: {minCount: 2}}
  priority: %s
---
"""
    state = load([write(tmp_path, group % "1000" + GROUP_PODS % {"group": "g"})]).state
    cluster = NodeCluster(state)
    for key in ("ml/a", "ml/b"):
        pod = state.pods[key]
        assert cluster.scheduling_priority(pod) == 1000
        assert cluster.preemption_priority(pod) == 1000
    with pytest.raises(ManifestError) as err:
        load([write(tmp_path, group % "4294967296" + GROUP_PODS % {"group": "g"})])
    assert "priority" in str(err.value)
    assert "int32" in str(err.value)


def test_pods_naming_a_missing_scheduling_group_are_each_their_own_victim(
    tmp_path: Path,
) -> None:
    """kube-scheduler: pods whose ``spec.schedulingGroup`` names a PodGroup that does not
    exist are each a victim of their own at their own priority (no implicit gang, unlike
    the scheduler-plugins label)."""
    state = load([write(tmp_path, GROUP_PODS % {"group": "gone"})]).state
    assert "ml/gone" not in state.pod_groups
    cluster = NodeCluster(state)
    assert cluster.preemption_priority(state.pods["ml/a"]) == 10
    assert cluster.preemption_priority(state.pods["ml/b"]) == 20


def test_koordinator_quota_tree_labels_and_shared_weight(tmp_path: Path) -> None:
    text = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: child
  namespace: team
  labels:
    quota.scheduling.koordinator.sh/parent: parent
    quota.scheduling.koordinator.sh/allow-lent-resource: "false"
  annotations:
    quota.scheduling.koordinator.sh/shared-weight: '{"cpu": "40", "nvidia.com/gpu": "2"}'
spec:
  min: {cpu: "10"}
  max: {cpu: "20"}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: parent
  namespace: team
  labels: {quota.scheduling.koordinator.sh/is-parent: "true"}
spec:
  max: {cpu: "40"}
"""
    quotas = load([write(tmp_path, text)]).state.elastic_quotas
    child, parent = quotas["team/child"], quotas["team/parent"]
    assert (child.parent, child.is_parent, child.allow_lent) == ("parent", False, False)
    assert child.shared_weight == {"cpu": 40_000, "nvidia.com/gpu": 2}
    assert (parent.parent, parent.is_parent, parent.allow_lent) == ("", True, True)
    assert parent.shared_weight == {}
    bad = text.replace('{"cpu": "40", "nvidia.com/gpu": "2"}', "forty")
    with pytest.raises(ManifestError) as err:
        load([write(tmp_path, bad)])
    assert "shared-weight" in str(err.value)
    assert "JSON resource list" in str(err.value)
