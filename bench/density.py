"""The dense GPU cluster of ``bench/victims.py`` as the Kubernetes objects a user has
(``kubectl get -o yaml|json``): Nodes, running Pods with their priorities, start times
and scheduler-plugins gang labels, PodGroups, and the pending preemptors. Written as one
YAML or JSON ``List`` per file, or as a scenario folder for ``gangpreempt up``.

    python bench/density.py --nodes 5000 --out /tmp/cluster.yaml
    python bench/density.py --nodes 5000 --format json --out /tmp/cluster.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.victims import GPU, NOW, build_cluster
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod, PodGroup

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def _time(t: Any) -> str:
    return str(t.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _quantity(resource: str, amount: int) -> str:
    if resource == "cpu":
        return f"{amount}m"
    return str(amount)


def node_object(node: Node) -> dict[str, Any]:
    alloc = {r: _quantity(r, v) for r, v in sorted(node.allocatable.items())}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": dict(node.labels), "uid": f"uid-{node.name}"},
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def pod_object(pod: Pod) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": pod.name,
        "namespace": pod.namespace,
        "uid": pod.uid or f"uid-{pod.namespace}-{pod.name}",
    }
    if pod.group:
        meta["labels"] = {GROUP_LABEL: pod.group.split("/", 1)[1]}
    requests = {r: _quantity(r, v) for r, v in sorted(pod.requests.items())}
    limits = {GPU: requests[GPU]} if GPU in requests else {}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {"requests": requests, **({"limits": limits} if limits else {})},
            }
        ],
        "priority": pod.priority or 0,
        "schedulerName": "default-scheduler",
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if pod.node_name:
        spec["nodeName"] = pod.node_name
        status = {"phase": "Running"}
        if pod.start_time is not None:
            status["startTime"] = _time(pod.start_time)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def group_object(group: PodGroup) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": group.name, "namespace": group.namespace},
        "spec": {"minMember": group.min_count},
    }


def objects(state: ClusterState) -> list[dict[str, Any]]:
    """Nodes, PodGroups, then pods (in name order, as ``kubectl get`` lists them)."""
    return [
        *(node_object(n) for _, n in sorted(state.nodes.items())),
        *(group_object(g) for _, g in sorted(state.pod_groups.items())),
        *(pod_object(p) for _, p in sorted(state.pods.items())),
    ]


def as_list(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def dense_state(
    nodes: int, pods_per_node: int = 10, gangs8: int = 1, gangs64: int = 1, seed: int = 7
) -> tuple[ClusterState, dict[str, list[str]]]:
    """The cluster and its pending preemptors (refs by kind)."""
    counts = {"single": 0, "gang8": gangs8, "gang64": gangs64}
    state, refs, _shape = build_cluster(nodes, counts, seed, pods_per_node)
    return state, refs


def dense_scenario(
    work: Path, nodes: int, pods_per_node: int
) -> tuple[ClusterState, list[dict[str, Any]]]:
    """``dense_state`` written where ingest reads it (``work/scenario/cluster.json``, one
    JSON List, as ``kubectl get -o json`` writes it): the state and its objects."""
    scenario = work / "scenario"
    scenario.mkdir(parents=True, exist_ok=True)
    state, _refs = dense_state(nodes, pods_per_node, gangs8=0, gangs64=0)
    items = objects(state)
    with open(scenario / "cluster.json", "w", encoding="utf-8") as fh:
        json.dump(as_list(items), fh)
    return state, items


def write(items: list[dict[str, Any]], out: Path, fmt: str) -> None:
    with open(out, "w", encoding="utf-8") as fh:
        if fmt == "json":
            json.dump(as_list(items), fh)
        else:
            yaml.dump(as_list(items), fh, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods-per-node", type=int, default=10)
    ap.add_argument("--format", choices=("yaml", "json"), default="yaml")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    state, _refs = dense_state(args.nodes, args.pods_per_node)
    items = objects(state)
    write(items, args.out, args.format)
    print(f"{len(items)} objects ({len(state.pods)} pods) at {NOW:%Y-%m-%d} to {args.out}")


if __name__ == "__main__":
    main()
