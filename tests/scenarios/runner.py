"""Scenario bundles: a folder with manifests (``*.yaml`` except ``expect.yaml``) and the
expected decision(s) in ``expect.yaml``.

``expect.yaml`` either names one pending ``workload`` (evaluated alone) with the expected
``outcome`` / ``victims`` / ``mode`` / ``flavors`` / ``borrowing``, or, without
``workload``, lists ``decisions`` of one admission pass (each with ``preemptor`` and any
of the same keys). Only the keys present are checked; victims compare as sets of
``(object, reason)``; ``topology`` (Kueue's topology-aware scheduling) maps each pod set
to its assignment's ``levels`` and ``domains`` (``values``, ``count``), in order. Node-level bundles also check ``placement`` (preemptor pod ->
node, exactly) and ``pods`` (every victim pod, as a set); the ``workload`` may then be a
``Pod/``, ``PodGroup/`` or scheduling.k8s.io ``Workload/``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from gangpreempt.manifests import load, parse_time
from gangpreempt.model import ClusterState
from gangpreempt.planning import Decision, plan
from gangpreempt.preemption import Request, get_targets
from gangpreempt.quota import PendingWorkload, Snapshot
from gangpreempt.quota.assignment import pod_set_requests

ROOT = Path(__file__).parent


def bundles() -> list[Path]:
    return sorted(p.parent for p in ROOT.rglob("expect.yaml"))


def manifest_files(folder: Path) -> list[str]:
    return sorted(
        str(p)
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and p.name != "expect.yaml"
    )


def expectation(folder: Path) -> dict[str, Any]:
    with open(folder / "expect.yaml", encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    assert isinstance(data, dict), f"{folder}/expect.yaml must be a mapping"
    return data


def victims_of(d: Decision) -> set[tuple[str, str]]:
    return {(v.object, v.reason) for v in d.victims}


def check_decision(d: Decision, exp: dict[str, Any], where: str) -> None:
    if "outcome" in exp:
        assert d.outcome == exp["outcome"], (
            f"{where}: outcome {d.outcome} ({d.message}), expected {exp['outcome']}"
        )
    if "victims" in exp:
        want = {(v["object"], v["reason"]) for v in exp["victims"] or []}
        assert victims_of(d) == want, (
            f"{where}: victims {sorted(victims_of(d))}, expected {sorted(want)} ({d.message})"
        )
    if "mode" in exp:
        assert d.mode == exp["mode"], (
            f"{where}: mode {d.mode} ({d.message}), expected {exp['mode']}"
        )
    if "flavors" in exp:
        got = {ps: res for ps, res in d.flavors.items() if res}
        want_flavors = {ps: res for ps, res in (exp["flavors"] or {}).items() if res}
        assert got == want_flavors, f"{where}: flavors {got}, expected {want_flavors} ({d.message})"
    if "placement" in exp:
        want_placement = dict(exp["placement"] or {})
        assert d.placement == want_placement, (
            f"{where}: placement {d.placement}, expected {want_placement} ({d.message})"
        )
    if "pods" in exp:
        got_pods = {p for v in d.victims for p in v.pods}
        want_pods = set(exp["pods"] or [])
        assert got_pods == want_pods, (
            f"{where}: victim pods {sorted(got_pods)}, expected {sorted(want_pods)} ({d.message})"
        )
    if "borrowing" in exp:
        assert d.borrowing == exp["borrowing"], (
            f"{where}: borrowing {d.borrowing}, expected {exp['borrowing']}"
        )
    if "topology" in exp:
        got_topology = {
            ps: {
                "levels": list(ta.levels),
                "domains": [{"values": list(x.values), "count": x.count} for x in ta.domains],
            }
            for ps, ta in d.topology.items()
        }
        want_topology = exp["topology"] or {}
        assert got_topology == want_topology, (
            f"{where}: topology {got_topology}, expected {want_topology} ({d.message})"
        )


def replay_assignment(state: ClusterState, now: datetime, exp: dict[str, Any], where: str) -> None:
    """Run the victim search on a flavor assignment given by hand, as Kueue's own
    preemption tests do, and check outcome and victims."""
    _kind, namespace, name = exp["workload"].split("/")
    snapshot = Snapshot.build(state, now)
    pending = PendingWorkload.of(state, state.workloads[f"{namespace}/{name}"], now)
    assert pending.cq is not None
    cq = snapshot.cqs[pending.cq]
    frs: set[tuple[str, str]] = set()
    usage: dict[tuple[str, str], int] = {}
    for ps in pending.pod_sets:
        totals = pod_set_requests(ps, cq)
        for res, choice in exp["assignment"][ps.name].items():
            fr = (choice["flavor"], res)
            usage[fr] = usage.get(fr, 0) + totals.get(res, 0)
            if choice["mode"] == "Preempt":
                frs.add(fr)
    targets = get_targets(snapshot, Request(pending, cq, frozenset(frs), usage))
    got = {(t.aw.ref, t.reason) for t in targets}
    if "victims" in exp:
        want = {(v["object"], v["reason"]) for v in exp["victims"] or []}
        assert got == want, f"{where}: victims {sorted(got)}, expected {sorted(want)}"
    if "outcome" in exp:
        outcome = "Preempt" if targets else "Pending"
        assert outcome == exp["outcome"], f"{where}: outcome {outcome}, expected {exp['outcome']}"


def run_bundle(folder: Path) -> None:
    exp = expectation(folder)
    loaded = load(manifest_files(folder))
    now = parse_time(exp["now"])
    name = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder.name
    if "assignment" in exp:
        replay_assignment(loaded.state, now, exp, str(name))
        return
    options = {"rescheduling": exp.get("gang_reprieve") == "rescheduling"}
    if "workload" in exp:
        result = plan(loaded.state, now, exp["workload"], **options)
        assert len(result.decisions) == 1
        check_decision(result.decisions[0], exp, str(name))
        return
    result = plan(loaded.state, now, **options)
    by_preemptor = {d.preemptor: d for d in result.decisions}
    for want in exp["decisions"]:
        got = by_preemptor.get(want["preemptor"])
        assert got is not None, f"{name}: no decision for {want['preemptor']}"
        check_decision(got, want, f"{name} {want['preemptor']}")
