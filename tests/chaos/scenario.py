"""The chaos scenario: many gangs that each need preemption, at quota and at node level,
arriving over the first seconds, each able to start once its victims are gone.

- ``queues`` Kueue ClusterQueues of 8 CPUs, each full with two low-priority workloads
  of 4 CPUs; two gangs (priorities 1000 and 900, 4 CPUs each) arrive per queue, each
  needing one victim of its queue.
- ``node_gangs`` PodGroups of 2 pods x 8 GPUs (priority 1000) on ``2 * node_gangs``
  GPU nodes, each node full with one low-priority scavenger pod: each gang needs two
  scavengers evicted, never half of another gang.

Once settled every gang runs: the Kueue gangs hold quota, the node gangs' pods are bound.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from tests.e2e.scenarios import NODE, NODES

HEAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
"""
QUEUE = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: q{q}}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: 8}}]}}]
  preemption: {{withinClusterQueue: LowerPriority}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: chaos, name: q{q}}}
spec: {{clusterQueue: q{q}}}
"""

RUNNING = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: chaos, name: {name}, uid: {name}-uid, creationTimestamp: "2026-01-01T00:0{minute}:00Z"}}
spec:
  queueName: q{q}
  priority: 100
  podSets: [{{name: main, count: 4, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}}}]
status:
  admission:
    clusterQueue: q{q}
    podSetAssignments: [{{name: main, count: 4, flavors: {{cpu: default}}, resourceUsage: {{cpu: "4"}}}}]
  conditions:
  - {{type: QuotaReserved, status: "True", reason: QuotaReserved, lastTransitionTime: "2026-01-01T00:0{minute}:01Z"}}
"""

GANG = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: chaos, name: {name}, uid: {name}-uid, creationTimestamp: "2026-01-01T01:00:00Z"}}
spec:
  queueName: q{q}
  priority: {priority}
  podSets: [{{name: workers, count: 4, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}}}]
"""

POD = """---
apiVersion: v1
kind: Pod
metadata: {{namespace: chaos, name: {name}, uid: {name}-uid{labels}}}
spec:
  {node}priorityClassName: {pc}
  containers: [{{name: c, resources: {{requests: {{cpu: "8", nvidia.com/gpu: "8"}}}}}}]
"""

GROUP = """---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{namespace: chaos, name: {name}}}
spec: {{minMember: {size}}}
"""


class Gang(msgspec.Struct, frozen=True):
    ref: str  # Workload/chaos/g0-a or PodGroup/chaos/train-0
    pods: tuple[str, ...] = ()  # node gangs: their pods (namespace/name)


def write(
    folder: Path, *, queues: int = 10, node_gangs: int = 4, spread: float = 3.0
) -> list[Gang]:
    """Write the scenario folder; return the gangs that must all end up running. Gang
    ``i`` of ``n`` arrives at ``spread * i / n`` seconds."""
    text = HEAD + NODES
    for q in range(queues):
        text += QUEUE.format(q=q)
        text += RUNNING.format(name=f"low-{q}-a", q=q, minute=0)
        text += RUNNING.format(name=f"low-{q}-b", q=q, minute=1)
    for n in range(2 * node_gangs):
        text += NODE.format(name=f"gpu-{n}")
        text += POD.format(
            name=f"scavenger-{n}", labels="", node=f"nodeName: gpu-{n}\n  ", pc="low"
        )
    (folder / "cluster.yaml").write_text(text)
    gangs: list[Gang] = []
    files: list[str] = []
    for q in range(queues):
        for suffix, priority in (("a", 1000), ("b", 900)):
            name = f"g{q}-{suffix}"
            (folder / f"{name}.yaml").write_text(GANG.format(name=name, q=q, priority=priority))
            files.append(f"{name}.yaml")
            gangs.append(Gang(f"Workload/chaos/{name}"))
    for g in range(node_gangs):
        name = f"train-{g}"
        body = GROUP.format(name=name, size=2)
        pods = []
        for i in range(2):
            pod = f"{name}-{i}"
            label = ", labels: {scheduling.x-k8s.io/pod-group: " + name + "}"
            body += POD.format(name=pod, labels=label, node="", pc="high")
            pods.append(f"chaos/{pod}")
        (folder / f"{name}.yaml").write_text(body)
        files.append(f"{name}.yaml")
        gangs.append(Gang(f"PodGroup/chaos/{name}", tuple(pods)))
    timeline = "".join(
        f"- at: {spread * i / len(files):.2f}\n  apply: {f}\n" for i, f in enumerate(files)
    )
    (folder / "timeline.yaml").write_text(timeline)
    return gangs


__all__ = ["Gang", "write"]
