"""Node-level victim search benchmark: one decision of the pure core (``NodePlanner``) for
a pending pod or gang on a GPU cluster that is nearly full, at real pod density.

Clusters of 1,000 and 5,000 nodes (8 GPUs, 128 CPUs each). Running workloads are lone
pods and gangs (one PodGroup each, preempted whole) of 2 to 64 pods at 8 priority levels
(0, 100, ..., 700), packed until 95% of the GPUs are in use; every GPU pod asks 12 CPUs
per GPU, every node with free GPUs also runs a CPU-only filler pod at priority 0 that
takes the CPUs those GPUs would need, and CPU-only pods at the 8 priorities share each
node's last 32 CPUs, bringing every node to ``--pods-per-node`` running pods (default
10: 50,000 pods on 5,000 nodes), so nothing fits without preemption. Preemptors, at
priority 1000, all decided on the same state (nothing is committed):

- ``single``: one pod with 1 GPU (kube-scheduler's DefaultPreemption);
- ``gang8``: a gang of 8 pods x 8 GPUs (KEP-5710's gang search);
- ``gang64``: a gang of 64 pods x 8 GPUs.

Measures per cluster size: building the node index (``NodeIndex``, once, as a service
does at start); per preemptor kind, one decision as a service makes it (a planner on the
kept-current index, ``resolve`` + ``decide``) as decisions/s, median and p99, the
outcomes and mean victims, and a few decisions on the old path (a full index build per
decision) for comparison; churn: a pod change taken in by the index, and a decision
right after one; peak memory (traced separately: tracing slows Python, so no timing runs
under it); and a profile of one decision per kind at the largest size.

Quality: on small random instances (6-8 nodes, 10-14 running units, a lone preemptor
or a gang of 2-3 pods x 8 GPUs) the victims are compared with the exhaustive optimum:
the cheapest set of candidate units (priority below the preemptor's) whose removal lets
every preemptor pod be placed, a victim pod costing (priority + 1) x its GPUs.

Prints a table and writes ``bench/results/victims.json``. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import CodeType
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.stats import environment, stats_ms, write_result
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod, PodGroup
from gangpreempt.planning.decisions import PREEMPT, Decision
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.planning.nodeplan import NodePlanner

GPU = "nvidia.com/gpu"
NODE_GPUS = 8
CPU_PER_GPU = 12_000  # millicores (the model's cpu unit): 12 CPUs per GPU
GPU_CPU = NODE_GPUS * CPU_PER_GPU  # 96 CPUs for the GPU pods
SIDE_CPU = 32_000  # 32 more CPUs, for the CPU-only pods beside them
NODE_CPU = GPU_CPU + SIDE_CPU  # 128 CPUs
GIB = 2**30
MEM_PER_GPU = 128 * GIB  # bytes (the model's memory unit)
NODE_MEMORY = 1536 * GIB
NODE_PODS = 110
FILLER_MEMORY = 4 * GIB

PRIORITIES = tuple(range(0, 800, 100))  # 8 levels
FILLER_PRIORITY = 0
PREEMPTOR_PRIORITY = 1000
GANG_SIZES = (1, 2, 4, 8, 16, 32, 64)  # 1 = a lone pod (no PodGroup)
GANG_WEIGHTS = (40, 15, 12, 12, 9, 7, 5)
GPU_USED = 0.95
WHOLE_FREE_PER_MILLE = 5  # nodes left with all 8 GPUs free (CPUs taken by a filler)
MAX_FREE_ON_A_NODE = 4  # the rest of the free GPUs: 1-4 on a node

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=1)
KINDS = ("single", "gang8", "gang64")
CHURN_CHANGES = 500
MEMORY_DECISIONS = 5  # decisions per kind run under tracemalloc


# -- the large clusters ------------------------------------------------------------------


def requests(gpus: int) -> dict[str, int]:
    return {GPU: gpus, "cpu": gpus * CPU_PER_GPU, "memory": gpus * MEM_PER_GPU}


def cost(pod: Pod) -> int:
    """What evicting a pod costs in the quality measure: (priority + 1) x its GPUs."""
    return ((pod.priority or 0) + 1) * pod.requests.get(GPU, 0)


def node(name: str) -> Node:
    return Node(
        name=name,
        allocatable={GPU: NODE_GPUS, "cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS},
        labels={"kubernetes.io/hostname": name},
    )


class Packer:
    """What workloads may use of each node and what of that is still free. About 5% of
    the GPUs are left free: a few nodes entirely, the rest as 1-4 GPUs on many nodes.
    8-GPU pods take untouched whole nodes; smaller pods a random node that has room and
    is already in use or partly reserved, else a whole node."""

    def __init__(self, n_nodes: int, rnd: random.Random) -> None:
        self.rnd = rnd
        cap = [NODE_GPUS] * n_nodes
        order = list(range(n_nodes))
        rnd.shuffle(order)
        left = round(n_nodes * NODE_GPUS * (1 - GPU_USED))
        k = 0
        for _ in range(max(1, n_nodes * WHOLE_FREE_PER_MILLE // 1000)):
            if left >= NODE_GPUS:
                cap[order[k]] = 0
                left -= NODE_GPUS
                k += 1
        while left > 0 and k < n_nodes:
            f = min(left, rnd.randint(1, MAX_FREE_ON_A_NODE))
            cap[order[k]] -= f
            left -= f
            k += 1
        self.cap = cap
        self.free = list(cap)
        self.empty = [i for i in order if cap[i] == NODE_GPUS]

    def _partial(self, gpus: int) -> int | None:
        n = len(self.free)
        for _ in range(20):
            i = self.rnd.randrange(n)
            if gpus <= self.free[i] < NODE_GPUS:
                return i
        fitting = [i for i, f in enumerate(self.free) if gpus <= f < NODE_GPUS]
        return self.rnd.choice(fitting) if fitting else None

    def take(self, gpus: int) -> int | None:
        i = self._partial(gpus) if gpus < NODE_GPUS else None
        if i is None:
            if not self.empty:
                return None
            i = self.empty.pop()
        self.free[i] -= gpus
        return i

    def give_back(self, i: int, gpus: int) -> None:
        self.free[i] += gpus
        if self.free[i] == NODE_GPUS:
            self.empty.append(i)


def build_cluster(
    n_nodes: int, counts: dict[str, int], seed: int, pods_per_node: int = 10
) -> tuple[ClusterState, dict[str, list[str]], dict[str, object]]:
    """The cluster, the preemptor refs per kind, and what the cluster looks like. Each
    node is brought to ``pods_per_node`` running pods (at least one more than its GPU
    pods and filler) by CPU-only pods at the 8 priorities that share its last 32 CPUs."""
    rnd = random.Random(seed)
    st = ClusterState()
    names = [f"node-{i:05d}" for i in range(n_nodes)]
    for name in names:
        st.nodes[name] = node(name)
    packer = Packer(n_nodes, rnd)
    sizes: dict[int, int] = {}

    def add_unit(gpus: int, placed: list[int]) -> None:
        unit = sum(sizes.values())
        size = len(placed)
        sizes[size] = sizes.get(size, 0) + 1
        ns = f"team-{rnd.randrange(10)}"
        prio = rnd.choice(PRIORITIES)
        start = T0 + timedelta(minutes=rnd.randrange(24 * 60))
        group = ""
        if size > 1:
            g = f"job-{unit}"
            group = f"{ns}/{g}"
            st.pod_groups[group] = PodGroup(namespace=ns, name=g, min_count=size)
        for k, i in enumerate(placed):
            name = f"job-{unit}-{k}"
            st.pods[f"{ns}/{name}"] = Pod(
                namespace=ns,
                name=name,
                requests=requests(gpus),
                node_name=names[i],
                priority=prio,
                start_time=start,
                group=group,
            )

    failures = 0
    while failures < 200:
        size = rnd.choices(GANG_SIZES, GANG_WEIGHTS)[0]
        if size == 1:
            gpus = rnd.choice((1, 2, 4, 8))
        else:
            gpus = NODE_GPUS if size >= 8 else rnd.choice((4, 8))
        placed: list[int] = []
        for _ in range(size):
            i = packer.take(gpus)
            if i is None:
                break
            placed.append(i)
        if len(placed) < size:
            for i in placed:
                packer.give_back(i, gpus)
            failures += 1
            continue
        failures = 0
        add_unit(gpus, placed)
    # What random units left unused of the capacity: lone pods, largest first.
    for i, free in enumerate(packer.free):
        while free > 0:
            gpus = max(g for g in (1, 2, 4, 8) if g <= free)
            free -= gpus
            add_unit(gpus, [i])
        packer.free[i] = 0
    packer.free = [NODE_GPUS - c for c in packer.cap]
    total = n_nodes * NODE_GPUS
    used = sum(packer.cap)
    fillers = 0
    for i, free in enumerate(packer.free):
        if free == 0:
            continue
        fillers += 1
        name = f"filler-{i}"
        st.pods[f"batch/{name}"] = Pod(
            namespace="batch",
            name=name,
            requests={"cpu": free * CPU_PER_GPU, "memory": FILLER_MEMORY},
            node_name=names[i],
            priority=FILLER_PRIORITY,
            start_time=T0 + timedelta(minutes=rnd.randrange(24 * 60)),
        )
    on_node = [0] * n_nodes
    for p in st.pods.values():
        on_node[int(p.node_name.removeprefix("node-"))] += 1
    sides = 0
    for i in range(n_nodes):
        n_side = max(1, pods_per_node - on_node[i])
        for k in range(n_side):
            name = f"side-{i}-{k}"
            st.pods[f"svc-{i % 10}/{name}"] = Pod(
                namespace=f"svc-{i % 10}",
                name=name,
                requests={"cpu": SIDE_CPU // n_side, "memory": FILLER_MEMORY},
                node_name=names[i],
                priority=rnd.choice(PRIORITIES),
                start_time=T0 + timedelta(minutes=rnd.randrange(24 * 60)),
            )
            sides += 1
    refs: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for k in range(counts["single"]):
        name = f"single-{k}"
        st.pods[f"pre/{name}"] = Pod(
            namespace="pre", name=name, requests=requests(1), priority=PREEMPTOR_PRIORITY
        )
        refs["single"].append(f"Pod/pre/{name}")
    for kind, size in (("gang8", 8), ("gang64", 64)):
        for k in range(counts[kind]):
            g = f"{kind}-{k}"
            st.pod_groups[f"pre/{g}"] = PodGroup(namespace="pre", name=g, min_count=size)
            for j in range(size):
                name = f"{g}-{j}"
                st.pods[f"pre/{name}"] = Pod(
                    namespace="pre",
                    name=name,
                    requests=requests(NODE_GPUS),
                    priority=PREEMPTOR_PRIORITY,
                    group=f"pre/{g}",
                )
            refs[kind].append(f"PodGroup/pre/{g}")
    shape: dict[str, object] = {
        "nodes": n_nodes,
        "gpus": total,
        "gpu_used_fraction": used / total,
        "running_pods": sum(1 for p in st.pods.values() if p.node_name) - fillers - sides,
        "side_pods": sides,
        "pods_per_node": sum(1 for p in st.pods.values() if p.node_name) / n_nodes,
        "running_gangs": sum(n for s, n in sizes.items() if s > 1),
        "running_lone_pods": sizes.get(1, 0),
        "running_units_by_size": {str(s): sizes[s] for s in sorted(sizes)},
        "filler_pods": fillers,
        "nodes_with_free_gpus": fillers,
        "fully_free_nodes": sum(1 for f in packer.free if f == NODE_GPUS),
    }
    return st, refs, shape


def decide(planner: NodePlanner, ref: str) -> Decision:
    return planner.decide(planner.resolve(ref))


def where(code: CodeType | str) -> str:
    if isinstance(code, str):
        return code
    return f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"


def profile(planner: NodePlanner, ref: str, top: int) -> dict[str, list[dict[str, object]]]:
    """The ``top`` functions of one ``decide`` by cumulative and by own time."""
    pre = planner.resolve(ref)
    prof = cProfile.Profile()
    prof.runcall(planner.decide, pre)
    entries = [e for e in prof.getstats() if "_lsprof.Profiler" not in where(e.code)]

    def rows(key: str) -> list[dict[str, object]]:
        ranked = sorted(entries, key=lambda e: -float(getattr(e, key)))[:top]
        return [
            {
                "function": where(e.code),
                "calls": e.callcount,
                "cumulative_ms": e.totaltime * 1e3,
                "own_ms": e.inlinetime * 1e3,
            }
            for e in ranked
        ]

    return {"by_cumulative": rows("totaltime"), "by_own": rows("inlinetime")}


def decide_on(index: NodeIndex, ref: str) -> Decision:
    """What a service does per request: a planner on its kept-current index."""
    planner = index.planner(NOW)
    return planner.decide(planner.resolve(ref))


class Churn:
    """Pod changes as the cluster makes them: a running pod starts terminating, or one
    terminating runs again (the same pods, so the cluster keeps its shape)."""

    def __init__(self, st: ClusterState, index: NodeIndex, seed: int) -> None:
        self.st, self.index = st, index
        self.rnd = random.Random(seed)
        self.running = sorted(k for k, p in st.pods.items() if p.running)

    def one(self) -> None:
        key = self.rnd.choice(self.running)
        old = self.st.pods[key]
        new = msgspec.structs.replace(old, terminating=not old.terminating)
        self.st.pods[key] = new
        self.index.changed("Pod", old, new)


def run_size(
    n_nodes: int,
    counts: dict[str, int],
    seed: int,
    profile_top: int,
    pods_per_node: int = 10,
    rebuilds: int = 3,
) -> dict[str, object]:
    t = time.perf_counter()
    st, refs, shape = build_cluster(n_nodes, counts, seed, pods_per_node)
    state_s = time.perf_counter() - t

    t = time.perf_counter()
    index = NodeIndex(st)
    index.build(NOW)
    index_s = time.perf_counter() - t

    kinds: dict[str, dict[str, object]] = {}
    for kind in KINDS:
        times: list[float] = []
        outcomes: dict[str, int] = {}
        units: list[int] = []
        pods: list[int] = []
        gpus: list[int] = []
        costs: list[int] = []
        # The first decision of a resource set builds its columns (kept current after):
        # reported apart, the rate is the steady one.
        t = time.perf_counter()
        if refs[kind]:
            decide_on(index, refs[kind][0])
        first_s = time.perf_counter() - t
        for ref in refs[kind]:
            t = time.perf_counter()
            d = decide_on(index, ref)
            times.append(time.perf_counter() - t)
            outcomes[d.outcome] = outcomes.get(d.outcome, 0) + 1
            units.append(len(d.victims))
            victims = [st.pods[r.removeprefix("Pod/")] for v in d.victims for r in v.pods]
            pods.append(len(victims))
            gpus.append(sum(p.requests.get(GPU, 0) for p in victims))
            costs.append(sum(cost(p) for p in victims))
        # The path services took before the index was kept current: a full build per
        # decision (a few, for comparison).
        rebuilt: list[float] = []
        for ref in refs[kind][:rebuilds]:
            t = time.perf_counter()
            decide(NodePlanner(st, NOW), ref)
            rebuilt.append(time.perf_counter() - t)
        kinds[kind] = {
            "n": len(times),
            "decisions_per_s": len(times) / sum(times) if times else float("nan"),
            "decision": stats_ms(times),
            "first_decision_ms": first_s * 1e3,
            "full_rebuild_decision": stats_ms(rebuilt),
            "outcomes": outcomes,
            "mean_victim_units": statistics.fmean(units) if units else float("nan"),
            "mean_victim_pods": statistics.fmean(pods) if pods else float("nan"),
            "mean_victim_gpus": statistics.fmean(gpus) if gpus else float("nan"),
            "mean_victim_cost": statistics.fmean(costs) if costs else float("nan"),
        }

    # Churn: a pod change taken in, and a decision right after one (the caches over the
    # columns start again).
    churn = Churn(st, index, seed)
    changes: list[float] = []
    for _ in range(CHURN_CHANGES):
        t = time.perf_counter()
        churn.one()
        changes.append(time.perf_counter() - t)
    after: dict[str, object] = {}
    for kind in KINDS:
        times = []
        for ref in refs[kind]:
            churn.one()
            t = time.perf_counter()
            decide_on(index, ref)
            times.append(time.perf_counter() - t)
        after[kind] = stats_ms(times)
    churn_result = {"change": stats_ms(changes), "decision_after_a_change": after}
    planner = index.planner(NOW)

    profiles: dict[str, dict[str, list[dict[str, object]]]] = {}
    if profile_top > 0:
        for kind in KINDS:
            if refs[kind]:
                profiles[kind] = profile(planner, refs[kind][0], profile_top)

    # Memory in its own phase: the index, then per kind the peak while deciding (a few
    # decisions: nothing is kept between them). The state itself is not traced.
    del planner
    tracemalloc.start()
    traced = NodePlanner(st, NOW)
    index_current, index_peak = tracemalloc.get_traced_memory()
    for kind in KINDS:
        tracemalloc.reset_peak()
        for ref in refs[kind][:MEMORY_DECISIONS]:
            decide(traced, ref)
        _current, peak = tracemalloc.get_traced_memory()
        kinds[kind]["peak_traced_mib"] = peak / 2**20
        kinds[kind]["decision_extra_traced_mib"] = (peak - index_current) / 2**20
    tracemalloc.stop()
    del traced

    return {
        "shape": shape,
        "state_build_s": state_s,
        "index_build_s": index_s,
        "index_builds": index.builds,
        "churn": churn_result,
        "index_traced_mib": index_current / 2**20,
        "index_peak_traced_mib": index_peak / 2**20,
        "kinds": kinds,
        "profile_one_decision": profiles,
    }


# -- quality against the exhaustive optimum ---------------------------------------------

Vec = tuple[int, int, int, int]  # GPUs, cpu (milli), memory (bytes), pod slots


def vec(pod: Pod) -> Vec:
    r = pod.requests
    return (r.get(GPU, 0), r.get("cpu", 0), r.get("memory", 0), 1)


def assignable(demands: Sequence[Vec], free: list[list[int]]) -> bool:
    """Whether every demand can be given a node (exact: backtracking over assignments;
    equal demands take nodes in non-decreasing order)."""

    def go(k: int, start: int) -> bool:
        if k == len(demands):
            return True
        d = demands[k]
        for i in range(start, len(free)):
            row = free[i]
            if all(row[r] >= d[r] for r in range(4)):
                for r in range(4):
                    row[r] -= d[r]
                nxt = i if k + 1 < len(demands) and demands[k + 1] == d else 0
                ok = go(k + 1, nxt)
                for r in range(4):
                    row[r] += d[r]
                if ok:
                    return True
        return False

    return go(0, 0)


class Instance:
    """A small cluster, its preemptor, and the candidate units with their pods."""

    def __init__(
        self,
        state: ClusterState,
        ref: str,
        kind: str,
        priority: int,
        demands: list[Vec],
        units: dict[str, list[Pod]],
    ) -> None:
        self.state = state
        self.ref = ref
        self.kind = kind
        self.priority = priority
        self.demands = sorted(demands, reverse=True)
        self.units = units  # unit key -> pods, every running unit
        self.node_index = {name: i for i, name in enumerate(sorted(state.nodes))}
        self.base: list[list[int]] = []
        for name in sorted(state.nodes):
            a = state.nodes[name].allocatable
            self.base.append([a[GPU], a["cpu"], a["memory"], a["pods"]])
        for pod in state.pods.values():
            if pod.node_name:
                row = self.base[self.node_index[pod.node_name]]
                for r, v in enumerate(vec(pod)):
                    row[r] -= v

    def feasible_without(self, pods: Sequence[Pod]) -> bool:
        free = [list(row) for row in self.base]
        for pod in pods:
            row = free[self.node_index[pod.node_name]]
            for r, v in enumerate(vec(pod)):
                row[r] += v
        return assignable(self.demands, free)

    def optimum(self, ceiling: int | None = None) -> int | None:
        """The least cost of a set of candidate units (at most ``ceiling`` when given)
        whose removal lets every preemptor pod be placed; None when there is none."""
        top = self.priority - 1 if ceiling is None else min(ceiling, self.priority - 1)
        cands = [p for p in self.units.values() if (p[0].priority or 0) <= top]
        m = len(cands)
        unit_cost = [sum(cost(p) for p in pods) for pods in cands]
        unit_gpus = [sum(p.requests.get(GPU, 0) for p in pods) for pods in cands]
        costs = [0] * (1 << m)
        gpus = [0] * (1 << m)
        for mask in range(1, 1 << m):
            low = (mask & -mask).bit_length() - 1
            costs[mask] = costs[mask & (mask - 1)] + unit_cost[low]
            gpus[mask] = gpus[mask & (mask - 1)] + unit_gpus[low]
        need = sum(d[0] for d in self.demands) - sum(row[0] for row in self.base)
        for mask in sorted(range(1 << m), key=costs.__getitem__):
            if gpus[mask] < need:
                continue
            removed = [p for j in range(m) if mask >> j & 1 for p in cands[j]]
            if self.feasible_without(removed):
                return costs[mask]
        return None

    def lowest_ceiling(self) -> int | None:
        """The least highest victim priority of any solution (the first criterion the
        core ranks by): the lowest level such that every candidate at or below it gone
        lets the preemptor in."""
        levels = sorted({p[0].priority or 0 for p in self.units.values()})
        for level in (lv for lv in levels if lv < self.priority):
            gone = [
                pod
                for pods in self.units.values()
                if (pods[0].priority or 0) <= level
                for pod in pods
            ]
            if self.feasible_without(gone):
                return level
        return None


def quality_instance(rnd: random.Random, seq: int) -> Instance:
    st = ClusterState()
    n_nodes = rnd.randint(6, 8)
    names = [f"n{i}" for i in range(n_nodes)]
    for name in names:
        st.nodes[name] = node(name)
    free = dict.fromkeys(names, NODE_GPUS)
    want = rnd.randint(10, 14)
    units: dict[str, list[Pod]] = {}
    for u in range(60):
        if len(units) == want:
            break
        size = rnd.choices((1, 2, 3), (6, 3, 2))[0]
        gpus = rnd.choice((1, 2, 4, 8)) if size == 1 else rnd.choice((2, 4, 8))
        order = list(names)
        rnd.shuffle(order)
        placed: list[str] = []
        for _ in range(size):
            at = next((n for n in order if free[n] >= gpus), None)
            if at is None:
                break
            free[at] -= gpus
            placed.append(at)
        if len(placed) < size:
            for at in placed:
                free[at] += gpus
            continue
        prio = rnd.choice(PRIORITIES)
        start = T0 + timedelta(minutes=rnd.randrange(24 * 60))
        group = f"default/g{u}" if size > 1 else ""
        if group:
            st.pod_groups[group] = PodGroup(namespace="default", name=f"g{u}", min_count=size)
        pods = []
        for k, at in enumerate(placed):
            pod = Pod(
                namespace="default",
                name=f"u{u}-{k}",
                requests=requests(gpus),
                node_name=at,
                priority=prio,
                start_time=start,
                group=group,
            )
            st.pods[pod.key] = pod
            pods.append(pod)
        units[group or pods[0].key] = pods
    priority = rnd.choice((400, 700, PREEMPTOR_PRIORITY))
    if rnd.random() < 0.5:
        kind = "single"
        pod = Pod(
            namespace="pre",
            name=f"p{seq}",
            requests=requests(rnd.choice((1, 2, 4, 8))),
            priority=priority,
        )
        st.pods[pod.key] = pod
        return Instance(st, pod.ref, kind, priority, [vec(pod)], units)
    kind = "gang"
    size = rnd.randint(2, 3)
    st.pod_groups[f"pre/g{seq}"] = PodGroup(namespace="pre", name=f"g{seq}", min_count=size)
    demands = []
    for j in range(size):
        pod = Pod(
            namespace="pre",
            name=f"g{seq}-{j}",
            requests=requests(NODE_GPUS),
            priority=priority,
            group=f"pre/g{seq}",
        )
        st.pods[pod.key] = pod
        demands.append(vec(pod))
    return Instance(st, f"PodGroup/pre/g{seq}", kind, priority, demands, units)


def ratio_stats(ratios: list[float]) -> dict[str, object]:
    return {
        "instances": len(ratios),
        "optimal": sum(1 for r in ratios if r <= 1.0 + 1e-12),
        "ratio_p50": statistics.median(ratios) if ratios else float("nan"),
        "ratio_max": max(ratios) if ratios else float("nan"),
        "ratio_mean": statistics.fmean(ratios) if ratios else float("nan"),
    }


def run_quality(n: int, seed: int) -> dict[str, object]:
    """``n`` instances that need preemption and admit a solution; the ones where the
    preemptor fits as it is are regenerated, the ones with no solution are counted (and
    the decision checked to be no Preempt)."""
    rnd = random.Random(seed)
    ratios: dict[str, list[float]] = {"single": [], "gang": []}
    at_ceiling: list[float] = []  # against the best with the same highest victim priority
    fit_as_is = infeasible = infeasible_agree = missed = invalid = same_highest = 0
    worst: dict[str, object] = {}
    worst_ratio = -1.0
    seq = 0
    t = time.perf_counter()
    while sum(len(r) for r in ratios.values()) < n:
        seq += 1
        inst = quality_instance(rnd, seq)
        if inst.feasible_without(()):
            fit_as_is += 1
            continue
        opt = inst.optimum()
        d = decide(NodePlanner(inst.state, NOW), inst.ref)
        if opt is None:
            infeasible += 1
            infeasible_agree += d.outcome != PREEMPT
            continue
        if d.outcome != PREEMPT:
            missed += 1
            continue
        victims = [inst.state.pods[r.removeprefix("Pod/")] for v in d.victims for r in v.pods]
        if not inst.feasible_without(victims):
            invalid += 1
        ours = sum(cost(p) for p in victims)
        ratio = ours / opt if opt else (1.0 if ours == 0 else math.inf)
        ratios[inst.kind].append(ratio)
        ceiling = inst.lowest_ceiling()
        same_highest += max(p.priority or 0 for p in victims) == ceiling
        best_at_ceiling = inst.optimum(ceiling)
        if best_at_ceiling is not None:
            at_ceiling.append(ours / best_at_ceiling if best_at_ceiling else 1.0)
        if ratio > worst_ratio:
            worst_ratio = ratio
            worst = {
                "ratio": ratio,
                "kind": inst.kind,
                "ours": ours,
                "optimum": opt,
                "victims": sorted(r for v in d.victims for r in v.pods),
            }
    everything = ratios["single"] + ratios["gang"]
    return {
        **ratio_stats(everything),
        "by_kind": {kind: ratio_stats(r) for kind, r in ratios.items()},
        "cost": "sum over victim pods of (priority + 1) x GPUs",
        "same_highest_victim_priority_as_best": same_highest,
        "vs_best_at_lowest_ceiling": ratio_stats(at_ceiling),
        "regenerated_fit_as_is": fit_as_is,
        "infeasible": infeasible,
        "infeasible_decided_not_preempt": infeasible_agree,
        "missed": missed,
        "invalid": invalid,
        "worst": worst,
        "seconds": time.perf_counter() - t,
    }


# -- the command ---------------------------------------------------------------------------


def run(
    sizes: list[int],
    counts: dict[str, int],
    quality: int,
    seed: int,
    profile_top: int,
    pods_per_node: int = 10,
    rebuilds: int = 3,
) -> dict[str, object]:
    results = [
        run_size(n, counts, seed, profile_top if n == max(sizes) else 0, pods_per_node, rebuilds)
        for n in sizes
    ]
    return {
        "shape": {
            "gpus_per_node": NODE_GPUS,
            "cpus_per_node": NODE_CPU // 1000,
            "cpus_per_gpu": CPU_PER_GPU // 1000,
            "pods_per_node": pods_per_node,
            "gpu_used_target": GPU_USED,
            "priorities": list(PRIORITIES),
            "filler_priority": FILLER_PRIORITY,
            "preemptor_priority": PREEMPTOR_PRIORITY,
            "gang_sizes": list(GANG_SIZES),
            "preemptors": {
                "single": "1 pod x 1 GPU",
                "gang8": "8 pods x 8 GPUs",
                "gang64": "64 pods x 8 GPUs",
            },
            "counts": counts,
            "seed": seed,
        },
        "sizes": results,
        "quality": run_quality(quality, seed) if quality > 0 else {},
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **environment(),
    }


def report(result: dict[str, Any]) -> None:
    sizes = result["sizes"]
    print("victims benchmark: node-level victim search on one snapshot (resolve + decide)")
    for size in sizes:
        shape = size["shape"]
        print(
            f"\n{shape['nodes']} nodes: {shape['gpu_used_fraction']:.1%} of "
            f"{shape['gpus']} GPUs used by {shape['running_pods']} pods "
            f"({shape['running_gangs']} gangs, {shape['running_lone_pods']} lone pods), "
            f"{shape['filler_pods']} CPU fillers ({shape['fully_free_nodes']} on empty nodes)"
        )
        print(
            f"index build (once; then kept current): {size['index_build_s'] * 1e3:.0f} ms, "
            f"{size['index_traced_mib']:.1f} MiB traced "
            f"(cluster state built in {size['state_build_s']:.2f} s)"
        )
        print(
            f"{'kind':<8}{'n':>5}{'dec/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"
            f"{'units':>7}{'pods':>7}{'GPUs':>7}{'cost':>8}{'peak MiB':>10}  outcomes"
        )
        for kind, k in size["kinds"].items():
            s = k["decision"]
            print(
                f"{kind:<8}{k['n']:>5}{k['decisions_per_s']:>10.1f}{s['p50_ms']:>10.2f}"
                f"{s['p99_ms']:>10.2f}{s['max_ms']:>10.2f}{k['mean_victim_units']:>7.1f}"
                f"{k['mean_victim_pods']:>7.1f}{k['mean_victim_gpus']:>7.1f}"
                f"{k['mean_victim_cost']:>8.0f}{k['peak_traced_mib']:>10.1f}  {k['outcomes']}"
            )
        print(
            "first decision of each kind (builds the columns of its resource set, once): "
            + ", ".join(
                f"{kind} {k['first_decision_ms']:.0f} ms" for kind, k in size["kinds"].items()
            )
        )
        for kind, k in size["kinds"].items():
            r = k["full_rebuild_decision"]
            if r["n"]:
                print(
                    f"  {kind}: with a full index build per decision (the old path), "
                    f"p50 {r['p50_ms']:.0f} ms over {r['n']}: "
                    f"{r['p50_ms'] / k['decision']['p50_ms']:.0f}x the kept-current p50"
                )
        churn = size["churn"]
        c = churn["change"]
        print(
            f"churn: a pod change taken in p50 {c['p50_ms']:.3f} ms, p99 {c['p99_ms']:.3f} ms; "
            "a decision right after a change: "
            + ", ".join(
                f"{kind} p50 {a['p50_ms']:.2f} ms / p99 {a['p99_ms']:.2f} ms"
                for kind, a in churn["decision_after_a_change"].items()
            )
        )
        for kind, prof in size["profile_one_decision"].items():
            for order, label in (("by_cumulative", "cumulative"), ("by_own", "own")):
                print(f"profile of one {kind} decide(), top {len(prof[order])} by {label} time:")
                print(f"  {'cum ms':>9}{'own ms':>9}{'calls':>9}  function")
                for f in prof[order]:
                    print(
                        f"  {f['cumulative_ms']:>9.2f}{f['own_ms']:>9.2f}{f['calls']:>9}"
                        f"  {f['function']}"
                    )
    q = result["quality"]
    if q:
        print(
            f"\nquality vs exhaustive optimum ({q['cost']}), {q['instances']} instances: "
            f"optimal {q['optimal']}, ratio median {q['ratio_p50']:.3f}, "
            f"max {q['ratio_max']:.3f}, mean {q['ratio_mean']:.3f}"
        )
        for kind, k in q["by_kind"].items():
            print(
                f"  {kind:<7}{k['instances']:>5} instances: optimal {k['optimal']}, "
                f"median {k['ratio_p50']:.3f}, max {k['ratio_max']:.3f}"
            )
        print(
            f"  highest victim priority as low as any solution's: "
            f"{q['same_highest_victim_priority_as_best']} of {q['instances']}"
        )
        c = q["vs_best_at_lowest_ceiling"]
        print(
            f"  against the cheapest solution with that lowest highest priority: optimal "
            f"{c['optimal']} of {c['instances']}, median {c['ratio_p50']:.3f}, "
            f"max {c['ratio_max']:.3f}"
        )
        print(
            f"  regenerated (fit as is): {q['regenerated_fit_as_is']}; without any "
            f"solution: {q['infeasible']} ({q['infeasible_decided_not_preempt']} decided "
            f"without preemption); missed: {q['missed']}; invalid victims: {q['invalid']}"
        )
    print(f"max RSS: {result['max_rss_mib']:.0f} MiB")


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--nodes", type=ints, default=[1000, 5000], help="cluster sizes, e.g. 1000,5000"
    )
    ap.add_argument("--singles", type=int, default=200, help="single-pod decisions per size")
    ap.add_argument("--gangs8", type=int, default=20, help="gang-of-8 decisions per size")
    ap.add_argument("--gangs64", type=int, default=5, help="gang-of-64 decisions per size")
    ap.add_argument("--quality", type=int, default=200, help="instances against the optimum")
    ap.add_argument("--profile-top", type=int, default=5, help="functions to list (0: none)")
    ap.add_argument(
        "--pods-per-node", type=int, default=10, help="running pods per node (CPU pods fill up)"
    )
    ap.add_argument(
        "--rebuilds", type=int, default=3, help="decisions per kind on the old full-build path"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "victims.json"))
    args = ap.parse_args(argv)
    counts = {"single": args.singles, "gang8": args.gangs8, "gang64": args.gangs64}
    result = run(args.nodes, counts, args.quality, args.seed, args.profile_top, args.pods_per_node)
    report(result)
    write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
