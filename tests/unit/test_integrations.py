"""What users submit to Kueue (a Job, a JobSet, a PyTorchJob, a plain Pod, a pod group)
read as Kueue's integrations read it: the Workload Kueue would create, decided by
``plan``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gangpreempt.cli import cli
from gangpreempt.manifests import load

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests/data/kueue-site"
NOW = "2026-01-01T00:00:00Z"


def plan(*args: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["plan", "--now", NOW, "-o", "json", *args])
    doc = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, doc, result.stderr


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 8}, {name: memory, nominalQuota: 64Gi}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 500
"""

RUNNING = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: old, namespace: ml, creationTimestamp: "2025-12-01T00:00:00Z"}
spec:
  queueName: q
  priority: 10
  podSets:
  - name: main
    count: 6
    template: {spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}
status:
  admission:
    clusterQueue: cq
    podSetAssignments:
    - name: main
      flavors: {cpu: default}
      resourceUsage: {cpu: 6}
      count: 6
"""


def job(
    name: str = "my-job",
    parallelism: int = 4,
    completions: int | None = None,
    labels: str = "kueue.x-k8s.io/queue-name: q",
    extra_spec: str = "",
    pod_spec: str = "",
) -> str:
    completions_line = f"  completions: {completions}\n" if completions is not None else ""
    return (
        "apiVersion: batch/v1\nkind: Job\n"
        f"metadata:\n  name: {name}\n  namespace: ml\n  labels: {{{labels}}}\n"
        f"spec:\n  parallelism: {parallelism}\n{completions_line}  suspend: true\n{extra_spec}"
        "  template:\n    spec:\n"
        f"{pod_spec}"
        "      containers:\n      - name: c\n        resources: {requests: {cpu: 1}}\n"
    )


# -- Kueue's site examples, as they are -------------------------------------------------


@pytest.mark.parametrize(
    ("example", "workload", "owner", "flavors"),
    [
        (
            "sample-job.yaml",
            "Workload/default/job-sample-job-",
            "Job/default/sample-job-",
            {"main": {"cpu": "default-flavor", "memory": "default-flavor"}},
        ),
        (
            "kueue-pod.yaml",
            "Workload/default/pod-kueue-sleep-",
            "Pod/default/kueue-sleep-",
            {"main": {"cpu": "default-flavor"}},
        ),
        (
            "kueue-pod-group.yaml",
            "Workload/default/sample-group",
            "",
            {"main": {"cpu": "default-flavor"}},
        ),
    ],
)
def test_kueue_site_examples_are_admitted_as_kueue_admits_them(
    example: str,
    workload: str,
    owner: str,
    flavors: dict,  # type: ignore[type-arg]
) -> None:
    """The single ClusterQueue setup (9 CPUs) and each sample: Kueue admits each, on
    the one flavor."""
    code, doc, err = plan(
        "-f", str(SITE / "single-clusterqueue-setup.yaml"), "-f", str(SITE / example)
    )
    assert code == 0, err
    [d] = doc["decisions"]
    assert d["preemptor"].startswith(workload)
    assert d.get("owner", "").startswith(owner) if owner else "owner" not in d
    assert (d["outcome"], d["queue"], d["flavors"]) == (
        "Admit",
        "ClusterQueue/cluster-queue",
        flavors,
    )
    assert "generateName" in err  # the generated name is said


def test_generated_names_are_stable_and_distinct() -> None:
    """Two identical pods with the same generateName get two names, the same on every
    run (the pod group's two pods make one Workload of 2 pods)."""
    first = load([str(SITE / "kueue-pod-group.yaml")])
    again = load([str(SITE / "kueue-pod-group.yaml")])
    names = sorted(first.state.pods)
    assert len(names) == 2
    assert all(n.startswith("default/sample-pod-") for n in names)
    assert names == sorted(again.state.pods)
    wl = first.state.workloads["default/sample-group"]
    assert [(ps.name, ps.count, ps.requests) for ps in wl.pod_sets] == [("main", 2, {"cpu": 3000})]
    assert all(p.kueue_workload == "default/sample-group" for p in first.state.pods.values())


def test_all_site_examples_in_one_pass_follow_kueue_order() -> None:
    """Together they ask 3 + 3 + 6 CPUs of 9: the first two in queue order are admitted,
    the group waits (the queue may not preempt), and the message says what to change."""
    code, doc, _ = plan("-f", str(SITE))
    assert code == 0
    outcomes = [d["outcome"] for d in doc["decisions"]]
    assert outcomes.count("Admit") == 2
    assert outcomes.count("Pending") == 1
    pending = next(d for d in doc["decisions"] if d["outcome"] == "Pending")
    assert pending["preemptor"] == "Workload/default/sample-group"
    assert "withinClusterQueue" in pending["message"]


# -- batch/v1 Job -------------------------------------------------------------------------


def test_job_pod_count_is_parallelism_at_most_completions(tmp_path: Path) -> None:
    for parallelism, completions, expected in ((4, None, 4), (4, 2, 2), (2, 5, 2)):
        path = write(tmp_path, "job.yaml", job(parallelism=parallelism, completions=completions))
        wl = load([path]).state.workloads["ml/job-my-job"]
        assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("main", expected)]
        assert wl.queue_name == "q"
        assert wl.owner == "Job/ml/my-job"


def test_job_requests_sum_init_containers_and_overhead_as_kueue_does(tmp_path: Path) -> None:
    pod_spec = (
        "      overhead: {cpu: 250m}\n"
        "      initContainers:\n"
        "      - {name: init, resources: {requests: {cpu: 3}}}\n"
        "      - {name: side, restartPolicy: Always, resources: {requests: {cpu: 500m}}}\n"
    )
    path = write(tmp_path, "job.yaml", job(parallelism=1, pod_spec=pod_spec))
    [ps] = load([path]).state.workloads["ml/job-my-job"].pod_sets
    # max(init 3, containers 1 + sidecar 0.5) + overhead 0.25
    assert ps.requests == {"cpu": 3250}


def test_job_min_parallelism_is_the_minimum_count(tmp_path: Path) -> None:
    text = job(parallelism=6).replace(
        "  labels:", "  annotations: {kueue.x-k8s.io/job-min-parallelism: '2'}\n  labels:"
    )
    [ps] = load([write(tmp_path, "job.yaml", text)]).state.workloads["ml/job-my-job"].pod_sets
    assert (ps.count, ps.min_count) == (6, 2)


def test_a_job_that_preempts_by_priority_class_label(tmp_path: Path) -> None:
    """What would be preempted if I submitted this Job now: the running low-priority
    Workload, as Kueue would (within the ClusterQueue, lower priority)."""
    cluster = write(tmp_path, "cluster.yaml", QUEUES + "---" + RUNNING)
    labels = "kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/priority-class: urgent"
    mine = write(tmp_path, "my-job.yaml", job(labels=labels))
    code, doc, err = plan("-f", cluster, "-f", mine, "--workload", "Job/ml/my-job")
    assert code == 0, err
    [d] = doc["decisions"]
    assert (d["preemptor"], d["owner"], d["outcome"]) == (
        "Workload/ml/job-my-job",
        "Job/ml/my-job",
        "Preempt",
    )
    assert [(v["object"], v["reason"]) for v in d["victims"]] == [
        ("Workload/ml/old", "InClusterQueue")
    ]
    # Without the label the Job has priority 0 (no default class): nothing lower to take.
    plain = write(tmp_path, "plain.yaml", job(name="plain"))
    code, doc, _ = plan("-f", cluster, "-f", plain, "--workload", "Job/ml/plain")
    assert (code, doc["decisions"][0]["outcome"]) == (0, "Pending")


def test_template_priority_class_is_the_priority_when_no_label(tmp_path: Path) -> None:
    path = write(
        tmp_path, "all.yaml", QUEUES + "---\n" + job(pod_spec="      priorityClassName: high\n")
    )
    state = load([path]).state
    assert state.priority_of(state.workloads["ml/job-my-job"]) == 500


def test_a_missing_priority_class_leaves_the_job_out_naming_file_and_line(tmp_path: Path) -> None:
    labels = "kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/priority-class: nosuch"
    cluster = write(tmp_path, "cluster.yaml", QUEUES)
    mine = write(tmp_path, "my-job.yaml", job(labels=labels) + "---\n" + job(name="other"))
    code, doc, err = plan("-f", cluster, "-f", mine)
    assert code == 2  # something was left out; the rest is decided
    assert [d["preemptor"] for d in doc["decisions"]] == ["Workload/ml/job-other"]
    assert f"{mine}: document 1 (line 1): Job ml/my-job: metadata.labels" in err
    assert "WorkloadPriorityClass 'nosuch' not found" in err


def test_a_job_kueue_already_made_a_workload_for_is_not_derived_again(tmp_path: Path) -> None:
    owned = RUNNING.replace(
        "metadata: {name: old, namespace: ml,",
        "metadata: {ownerReferences: [{kind: Job, name: my-job, controller: true}], "
        "name: old, namespace: ml,",
    )
    path = write(tmp_path, "all.yaml", QUEUES + "---" + owned + "---\n" + job())
    state = load([path]).state
    assert sorted(state.workloads) == ["ml/old"]
    assert state.workloads["ml/old"].owner == "Job/ml/my-job"


def test_a_running_job_without_its_workload_is_said_and_not_derived(tmp_path: Path) -> None:
    text = (
        job().replace("suspend: true", "suspend: false")
        + "status: {startTime: '2025-01-01T00:00:00Z', active: 4}\n"
    )
    loaded = load([write(tmp_path, "job.yaml", text)])
    assert loaded.state.workloads == {}
    assert any(
        "has started but its Kueue Workload is not in the input" in w for w in loaded.warnings
    )


def test_a_job_without_a_queue_name_is_skipped_with_a_reason(tmp_path: Path) -> None:
    loaded = load([write(tmp_path, "job.yaml", job(labels="app: x"))])
    assert loaded.state.workloads == {}
    assert any("without a kueue.x-k8s.io/queue-name label" in w for w in loaded.warnings)


def test_job_pods_are_placed_on_nodes_when_the_input_has_nodes(tmp_path: Path) -> None:
    nodes = "".join(
        f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: n{i}}}\n"
        "status: {allocatable: {cpu: 2, memory: 8Gi, pods: 110}}\n"
        for i in range(2)
    )
    cluster = write(tmp_path, "cluster.yaml", QUEUES + nodes)
    mine = write(tmp_path, "job.yaml", job(parallelism=4))
    code, doc, err = plan("-f", cluster, "-f", mine, "--workload", "Job/ml/my-job")
    assert code == 0, err
    [d] = doc["decisions"]
    assert d["outcome"] == "Admit"
    assert sorted(d["placement"]) == [f"Pod/ml/my-job-{i}" for i in range(4)]
    assert sorted(d["placement"].values()) == ["n0", "n0", "n1", "n1"]
    # Five pods of one CPU do not fit on 4 CPUs of nodes, though the quota has 8.
    mine = write(tmp_path, "job.yaml", job(parallelism=5))
    code, doc, _ = plan("-f", cluster, "-f", mine, "--workload", "Job/ml/my-job")
    assert doc["decisions"][0]["outcome"] == "Pending"
    assert "cannot be placed on the nodes" in doc["decisions"][0]["message"]


# -- JobSet and PyTorchJob ----------------------------------------------------------------

JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: ml, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  suspend: true
  replicatedJobs:
  - name: leader
    replicas: 1
    template:
      spec:
        parallelism: 1
        completions: 1
        template: {spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 3
        completions: 3
        template: {spec: {containers: [{name: c, resources: {requests: {cpu: 2, nvidia.com/gpu: 1}}}]}}
"""

PYTORCH = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pt, namespace: ml, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  runPolicy: {suspend: true}
  pytorchReplicaSpecs:
    Worker:
      replicas: 3
      template: {spec: {containers: [{name: pytorch, resources: {requests: {cpu: 2}}}]}}
    Master:
      template: {spec: {priorityClassName: high, containers: [{name: pytorch, resources: {requests: {cpu: 1}}}]}}
"""


def test_jobset_pod_sets_are_its_replicated_jobs(tmp_path: Path) -> None:
    wl = load([write(tmp_path, "js.yaml", JOBSET)]).state.workloads["ml/jobset-js"]
    assert [(ps.name, ps.count, ps.requests) for ps in wl.pod_sets] == [
        ("leader", 1, {"cpu": 1000}),
        ("workers", 6, {"cpu": 2000, "nvidia.com/gpu": 1}),
    ]
    assert wl.owner == "JobSet/ml/js"


def test_pytorchjob_pod_sets_are_master_then_worker(tmp_path: Path) -> None:
    state = load([write(tmp_path, "pt.yaml", QUEUES + "---" + PYTORCH)]).state
    wl = state.workloads["ml/pytorchjob-pt"]
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("master", 1), ("worker", 3)]
    assert state.priority_of(wl) == 500  # the first template that names a class


# -- plain Pods and pod groups ------------------------------------------------------------


def kueue_pod(name: str, group: str = "", total: str | None = None, node: str = "") -> str:
    labels = "kueue.x-k8s.io/queue-name: q"
    if group:
        labels += f", kueue.x-k8s.io/pod-group-name: {group}"
    annotations = (
        f"  annotations: {{kueue.x-k8s.io/pod-group-total-count: '{total}'}}\n" if total else ""
    )
    node_line = f"  nodeName: {node}\n" if node else ""
    return (
        f"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ml\n"
        f"  labels: {{{labels}}}\n{annotations}spec:\n{node_line}"
        "  containers: [{name: c, resources: {requests: {cpu: 1}}}]\n"
    )


def test_an_incomplete_pod_group_waits_and_is_not_planned_alone(tmp_path: Path) -> None:
    path = write(
        tmp_path, "pods.yaml", QUEUES + kueue_pod("a", "g", "3") + kueue_pod("b", "g", "3")
    )
    loaded = load([path])
    assert "ml/g" not in loaded.state.workloads
    assert any("has 2 of its 3 pods" in w for w in loaded.warnings)
    code, doc, _ = plan("-f", path)
    assert (code, doc["decisions"]) == (0, [])  # gated by Kueue: not a preemptor on its own


def test_a_bound_kueue_pod_is_running_not_pending(tmp_path: Path) -> None:
    state = load([write(tmp_path, "pods.yaml", QUEUES + kueue_pod("a", node="n1"))]).state
    assert state.workloads == {}
    assert state.pods["ml/a"].running


def test_pod_kind_workload_means_its_kueue_workload(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.yaml", QUEUES + kueue_pod("solo"))
    code, doc, err = plan("-f", path, "--workload", "Pod/ml/solo")
    assert code == 0, err
    [d] = doc["decisions"]
    assert (d["preemptor"], d["owner"], d["outcome"]) == (
        "Workload/ml/pod-solo",
        "Pod/ml/solo",
        "Admit",
    )


# -- a ClusterQueue's namespaceSelector ------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "namespace", "admitted", "said"),
    [
        ("", "", False, "no namespaceSelector, which selects no namespace"),
        ("  namespaceSelector: {}\n", "", True, ""),
        ("  namespaceSelector: {matchLabels: {team: ml}}\n", "team: ml", True, ""),
        ("  namespaceSelector: {matchLabels: {team: ml}}\n", "team: web", False, "doesn't match"),
        ("  namespaceSelector: {matchLabels: {team: ml}}\n", None, False, "is not in the input"),
        (
            "  namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, "
            "operator: In, values: [ml]}]}\n",
            None,
            True,
            "",
        ),
    ],
)
def test_namespace_selector_decides_which_namespaces_a_queue_admits(
    tmp_path: Path, selector: str, namespace: str | None, admitted: bool, said: str
) -> None:
    """As Kueue: no selector selects nothing, ``{}`` everything; a Namespace not in the
    input has only the label every namespace gets."""
    queues = QUEUES.replace("  namespaceSelector: {}\n", selector)
    if namespace is not None:
        labels = f"{{{namespace}}}" if namespace else "{}"
        queues += (
            f"---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: ml, labels: {labels}}}\n"
        )
    cluster = write(tmp_path, "cluster.yaml", queues)
    mine = write(tmp_path, "job.yaml", job(parallelism=1))
    code, doc, err = plan("-f", cluster, "-f", mine, "--workload", "Job/ml/my-job")
    assert code == 0, err
    [d] = doc["decisions"]
    assert d["outcome"] == ("Admit" if admitted else "Pending"), d["message"]
    assert said in d["message"]


# -- partial admission (minCount) ----------------------------------------------------------


def test_partial_admission_takes_the_largest_count_that_fits_or_preempts(tmp_path: Path) -> None:
    """Kueue's pod-set reducer: 12 pods of 1 CPU (at least 2) in 8 CPUs are admitted
    as 8; with 6 of the 8 CPUs held by a lower-priority workload, 8 pods preempt it
    rather than 2 pods fitting beside it."""
    annotated = job(parallelism=12).replace(
        "  labels:", "  annotations: {kueue.x-k8s.io/job-min-parallelism: '2'}\n  labels:"
    )
    cluster = write(tmp_path, "cluster.yaml", QUEUES)
    mine = write(tmp_path, "job.yaml", annotated)
    code, doc, err = plan("-f", cluster, "-f", mine, "--workload", "Job/ml/my-job")
    assert code == 0, err
    [d] = doc["decisions"]
    assert d["outcome"] == "Admit"
    assert "partially admitted: main 8 of 12 pods" in d["message"]
    cluster = write(tmp_path, "cluster.yaml", QUEUES + "---" + RUNNING)
    labels = "kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/priority-class: urgent"
    mine = write(
        tmp_path,
        "job.yaml",
        annotated.replace("{kueue.x-k8s.io/queue-name: q}", "{" + labels + "}"),
    )
    code, doc, err = plan("-f", cluster, "-f", mine, "--workload", "Job/ml/my-job")
    assert code == 0, err
    [d] = doc["decisions"]
    assert (d["outcome"], [v["object"] for v in d["victims"]]) == ("Preempt", ["Workload/ml/old"])
    assert "partially admitted: main 8 of 12 pods" in d["message"]
    # Without a minCount nothing is reduced: the 12 pods can never fit in 8 CPUs.
    code, doc, _ = plan("-f", cluster, "-f", write(tmp_path, "plain.yaml", job(parallelism=12)))
    pending = [d for d in doc["decisions"] if d["preemptor"] == "Workload/ml/job-my-job"]
    assert pending[0]["outcome"] == "Pending"
