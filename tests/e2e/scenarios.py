"""Small scenario folders for the e2e tests."""

from __future__ import annotations

from pathlib import Path

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 8}]
  preemption: {withinClusterQueue: LowerPriority}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ml, name: jobs}
spec: {clusterQueue: research}
"""

ADMITTED = """
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ml, name: {name}, uid: {name}-uid, creationTimestamp: "2026-01-01T00:{minute:02d}:00Z"}}
spec:
  queueName: jobs
  priority: {priority}
  podSets: [{{name: main, count: {cpus}, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}}}]
status:
  admission:
    clusterQueue: research
    podSetAssignments: [{{name: main, count: {cpus}, flavors: {{cpu: default}}, resourceUsage: {{cpu: "{cpus}"}}}}]
  conditions:
  - {{type: QuotaReserved, status: "True", reason: QuotaReserved, lastTransitionTime: "2026-01-01T00:{minute:02d}:01Z"}}
"""

PENDING = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ml, name: {name}, uid: {name}-uid, creationTimestamp: "2026-01-01T01:{minute:02d}:00Z"}}
spec:
  queueName: jobs
  priority: {priority}
  podSets: [{{name: workers, count: {cpus}, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}}}]
"""


def gang_arrives(folder: Path, cluster: str, *, at: float = 0.5, minute: int = 0) -> None:
    """``cluster`` the starting state; ``gang`` (priority 1000, 4 CPUs, created at
    ``minute`` past one) arrives ``at`` seconds after ingest starts."""
    (folder / "cluster.yaml").write_text(cluster)
    (folder / "gang.yaml").write_text(
        PENDING.format(name="gang", minute=minute, priority=1000, cpus=4)
    )
    (folder / "timeline.yaml").write_text(f"- at: {at}\n  apply: gang.yaml\n")


def full_cluster(folder: Path, *, gang_at: float | None = 0.5, extra_timeline: str = "") -> None:
    """8 CPUs, full with low-1 (4 CPUs, admitted first) and low-2 (4 CPUs, admitted
    last); ``gang`` (priority 1000, 4 CPUs) arrives ``gang_at`` seconds after ingest starts."""
    text = CLUSTER
    text += ADMITTED.format(name="low-1", minute=0, priority=100, cpus=4)
    text += ADMITTED.format(name="low-2", minute=10, priority=100, cpus=4)
    (folder / "cluster.yaml").write_text(text)
    timeline = ""
    if gang_at is not None:
        (folder / "gang.yaml").write_text(
            PENDING.format(name="gang", minute=0, priority=1000, cpus=4)
        )
        timeline = f"- at: {gang_at}\n  apply: gang.yaml\n"
    (folder / "timeline.yaml").write_text(timeline + extra_timeline)


NODES = """
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

NODE = """
---
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status: {{allocatable: {{cpu: "96", nvidia.com/gpu: "8", pods: "110"}}}}
"""

POD = """
---
apiVersion: v1
kind: Pod
metadata: {{namespace: ml, name: {name}, uid: {name}-uid, labels: {{scheduling.x-k8s.io/pod-group: {group}}}}}
spec:
  {node}priorityClassName: {pc}
  containers: [{{name: c, resources: {{requests: {{cpu: "8", nvidia.com/gpu: "8"}}}}}}]
"""

GROUP = """
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{namespace: ml, name: {name}}}
spec: {{minMember: {size}}}
"""


def gpu_cluster(
    folder: Path, *, nodes: int = 2, gang: int = 2, gang_at: float = 0.5, extra_timeline: str = ""
) -> None:
    """``nodes`` nodes of 8 GPUs, each running one pod of the low-priority gang
    ``scavenger`` (one PodGroup); the high-priority gang ``train`` (``gang`` pods of 8
    GPUs) arrives ``gang_at`` seconds after ingest starts."""
    text = NODES + GROUP.format(name="scavenger", size=nodes)
    for i in range(nodes):
        text += NODE.format(name=f"gpu-{i}")
        text += POD.format(
            name=f"scavenger-{i}", group="scavenger", node=f"nodeName: gpu-{i}\n  ", pc="low"
        )
    (folder / "cluster.yaml").write_text(text)
    train = GROUP.format(name="train", size=gang)
    for i in range(gang):
        train += POD.format(name=f"train-{i}", group="train", node="", pc="high")
    (folder / "train.yaml").write_text(train)
    (folder / "timeline.yaml").write_text(
        f"- at: {gang_at}\n  apply: train.yaml\n" + extra_timeline
    )


KUEUE_GPU = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpus}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 100}, {name: nvidia.com/gpu, nominalQuota: 16}]
  preemption: {withinClusterQueue: LowerPriority}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: q}
spec: {clusterQueue: gpus}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {namespace: default, name: low, uid: low-uid, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  queueName: q
  priority: 10
  podSets:
  - {name: main, count: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1", nvidia.com/gpu: "8"}}}]}}}
status:
  admission:
    clusterQueue: gpus
    podSetAssignments:
    - {name: main, count: 1, flavors: {cpu: default, nvidia.com/gpu: default}, resourceUsage: {cpu: "1", nvidia.com/gpu: "8"}}
  conditions:
  - {type: QuotaReserved, status: "True", reason: QuotaReserved, lastTransitionTime: "2025-01-01T00:00:01Z"}
"""

KUEUE_TRAIN = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {namespace: default, name: train, uid: train-uid, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  queueName: q
  priority: 1000
  podSets:
  - {name: main, count: 2, template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1", nvidia.com/gpu: "8"}}}]}}}
"""

KUEUE_POD = """
---
apiVersion: v1
kind: Pod
metadata: {{namespace: default, name: {name}, annotations: {annotations}}}
spec:
  {node}priority: {priority}
  containers: [{{name: c, resources: {{requests: {{cpu: "1", nvidia.com/gpu: "8"}}}}}}]
"""


def kueue_gpu_cluster(folder: Path) -> None:
    """A Kueue ClusterQueue of 16 GPUs on two 8-GPU nodes: Kueue workload ``low`` (its pod
    annotated ``kueue.x-k8s.io/workload``) runs on node-0, a pod outside Kueue
    (``scratch``, priority 0) on node-1; ``train`` (priority 1000, two pods of 8 GPUs,
    known) arrives at 0.5 s and needs both: ``low`` for the quota, ``scratch`` for room."""
    text = KUEUE_GPU
    for i in range(2):
        text += NODE.format(name=f"node-{i}")
    wl = "{kueue.x-k8s.io/workload: %s}"
    text += KUEUE_POD.format(
        name="low-0", annotations=wl % "low", node="nodeName: node-0\n  ", priority=10
    )
    text += KUEUE_POD.format(
        name="scratch", annotations="{}", node="nodeName: node-1\n  ", priority=0
    )
    (folder / "cluster.yaml").write_text(text)
    train = KUEUE_TRAIN
    for i in range(2):
        train += KUEUE_POD.format(
            name=f"train-{i}", annotations=wl % "train", node="", priority=1000
        )
    (folder / "train.yaml").write_text(train)
    (folder / "timeline.yaml").write_text("- at: 0.5\n  apply: train.yaml\n")


__all__ = ["full_cluster", "gpu_cluster", "kueue_gpu_cluster"]
