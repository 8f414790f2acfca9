"""The chaos scenario's cluster as a Kubernetes API server (the in-repo one), for runs
with the ``kubernetes`` source and sink: ingest lists and watches it, the actuator
writes to it, and this module plays the controllers the services leave to the cluster
(what the sim does in the other classes):

- Kueue: an ``Admitted`` decided under the current quota lease reserves the
  Workload's quota (its ``status.admission``); an evicted Workload (``Evicted``) gives
  its quota back ``termination_delay`` seconds later and is pending again;
- kube-scheduler: an ``Admitted`` with a placement binds the pods to their nodes;
- the kubelet: a deleted pod terminates for ``termination_delay`` (the server's grace);
- the timeline: each file of the scenario's timeline is created at its second.

Every write the server stores is recorded with its wall-clock time, and the evictions
(a Workload newly ``Evicted``, a pod newly deleted) are turned into the checker's
``EvictionEntry``: the plan that evicted it (the Workload's condition names it; a pod's
is the plan whose proposal lists it, actuating before the write), the token of that
plan's ``actuating`` revision stored before the write, and the actuator lease's token at
the time of the write.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from gangpreempt import events
from gangpreempt.bus import Topology, follow
from gangpreempt.bus.leasing import current_token, parse_lease
from gangpreempt.model.quantity import format_amount
from gangpreempt.planning.records import ACTUATING
from services.ingest.journal import EvictionEntry
from services.ingest.timeline import load_timeline
from tests.chaos.checker import Revision
from tests.kube.apiserver import CORE, KUEUE, PLUGINS, ApiServer, Kind

KUEUE_GROUP = "kueue.x-k8s.io"
KINDS = [
    *CORE,
    *(Kind(k.group, "v1beta2", k.plural, k.kind, k.namespaced, k.status) for k in KUEUE),
    *PLUGINS,
]
PLAN = re.compile(r"gangpreempt plan (\w+)")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def _true(obj: dict[str, Any], kind: str) -> bool:
    return _conditions(obj).get(kind, {}).get("status") == "True"


def _set(conditions: list[dict[str, Any]], kind: str, status: str, reason: str) -> None:
    conditions[:] = [c for c in conditions if c.get("type") != kind]
    conditions.append(
        {"type": kind, "status": status, "reason": reason, "lastTransitionTime": _now()}
    )


class KubeWorld:
    def __init__(self, scenario: Path, termination_delay: float) -> None:
        self.scenario = scenario
        self.delay = termination_delay
        self.server = ApiServer(kinds=KINDS)
        self.server.pod_termination = termination_delay
        self.writes: list[tuple[float, str, str, dict[str, Any]]] = []  # at, plural, event
        self.lease_changes: list[tuple[float, int]] = []  # (wall clock, actuator token)
        self.refused = 0  # admissions under a quota token that was not the lease's
        self._tasks: list[asyncio.Task[None]] = []
        self._subs: list[Any] = []
        self._terminating: set[tuple[str, str]] = set()
        emit = self.server._emit

        def recorded(kind: Kind, event: str, obj: dict[str, Any]) -> None:
            self.writes.append((time.time(), kind.plural, event, copy.deepcopy(obj)))
            emit(kind, event, obj)

        self.server._emit = recorded  # type: ignore[method-assign]

    # -- running -----------------------------------------------------------------------------
    async def start(self, nc: Client, topology: Topology, kubeconfig: str) -> None:
        await self.server.start()
        self.server.kubeconfig(kubeconfig)
        self.load(self.scenario / "cluster.yaml")
        js = nc.jetstream()
        leases = await js.key_value(topology.leases_bucket)

        async def on_decision(msg: Msg) -> None:
            with contextlib.suppress(Exception):
                for event in events.decode_all(msg.data):
                    if isinstance(event, events.Admitted):
                        lease = await current_token(leases, "quota")
                        if event.quota_token != lease:
                            self.refused += 1
                            continue
                        self.admit(event)

        async def on_lease(msg: Msg) -> None:
            gone = (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE")
            parsed = None if gone else parse_lease(msg.data)
            self.lease_changes.append((time.time(), parsed[1] if parsed else 0))

        self._subs.append(
            await follow(nc, f"{topology.prefix}.quota.>", topology.decisions_stream, on_decision)
        )
        self._subs.append(
            await follow(
                nc,
                f"$KV.{topology.leases_bucket}.actuator",
                f"KV_{topology.leases_bucket}",
                on_lease,
                DeliverPolicy.LAST_PER_SUBJECT,
            )
        )
        self._tasks.append(asyncio.ensure_future(self.timeline()))
        self._tasks.append(asyncio.ensure_future(self.kueue()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        await self.server.stop()

    def load(self, path: Path) -> None:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                self.server.put(doc)

    async def timeline(self) -> None:
        started = time.monotonic()
        for step in sorted(
            (s for s in load_timeline(str(self.scenario)) if s.at is not None and s.apply),
            key=lambda s: s.at or 0.0,
        ):
            await asyncio.sleep(max(0.0, started + (step.at or 0.0) - time.monotonic()))
            assert step.apply is not None
            self.load(self.scenario / step.apply)

    # -- the controllers ---------------------------------------------------------------------
    def admit(self, ev: events.Admitted) -> None:
        for ref, node in sorted(ev.placement.items()):  # kube-scheduler binds
            ns, _, name = ref.removeprefix("Pod/").partition("/")
            pod = self.server.get("", "pods", ns, name)
            spec = (pod or {}).get("spec") or {}
            if pod is None or spec.get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = node
            self.server.put(new)
        kind, _, key = ev.workload.partition("/")
        if kind != "Workload":
            return
        ns, _, name = key.partition("/")
        wl = self.server.get(KUEUE_GROUP, "workloads", ns, name)
        if wl is None or (ev.uid and wl["metadata"]["uid"] != ev.uid):
            return
        if (wl.get("status") or {}).get("admission"):
            return  # admitted already
        new = copy.deepcopy(wl)
        status = new.setdefault("status", {})
        status["admission"] = {
            "clusterQueue": ev.cluster_queue,
            "podSetAssignments": [
                {
                    "name": ps.name,
                    "count": ps.count,
                    "flavors": dict(ps.flavors),
                    "resourceUsage": {
                        r: format_amount(r, v) for r, v in sorted(ps.resource_usage.items())
                    },
                }
                for ps in ev.pod_sets
            ],
        }
        conditions = [
            c
            for c in status.get("conditions") or []
            if c.get("type") not in ("Evicted", "Preempted")
        ]
        _set(conditions, "QuotaReserved", "True", "QuotaReserved")
        _set(conditions, "Admitted", "True", "Admitted")
        status["conditions"] = conditions
        self.server.put(new)

    async def kueue(self) -> None:
        """An evicted Workload's job stops: its quota is released after the delay."""
        while True:
            await asyncio.sleep(0.05)
            for (ns, name), wl in list(self.server.objects[(KUEUE_GROUP, "workloads")].items()):
                admitted = bool((wl.get("status") or {}).get("admission"))
                if admitted and _true(wl, "Evicted") and (ns, name) not in self._terminating:
                    self._terminating.add((ns, name))
                    uid = wl["metadata"]["uid"]
                    asyncio.get_running_loop().call_later(self.delay, self._release, ns, name, uid)

    def _release(self, ns: str, name: str, uid: str) -> None:
        self._terminating.discard((ns, name))
        wl = self.server.get(KUEUE_GROUP, "workloads", ns, name)
        if wl is None or wl["metadata"]["uid"] != uid or not _true(wl, "Evicted"):
            return
        new = copy.deepcopy(wl)
        status = new.setdefault("status", {})
        status.pop("admission", None)
        conditions = list(status.get("conditions") or [])
        _set(conditions, "QuotaReserved", "False", "Pending")
        _set(conditions, "Admitted", "False", "NoReservation")
        status["conditions"] = conditions
        self.server.put(new)

    # -- evidence ----------------------------------------------------------------------------
    def lease_at(self, at: float) -> int:
        token = 0
        for when, t in self.lease_changes:
            if when > at:
                break
            token = t
        return token

    def evictions(self, revisions: dict[str, list[Revision]]) -> list[EvictionEntry]:
        """What the actuator evicted, as the server stored it."""
        # victim object or pod ref -> plans that list it
        plans: dict[str, list[str]] = {}
        for plan_id, history in revisions.items():
            proposal = next((r.record.proposal for r in history if r.record.proposal), None)
            for v in proposal.victims if proposal is not None else ():
                for ref in (v.object, *v.pods):
                    plans.setdefault(ref, []).append(plan_id)

        def actuating_before(plan_id: str, at: float) -> int:
            tokens = [
                r.record.fencing_token
                for r in revisions.get(plan_id, [])
                if r.record.state == ACTUATING and r.at <= at
            ]
            return tokens[-1] if tokens else 0

        out: list[EvictionEntry] = []
        seen: dict[tuple[str, str, str], dict[str, Any]] = {}
        for at, plural, event, obj in self.writes:
            meta = obj.get("metadata") or {}
            key = (meta.get("namespace", ""), meta.get("name", ""))
            before = seen.get((plural, *key))
            seen[(plural, *key)] = obj
            if plural == "workloads" and event == "MODIFIED":
                evicted = _true(obj, "Evicted") and not (before and _true(before, "Evicted"))
                if not evicted:
                    continue
                found = PLAN.search(_conditions(obj)["Evicted"].get("message", ""))
                ref = f"Workload/{key[0]}/{key[1]}"
                plan_id = found.group(1) if found else ""
            elif plural == "pods" and (
                (event == "MODIFIED" and meta.get("deletionTimestamp")) or event == "DELETED"
            ):
                if before is not None and (before.get("metadata") or {}).get("deletionTimestamp"):
                    continue  # terminating already: the kubelet's end, not an eviction
                ref = f"Pod/{key[0]}/{key[1]}"
                candidates = [p for p in plans.get(ref, []) if actuating_before(p, at)]
                plan_id = candidates[-1] if candidates else ""
            else:
                continue
            out.append(
                EvictionEntry(
                    at=at,
                    plan_id=plan_id,
                    ref=ref,
                    uid=str(meta.get("uid", "")),
                    fencing_token=actuating_before(plan_id, at) if plan_id else 0,
                    lease_token=self.lease_at(at),
                )
            )
        return out


__all__ = ["KubeWorld"]
