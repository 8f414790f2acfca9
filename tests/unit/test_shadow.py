"""Shadow mode in the pure core: reading the peers' marks on their victims (Kueue's
Preempted condition, kube-scheduler's DisruptionTarget), finding the preemptor, the
state before the preemption, and the verdict beside gangpreempt's own decision."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gangpreempt import events
from gangpreempt.cli.main import cli
from gangpreempt.manifests import load
from gangpreempt.model.checks import GANGPREEMPT_MARK
from gangpreempt.model.cluster import ClusterState
from gangpreempt.planning import shadow as sh
from services.quota.shadowing import Shadow

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
V1B2 = "kueue.x-k8s.io/v1beta2"


def kueue_message(uid: str) -> str:
    """Kueue v0.17's ``preemptionMessage``."""
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: UNKNOWN) due to "
        "prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq"
    )


def queues(nominal: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": V1B2, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": V1B2,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
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
                ],
            },
        },
        {
            "apiVersion": V1B2,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "ns"},
            "spec": {"clusterQueue": "cq"},
        },
    ]


def workload(
    name: str,
    cpus: int,
    priority: int,
    *,
    admitted: bool = True,
    preempted_for: str = "",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if admitted:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "default"},
                    "resourceUsage": {"cpu": str(cpus)},
                    "count": 1,
                }
            ],
        }
        status["conditions"] = [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ]
        if preempted_for:
            status["conditions"] += [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Preempted",
                    "message": kueue_message(preempted_for),
                },
                {
                    "type": "Preempted",
                    "status": "True",
                    "reason": "InClusterQueue",
                    "message": kueue_message(preempted_for),
                },
            ]
    return {
        "apiVersion": V1B2,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T11:00:00Z",
        },
        "spec": {
            "queueName": "lq",
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "resources": {"requests": {"cpu": str(cpus)}}}
                            ],
                            **({"nodeSelector": node_selector} if node_selector else {}),
                        }
                    },
                }
            ],
        },
        "status": status,
    }


def state_of(objects: list[dict[str, Any]]) -> ClusterState:
    return load([], objects=objects).state


def compared(state: ClusterState) -> list[sh.Comparison]:
    return sh.snapshot_comparisons(state, NOW)


# -- Kueue --------------------------------------------------------------------------------------


def test_kueues_preempted_condition_names_the_preemptor() -> None:
    state = state_of(
        [
            *queues("8"),
            workload("low", 4, 1, preempted_for="uid-p"),
            workload("p", 4, 9, admitted=False),
        ]
    )
    (victim,) = sh.marked(state)
    assert victim == sh.PeerVictim(sh.KUEUE, "Workload/ns/low", "uid-p", reason="InClusterQueue")
    assert sh.preemptor_of(state, victim) == "Workload/ns/p"


@pytest.mark.parametrize(
    ("nominal", "needs", "taken", "verdict", "ours"),
    [
        # Kueue took the lowest: gangpreempt would have taken the same
        ("8", 4, ("low",), sh.SAME, ("Workload/ns/low",)),
        # Kueue took two where one makes room
        ("8", 4, ("low", "mid"), sh.FEWER, ("Workload/ns/low",)),
        # Kueue took the middle one: gangpreempt takes the lowest first
        ("8", 4, ("mid",), sh.DIFFERENT, ("Workload/ns/low",)),
        # the quota had room: nothing to preempt
        ("12", 4, ("low",), sh.NOT_NEEDED, ()),
        # the preemptor does not fit even with every lower workload gone
        ("8", 12, ("low",), sh.UNPLACEABLE, ()),
    ],
)
def test_a_kueue_preemption_beside_gangpreempts_decision(
    nominal: str, needs: int, taken: tuple[str, ...], verdict: str, ours: tuple[str, ...]
) -> None:
    objects = [
        *queues(nominal),
        *(
            workload(name, 4, prio, preempted_for="uid-p" if name in taken else "")
            for name, prio in (("low", 1), ("mid", 5))
        ),
        workload("p", needs, 9, admitted=False),
    ]
    (c,) = compared(state_of(objects))
    assert (c.peer, c.preemptor, c.verdict) == (sh.KUEUE, "Workload/ns/p", verdict)
    assert c.peer_victims == tuple(f"Workload/ns/{n}" for n in taken)
    assert c.victims == ours
    assert c.message.startswith("Kueue preempted")


def test_kueue_preempting_for_a_workload_no_node_can_run_is_unplaceable() -> None:
    """Kueue counts quota only: it preempts for a workload whose pods ask for nodes the
    cluster does not have (Kueue #3210, #5243). gangpreempt places the pods its pod sets
    describe before it preempts, and would have preempted nothing."""
    state = state_of(
        [
            *queues("8"),
            node("n1", 16),
            workload("low", 8, 1, preempted_for="uid-p"),
            workload("p", 8, 9, admitted=False, node_selector={"gpu": "h100"}),
        ]
    )
    (c,) = compared(state)
    assert (c.preemptor, c.verdict, c.victims) == ("Workload/ns/p", sh.UNPLACEABLE, ())
    assert "gangpreempt would have preempted nothing" in c.message
    # the same preemptor on a node it can use: Kueue's victim is gangpreempt's too
    fits = state_of(
        [
            *queues("8"),
            node("n1", 16),
            workload("low", 8, 1, preempted_for="uid-p"),
            workload("p", 8, 9, admitted=False),
        ]
    )
    (same,) = compared(fits)
    assert (same.verdict, same.victims) == (sh.SAME, ("Workload/ns/low",))


def test_a_preemption_whose_preemptor_is_gone_is_unknown() -> None:
    state = state_of([*queues("8"), workload("low", 4, 1, preempted_for="uid-gone")])
    (c,) = compared(state)
    assert (c.preemptor, c.verdict) == ("", sh.UNKNOWN)


def test_only_a_new_mark_is_a_new_preemption() -> None:
    plain = state_of([*queues("8"), workload("low", 4, 1)]).workloads["ns/low"]
    marked = state_of([*queues("8"), workload("low", 4, 1, preempted_for="uid-p")]).workloads[
        "ns/low"
    ]
    assert sh.newly_marked("Workload", plain, marked) is not None
    assert sh.newly_marked("Workload", None, marked) is not None
    assert sh.newly_marked("Workload", marked, marked) is None  # seen already
    assert sh.newly_marked("Workload", marked, plain) is None
    assert sh.unmarked(marked) == plain


# -- kube-scheduler -----------------------------------------------------------------------------


def node(name: str, cpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": str(cpus), "pods": "110"}},
    }


def pod(
    name: str,
    cpus: int,
    priority: int,
    *,
    on: str = "",
    group: str = "",
    nominated: str = "",
    preempted: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running" if on else "Pending"}
    if nominated:
        status["nominatedNodeName"] = nominated
    if preempted:
        status["conditions"] = [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "default-scheduler: preempting to accommodate a higher priority pod",
            }
        ]
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpus)}}}],
    }
    if on:
        spec["nodeName"] = on
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if group:
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pod_group(name: str, members: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"minMember": members},
    }


def test_a_scheduler_preemption_of_the_lowest_pod_is_the_same() -> None:
    state = state_of(
        [
            node("n1"),
            node("n2"),
            pod("low", 8, 1, on="n1", preempted=True),
            pod("mid", 8, 5, on="n2"),
            pod("p", 8, 9, nominated="n1"),
        ]
    )
    (victim,) = sh.marked(state)
    assert (victim.peer, victim.victim, victim.node) == (sh.SCHEDULER, "Pod/ns/low", "n1")
    (c,) = compared(state)
    assert (c.preemptor, c.verdict, c.victims) == ("Pod/ns/p", sh.SAME, ("Pod/ns/low",))


def test_a_scheduler_preemption_that_splits_a_gang_is_reported() -> None:
    """kube-scheduler took one pod of a running gang of two (it preempts pods one by
    one); the rest of the gang keeps running and is useless without it. gangpreempt
    takes whole gangs, or a lone pod."""
    state = state_of(
        [
            node("n1"),
            node("n2"),
            pod_group("g", 2),
            pod("g-0", 8, 1, on="n1", group="g", preempted=True),
            pod("g-1", 8, 1, on="n2", group="g"),
            pod("p", 8, 9, nominated="n1"),
        ]
    )
    (c,) = compared(state)
    assert c.verdict == sh.PARTIAL_GANG
    assert c.partial_gangs == ("PodGroup/ns/g",)
    assert set(c.victims) == {"Pod/ns/g-0", "Pod/ns/g-1"}  # gangpreempt: the whole gang
    assert "which gangpreempt never does" in c.message


def test_the_preemptor_of_a_pod_is_the_highest_pod_nominated_to_its_node() -> None:
    state = state_of(
        [
            node("n1"),
            pod("low", 8, 1, on="n1", preempted=True),
            pod("p", 8, 9, nominated="n1"),
            pod("q", 8, 7, nominated="n1"),
            pod("elsewhere", 8, 20, nominated="n2"),
        ]
    )
    (victim,) = sh.marked(state)
    assert sh.preemptor_of(state, victim) == "Pod/ns/p"


# -- gangpreempt explain --shadow ---------------------------------------------------------------


def test_explain_shadow_reads_a_snapshot_and_reports_each_peer_preemption(
    tmp_path: Path,
) -> None:
    """The CLI on manifests: Kueue took two workloads where one made room, and
    kube-scheduler split a gang; JSON names both verdicts, the text says why."""
    objects = [
        *queues("8"),
        workload("low", 4, 1, preempted_for="uid-p"),
        workload("mid", 4, 5, preempted_for="uid-p"),
        workload("p", 4, 9, admitted=False),
        node("n1"),
        node("n2"),
        node("n3"),  # room for p's pod: Kueue's quota is all it lacks
        pod_group("g", 2),
        pod("g-0", 8, 1, on="n1", group="g", preempted=True),
        pod("g-1", 8, 1, on="n2", group="g"),
        pod("lone", 8, 9, nominated="n1"),
    ]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    args = ["explain", "--shadow", "-f", str(tmp_path), "--now", NOW.isoformat()]
    as_json = CliRunner().invoke(cli, [*args, "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    found = {c["peer"]: c for c in json.loads(as_json.output)["comparisons"]}
    assert (found["kueue"]["preemptor"], found["kueue"]["verdict"]) == ("Workload/ns/p", "fewer")
    assert found["kube-scheduler"]["verdict"] == "partial-gang"
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0, text.output
    assert "Kueue -> Workload/ns/p: fewer" in text.output
    assert "which gangpreempt never does" in text.output


def test_explain_shadow_on_a_snapshot_without_peer_preemptions_says_so(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([*queues("8"), workload("a", 4, 1)]))
    result = CliRunner().invoke(cli, ["explain", "--shadow", "-f", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "no preemption by Kueue or kube-scheduler found" in result.output


# -- quota's episodes (services.quota.shadowing) ------------------------------------------------


async def test_an_episode_finds_its_preemptor_when_it_comes_after_the_victims_mark() -> None:
    """Found against the real Kueue: ingest does not keep the order of changes across
    objects, so a victim's mark can reach quota before the preemptor's Workload, and
    the preemptor is seen first already admitted. The episode waits for it and compares
    on it as it was while pending."""
    full = state_of(
        [
            *queues("8"),
            node("n1", 16),
            workload("low", 8, 1, preempted_for="uid-p"),
            workload("p", 8, 9),  # admitted by the time quota sees it
        ]
    )
    plain = state_of([*queues("8"), workload("low", 8, 1)]).workloads["ns/low"]
    live = ClusterState(
        flavors=full.flavors,
        cluster_queues=full.cluster_queues,
        local_queues=full.local_queues,
        nodes=full.nodes,
        workloads={"ns/low": plain},
    )
    published: list[events.Event] = []

    async def publish(e: events.Event) -> None:
        published.append(e)

    book = Shadow(lambda: live, publish, lambda: NOW, settle=0.0)
    live.workloads["ns/low"] = full.workloads["ns/low"]
    book.observe("Workload", plain, full.workloads["ns/low"])  # the mark, first
    live.workloads["ns/p"] = full.workloads["ns/p"]
    book.observe("Workload", None, full.workloads["ns/p"])  # then the preemptor
    assert await book.close_due(publishing=True) == 1
    (c,) = published
    assert isinstance(c, events.ShadowCompared)
    assert (c.peer, c.preemptor, c.verdict) == (sh.KUEUE, "Workload/ns/p", sh.SAME), c.message
    assert c.victims == ("Workload/ns/low",)


async def test_a_standby_drops_what_it_gathered_and_publishes_nothing() -> None:
    state = state_of([*queues("8"), workload("low", 8, 1, preempted_for="uid-p")])
    published: list[events.Event] = []

    async def publish(e: events.Event) -> None:
        published.append(e)

    book = Shadow(lambda: state, publish, lambda: NOW, settle=0.0)
    book.observe("Workload", None, state.workloads["ns/low"])
    assert book.episodes
    assert await book.close_due(publishing=False) == 0
    assert published == []
    assert not book.episodes


def test_what_was_handed_over_in_shadow_mode_is_named() -> None:
    """A queue that lists gangpreempt's check, or a labelled namespace, while nothing is
    written: Kueue would wait for the check forever, the pods would stay gated."""
    check = {
        "apiVersion": V1B2,
        "kind": "AdmissionCheck",
        "metadata": {"name": "gangpreempt"},
        "spec": {"controllerName": "gangpreempt.io/placement"},
    }
    managed = queues("8")
    managed[1]["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "gangpreempt"}]}
    managed[1]["spec"]["preemption"] = {"withinClusterQueue": "Never"}
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ml", "labels": {"gangpreempt.io/authority": "enabled"}},
    }
    found = sh.handed_over(state_of([check, *managed, namespace]))
    assert [f.split(" ")[:2] for f in found] == [["ClusterQueue", "cq"], ["Namespace", "ml"]]
    assert sh.handed_over(state_of(queues("8"))) == []


def test_gangpreempts_own_preemption_marks_are_not_a_peers() -> None:
    """A Workload gangpreempt's actuator evicted carries the same conditions Kueue sets,
    its message naming the plan: shadow mode never counts it as Kueue's."""
    mine = workload("low", 4, 1, preempted_for="uid-p")
    for c in mine["status"]["conditions"]:
        if c["type"] in ("Evicted", "Preempted"):
            c["message"] += f"; {GANGPREEMPT_MARK}plan-1"
    state = state_of([*queues("8"), mine, workload("p", 4, 9, admitted=False)])
    assert sh.marked(state) == []
    theirs = state_of([*queues("8"), workload("low", 4, 1, preempted_for="uid-p")])
    assert [v.victim for v in sh.marked(theirs)] == ["Workload/ns/low"]
