"""``gangpreempt plan --kubeconfig``: the live cluster read once (discovery and list,
no watch) and decided on, beside a file of what the user would submit."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.kube.apiserver import ApiServer
from tests.kube.objects import kueue_workload, node, pod, priority_class

pytestmark = pytest.mark.kube

NOW = "2026-11-02T00:00:00Z"
MY_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: my-job
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: urgent}
spec:
  parallelism: 2
  suspend: true
  template:
    spec:
      containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


def queues() -> list[dict[str, Any]]:
    group = "kueue.x-k8s.io/v1beta1"
    return [
        {"apiVersion": group, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": group,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "2"}]}
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": group,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "team-a"},
            "spec": {"clusterQueue": "cq"},
        },
        {
            "apiVersion": group,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "urgent"},
            "value": 1000,
        },
    ]


async def plan(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gangpreempt.cli",
        "plan",
        "--now",
        NOW,
        "-o",
        "json",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_what_would_be_preempted_if_i_submitted_this_job_now(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    for obj in [*queues(), node("n1", cpu="2"), priority_class("low", 10)]:
        apiserver.put(obj)
    # Two running low-priority Kueue workloads fill the quota and the node.
    for name in ("a", "b"):
        apiserver.put(kueue_workload(name, queue="cq"))
        running = pod(f"{name}-0", node_name="n1", priority_class="low")
        running["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": name}
        apiserver.put(running)
    config = apiserver.kubeconfig(str(tmp_path / "kubeconfig"))
    mine = tmp_path / "my-job.yaml"
    mine.write_text(MY_JOB)
    code, out, err = await plan(
        "--kubeconfig", config, "-f", str(mine), "--workload", "Job/team-a/my-job"
    )
    assert code == 0, err
    [d] = json.loads(out)["decisions"]
    assert (d["preemptor"], d["owner"], d["outcome"]) == (
        "Workload/team-a/job-my-job",
        "Job/team-a/my-job",
        "Preempt",
    )
    assert sorted(v["object"] for v in d["victims"]) == ["Workload/team-a/a", "Workload/team-a/b"]
    assert sorted(d["placement"]) == ["Pod/team-a/my-job-0", "Pod/team-a/my-job-1"]
    # Read once: lists, no watch.
    verbs = {verb for verb, _group, _resource in apiserver.calls}
    assert "list" in verbs
    assert "watch" not in verbs


async def test_an_unreadable_live_object_is_left_out_and_the_rest_decided(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    for obj in [*queues(), node("n1", cpu="2")]:
        apiserver.put(obj)
    broken = pod("broken", node_name="n1")
    broken["spec"]["containers"] = "none"
    apiserver.put(broken)
    apiserver.put(pod("waiting"))
    config = apiserver.kubeconfig(str(tmp_path / "kubeconfig"))
    code, out, err = await plan("--kubeconfig", config)
    assert code == 2  # something was left out
    assert "Pod team-a/broken" in err
    assert "spec.containers" in err
    [d] = json.loads(out)["decisions"]
    assert (d["preemptor"], d["outcome"]) == ("Pod/team-a/waiting", "Admit")


async def test_an_unreachable_cluster_exits_2_naming_it(tmp_path: Path) -> None:
    server = ApiServer()
    await server.start()
    config = server.kubeconfig(str(tmp_path / "kubeconfig"))
    await server.stop()
    code, out, err = await plan("--kubeconfig", config)
    assert code == 2
    assert out == ""
    assert "kubernetes: cannot read the cluster" in err
