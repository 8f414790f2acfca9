"""``simulate --queues FILE``: the operator's Kueue configuration read whole
(``simulation.queueconfig``): trace queues mapped to ClusterQueues by name or by a
LocalQueue, the flavors Kueue assigns, the file's preemption policies really replayed,
the reasons a file cannot serve; and the measures fair sharing's loops would show
(thrash per pair of ClusterQueues, each queue's use of its quota over time)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gangpreempt.errors import InvalidInput
from gangpreempt.simulation.outcomes import (
    ARRIVED,
    EVICTED,
    FINISHED,
    STARTED,
    QueuePairThrash,
    Record,
    outcomes,
    queue_gpus,
)
from gangpreempt.simulation.queueconfig import nominal_gpus, read_queue_config
from gangpreempt.simulation.replay import Replay, Settings
from gangpreempt.simulation.trace import Job
from tests.unit.test_simulate_cli import simulate

pytestmark = pytest.mark.unit
T0 = datetime(2025, 1, 1, tzinfo=UTC)
LONG = 10**6
KUEUE = "apiVersion: kueue.x-k8s.io/v1beta1"


def cluster_queue(
    name: str,
    gpus: int,
    *,
    flavor: str = "a100",
    reclaim: str = "Any",
    extra: str = "  namespaceSelector: {}\n",
    weight: str = "1",
) -> str:
    return (
        f"{KUEUE}\nkind: ClusterQueue\nmetadata: {{name: {name}}}\nspec:\n  cohort: all\n"
        f"{extra}  fairSharing: {{weight: '{weight}'}}\n"
        f"  preemption: {{reclaimWithinCohort: {reclaim}, withinClusterQueue: LowerPriority}}\n"
        "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n"
        f"    flavors:\n    - name: {flavor}\n"
        f"      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]\n"
    )


def write(tmp_path: Path, *docs: str, flavors: tuple[str, ...] = ("a100",)) -> str:
    path = tmp_path / "queues.yaml"
    kinds = [f"{KUEUE}\nkind: ResourceFlavor\nmetadata: {{name: {f}}}\n" for f in flavors]
    path.write_text("---\n".join([*kinds, *docs]))
    return str(path)


def replay(jobs: list[Job], quotas: dict[str, int], config_path: str | None) -> Replay:
    config = read_queue_config(config_path, [j.queue for j in jobs]) if config_path else None
    settings = Settings(
        2, 8, nominal_gpus(config) if config else quotas, T0, cycle_s=10, queue_config=config
    )
    sim = Replay("gangpreempt", jobs, settings)
    sim.run()
    return sim


def borrowed_then_reclaimed() -> list[Job]:
    """Queue a runs two 8-GPU jobs on two 8-GPU nodes, one of them on b's idle quota;
    b's own job arrives at 100 at the same priority: only reclaiming makes room."""
    return [
        Job("A1", 0, LONG, "a", 100, (8,)),
        Job("A2", 0, LONG, "a", 100, (8,)),
        Job("B1", 100, LONG, "b", 100, (8,)),
    ]


def test_the_files_policies_are_replayed_not_the_defaults(tmp_path: Path) -> None:
    jobs = borrowed_then_reclaimed()
    default = replay(jobs, {"a": 8, "b": 8}, None)
    evicted = [(r.job, r.preemptor) for r in default.log if r.kind == EVICTED]
    assert [preemptor for _, preemptor in evicted] == ["B1"]  # the default reclaims

    never = write(
        tmp_path, cluster_queue("a", 8, reclaim="Never"), cluster_queue("b", 8, reclaim="Never")
    )
    sim = replay(jobs, {}, never)
    assert [r for r in sim.log if r.kind == EVICTED] == []  # the file's Never holds
    b1 = next(r.at for r in sim.log if r.kind == STARTED and r.job == "B1")
    assert b1 >= LONG  # B1 waits for a's jobs to finish


def test_the_flavor_admitted_is_the_files_and_its_quota_binds(tmp_path: Path) -> None:
    """a alone in its cohort, 8 GPUs of flavor a100: its second 8-GPU job waits for the
    first, on two nodes with room for both (the admission's flavor holds the quota)."""
    path = write(tmp_path, cluster_queue("a", 8))
    jobs = [
        Job("A1", 0, 1000, "a", 100, (8,)),
        Job("A2", 0, 1000, "a", 100, (8,)),
        Job("A3", 500, 10, "a", 100, (1,)),  # a cycle at 500, A1 running
    ]
    sim = Replay(
        "gangpreempt",
        jobs,
        Settings(2, 8, {"a": 8}, T0, cycle_s=10, queue_config=read_queue_config(path, ["a"])),
        park=False,  # A2 evaluated every cycle, against the usage the admission says
    )
    sim.decisions_seen = []
    sim.run()
    starts = {r.job: r.at for r in sim.log if r.kind == STARTED}
    assert starts["A1"] < 1000 <= starts["A2"]
    admits = [d for _, ds in sim.decisions_seen for d in ds if d.outcome == "Admit"]
    assert {d.queue for d in admits} == {"ClusterQueue/a"}
    assert all(fl == {"nvidia.com/gpu": "a100"} for d in admits for fl in d.flavors.values())


def test_local_queues_map_trace_queues_to_a_cluster_queue(tmp_path: Path) -> None:
    local = (
        f"{KUEUE}\nkind: LocalQueue\nmetadata: {{namespace: team, name: {name}}}\n"
        "spec: {clusterQueue: shared}\n"
        for name in ("x", "y")
    )
    path = write(tmp_path, cluster_queue("shared", 16), *local)
    config = read_queue_config(path, ["x", "y"])
    assert config.queue_map == {"x": "shared", "y": "shared"}
    assert nominal_gpus(config) == {"shared": 16}
    sim = replay([Job("X", 0, LONG, "x", 100, (8,)), Job("Y", 0, LONG, "y", 100, (8,))], {}, path)
    queues = {r.job: r.queue for r in sim.log if r.kind == ARRIVED}
    assert queues == {"X": "shared", "Y": "shared"}
    assert [r.job for r in sim.log if r.kind == STARTED] == ["X", "Y"]  # 16 GPUs: both run


@pytest.mark.parametrize(
    ("docs", "queues", "says"),
    [
        ([cluster_queue("a", 8)], ["a", "c"], "no LocalQueue or ClusterQueue named 'c'"),
        (
            [cluster_queue("a", 8, extra="")],
            ["a"],
            "ClusterQueue a: spec.namespaceSelector selects no namespace named 'trace'",
        ),
        (
            [cluster_queue("a", 8, extra="  namespaceSelector: {matchLabels: {team: ml}}\n")],
            ["a"],
            "spec.namespaceSelector",
        ),
        (
            [
                cluster_queue("a", 8)
                .replace("coveredResources: [nvidia.com/gpu]", "coveredResources: [cpu]")
                .replace("name: nvidia.com/gpu", "name: cpu")
            ],
            ["a"],
            "ClusterQueue a: spec.resourceGroups: covers no nvidia.com/gpu",
        ),
        (
            [
                cluster_queue("a", 8),
                f"{KUEUE}\nkind: LocalQueue\nmetadata: {{namespace: n, name: a}}\n"
                "spec: {clusterQueue: gone}\n",
            ],
            ["a"],
            "LocalQueue 'a' points to ClusterQueue 'gone'",
        ),
    ],
)
def test_a_file_that_cannot_serve_the_trace_says_why(
    tmp_path: Path, docs: list[str], queues: list[str], says: str
) -> None:
    with pytest.raises(InvalidInput, match=says.replace("{", r"\{")):
        read_queue_config(write(tmp_path, *docs), queues)


def test_thrash_is_counted_per_pair_of_cluster_queues() -> None:
    log = [
        Record(0, ARRIVED, "a1", priority=1, queue="a"),
        Record(0, ARRIVED, "b1", priority=1, queue="b"),
        Record(0, ARRIVED, "c1", priority=1, queue="c"),
        Record(1, STARTED, "a1", gpus=8),
        Record(10, EVICTED, "a1", gpus=8, preemptor="b1", pods=1, of_pods=1),
        Record(20, STARTED, "a1", gpus=8),
        Record(30, EVICTED, "a1", gpus=8, preemptor="b1", pods=1, of_pods=1),  # a / b
        Record(40, STARTED, "a1", gpus=8),
        Record(50, EVICTED, "a1", gpus=8, preemptor="c1", pods=1, of_pods=1),  # a / c
        Record(60, STARTED, "a1", gpus=8),
        Record(70, EVICTED, "a1", gpus=8, preemptor="b1", pods=1, of_pods=1),  # a / b
        Record(80, FINISHED, "a1"),
    ]
    o = outcomes(log, 10, 1800)
    assert o.thrash == 3
    assert o.thrash_by_queues == [QueuePairThrash(("a", "b"), 2), QueuePairThrash(("a", "c"), 1)]


def test_each_queues_gpus_over_time() -> None:
    log = [
        Record(0, ARRIVED, "a1", queue="a"),
        Record(0, ARRIVED, "b1", queue="b"),
        Record(0, STARTED, "a1", gpus=8),
        Record(50, STARTED, "b1", gpus=4),
        Record(100, FINISHED, "a1"),
        Record(150, FINISHED, "b1"),
    ]
    assert queue_gpus(log, 100) == {"a": [8.0, 0.0], "b": [2.0, 2.0]}


def test_simulate_reads_the_file_and_reports_its_mapping(tmp_path: Path) -> None:
    config = (
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        "fairSharing: {enable: true}\n"
    )
    local = f"{KUEUE}\nkind: LocalQueue\nmetadata: {{namespace: n, name: vc-c}}\nspec: {{clusterQueue: vc-b}}\n"
    path = write(
        tmp_path,
        config,
        cluster_queue("vc-a", 16, weight="2"),
        cluster_queue("vc-b", 8),
        local,
    )
    out = simulate(
        "--window", "0:7200", "--nodes", "3", "--policy", "gangpreempt", "--queues", path,
        "--optimum-sample", "0", "-o", "json", "--plots", str(tmp_path / "plots"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    cluster = json.loads(out.stdout)["cluster"]
    assert cluster["queue_map"] == {"vc-a": "vc-a", "vc-b": "vc-b", "vc-c": "vc-b"}
    assert cluster["quotas"] == {"vc-a": 16, "vc-b": 8}
    assert cluster["fair_sharing"] is True
    assert (tmp_path / "plots" / "queue_share.png").read_bytes()[:4] == b"\x89PNG"


def test_two_flavors_of_one_queue_are_both_used_in_kueues_order(tmp_path: Path) -> None:
    """on-demand first, then spot (flavor fungibility's default): the second job is
    admitted in spot once on-demand's 8 GPUs are taken, and a third waits."""
    cq = cluster_queue("a", 8, flavor="on-demand").replace(
        "      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]\n",
        "      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]\n"
        "    - name: spot\n      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]\n",
    )
    path = write(tmp_path, cq, flavors=("on-demand", "spot"))
    jobs = [Job(f"A{i}", 10 * i, 1000, "a", 100, (8,)) for i in range(3)]
    sim = Replay(
        "gangpreempt",
        jobs,
        Settings(3, 8, {"a": 16}, T0, cycle_s=10, queue_config=read_queue_config(path, ["a"])),
    )
    sim.decisions_seen = []
    sim.run()
    admitted = {
        d.preemptor: next(iter(d.flavors.values()))["nvidia.com/gpu"]
        for _, ds in sim.decisions_seen
        for d in ds
        if d.outcome == "Admit"
    }
    assert admitted["Workload/trace/A0"] == "on-demand"
    assert admitted["Workload/trace/A1"] == "spot"
    starts = {r.job: r.at for r in sim.log if r.kind == STARTED}
    assert starts["A2"] >= 1000  # 16 GPUs of quota, three nodes: the third waits
