"""The ``kubernetes`` sink: live reads from the API server and one actuation per victim
kind (``kube_kueue`` for Kueue Workloads, ``kube_pods`` for pods and the Jobs that own
them).

Every write re-reads the object and carries its uid and resourceVersion as
preconditions (``services.kube.writing``), so a plan never touches a replaced object,
and an actuation repeated after a crash finds the work done and sends nothing twice.
An Event on each victim and one on the preemptor name the plan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from gangpreempt import events
from gangpreempt.errors import Fenced
from gangpreempt.manifests.objects import load_objects
from gangpreempt.model.cluster import ClusterState
from gangpreempt.planning.barrier import LiveObject, live_pods, live_workload
from gangpreempt.replica import StateReplica
from services import simwire
from services.actuator.kube_checks import mark_active, set_check
from services.actuator.kube_gates import lift_gate
from services.actuator.kube_kueue import evict_workload, get_workload
from services.actuator.kube_pods import DEFAULT_CONCURRENCY, PodEvictor
from services.kube.access import KUEUE_WORKLOADS, PODS
from services.kube.client import JSON, ApiError, KubeApi, path_of
from services.kube.discovery import discover
from services.kube.recording import Recorder
from services.kube.writing import Stale, retrying

FENCED = "fenced: this actuator lost its lease; another one acts now"
FEW_PODS = 8  # up to this many pods in a namespace are read one by one, more are listed


def _split(ref: str) -> tuple[str, str, str]:
    kind, _, key = ref.partition("/")
    namespace, _, name = key.partition("/")
    return kind, namespace, name


class KubeSink:
    name = "kubernetes"

    def __init__(
        self,
        api: KubeApi,
        replica: StateReplica,
        pod_eviction: str,
        kueue_version: str | None,
        fenced: Callable[[], bool] = lambda: False,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        self.api = api
        self.replica = replica
        self.kueue_version = kueue_version
        self.fenced = fenced  # true once this actuator lost its lease: write nothing more
        # set when the service stops: the checks' and gates' writes, which the next
        # holder decides again, are then not retried (the evictions finish their plan)
        self.stop: asyncio.Event | None = None
        self.recorder = Recorder(api)
        self.pods = PodEvictor(api, self.recorder, pod_eviction, fenced, concurrency)

    @classmethod
    async def create(
        cls,
        api: KubeApi,
        replica: StateReplica,
        pod_eviction: str,
        fenced: Callable[[], bool] = lambda: False,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> KubeSink:
        served = await discover(api, (KUEUE_WORKLOADS,))
        version = served.get(KUEUE_WORKLOADS)
        return cls(api, replica, pod_eviction, version, fenced, concurrency)

    @property
    def state(self) -> ClusterState:
        return self.replica.state

    def _is_kueue(self, ref: str) -> bool:
        kind, namespace, name = _split(ref)
        return kind == "Workload" and f"{namespace}/{name}" in self.state.workloads

    # -- reads -------------------------------------------------------------------------------
    def _members(self, ref: str) -> list[str]:
        """The pods (``ns/name``) of a pod, PodGroup or scheduling.k8s.io Workload ref: a
        group's members as the replica knows them, their state as the API server has it."""
        kind, namespace, name = _split(ref)
        key = f"{namespace}/{name}"
        if kind == "Pod":
            return [key]
        groups = {key} if kind == "PodGroup" else set(self.state.gang_workload(key))
        return sorted(p.key for p in self.state.pods.values() if p.group in groups)

    async def _live_pods(self, keys: Iterable[str]) -> dict[str, JSON]:
        """The pods ``keys`` (``ns/name``) as the API server has them (missing: absent):
        a few are read one by one, more in one namespace by listing it."""
        wanted: dict[str, set[str]] = {}
        for key in keys:
            ns, _, name = key.partition("/")
            wanted.setdefault(ns, set()).add(name)
        raw: dict[str, JSON] = {}
        for ns, names in sorted(wanted.items()):
            if len(names) <= FEW_PODS:
                for name in sorted(names):
                    obj = await self.pods.get_pod(f"{ns}/{name}")
                    if obj is not None:
                        raw[f"{ns}/{name}"] = obj
                continue
            page = await self.api.request("GET", PODS, "list", path_of(PODS, "v1", ns))
            for item in page.get("items") or []:
                name = str((item.get("metadata") or {}).get("name", ""))
                if name in names:
                    item.setdefault("apiVersion", "v1")
                    item.setdefault("kind", "Pod")
                    raw[f"{ns}/{name}"] = item
        return raw

    async def read(self, refs: list[str]) -> dict[str, LiveObject]:
        await self.replica.caught_up()
        members = {ref: self._members(ref) for ref in refs if not self._is_kueue(ref)}
        raw = await self._live_pods(k for ms in members.values() for k in ms)
        pods = load_objects("kubernetes", raw.values()).state.pods
        out: dict[str, LiveObject] = {}
        for ref in refs:
            if self._is_kueue(ref):
                obj = await get_workload(self.api, self.kueue_version, ref.partition("/")[2])
                workloads = load_objects("kubernetes", [obj] if obj else []).state.workloads
                out[ref] = live_workload(ref, next(iter(workloads.values()), None))
                continue
            live = [pods[k] for k in members[ref] if k in pods]
            if ref.startswith("Pod/") and live:
                out[ref] = live_pods(ref, live, live[0].uid, live[0].resource_version)
            else:
                out[ref] = live_pods(ref, live)
        return out

    # -- actuation ----------------------------------------------------------------------------
    async def evict(self, request: simwire.EvictRequest) -> simwire.EvictReply:
        if self.fenced():
            return simwire.EvictReply(ok=False, detail=FENCED, fenced=True)
        try:
            if request.mode == "kueue":
                applied = await retrying(
                    request.ref,
                    lambda: evict_workload(
                        self.api, self.kueue_version, self.state, self.recorder, request
                    ),
                )
            else:
                applied = await self.pods.evict(request)
        except Stale as exc:
            return simwire.EvictReply(ok=False, detail=f"stale: {exc}")
        except Fenced:
            return simwire.EvictReply(ok=False, detail=FENCED, fenced=True)
        except ApiError as exc:
            return simwire.EvictReply(ok=False, detail=f"{request.ref}: {exc}")
        # A Transient (the API server unreachable past the retry budget) goes up: the
        # actuator drives the plan again later, never counting the victim as refused.
        await self._preemptor_event(request)
        return simwire.EvictReply(ok=True, applied=applied)

    # -- the admission check -------------------------------------------------------------------
    async def set_check(self, ev: events.CheckDecided) -> str:
        """Write gangpreempt's admission check decision on its Workload (what was done,
        or why nothing was)."""
        if self.fenced():
            raise Fenced(FENCED)
        try:
            return await retrying(
                ev.workload,
                lambda: set_check(self.api, self.kueue_version, self.recorder, ev),
                stop=self.stop,
            )
        except Stale as exc:
            return f"stale: {exc}"
        except ApiError as exc:
            return f"{ev.workload}: {exc}"

    async def activate(self) -> list[str]:
        """Mark gangpreempt's AdmissionChecks ``Active`` (the names written)."""
        mine = sorted(
            n for n, ac in self.state.admission_checks.items() if ac.ours and not ac.active
        )
        if not mine or self.fenced():
            return []
        return await retrying(
            "AdmissionChecks",
            lambda: mark_active(self.api, self.kueue_version, mine),
            stop=self.stop,
        )

    async def lift_gate(self, key: str, host: str | None, why: str) -> str:
        """Narrow the gated pod ``key`` to the node of hostname ``host`` (None: release it
        unchanged) and remove gangpreempt's gate (what was done, or why nothing was)."""
        if self.fenced():
            raise Fenced(FENCED)
        try:
            return await retrying(
                f"Pod/{key}",
                lambda: lift_gate(self.api, self.pods, self.recorder, key, host, why),
                stop=self.stop,
            )
        except ApiError as exc:
            return f"Pod/{key}: {exc}"

    async def _preemptor_event(self, request: simwire.EvictRequest) -> None:
        kind, namespace, name = _split(request.preemptor)
        involved: JSON = {"kind": kind, "name": name, "namespace": namespace}
        pod = self.state.pods.get(f"{namespace}/{name}") if kind == "Pod" else None
        if pod is not None:
            involved.update(apiVersion="v1", uid=pod.uid)
        elif self._is_kueue(request.preemptor) and self.kueue_version:
            wl = self.state.workloads[f"{namespace}/{name}"]
            involved.update(apiVersion=f"kueue.x-k8s.io/{self.kueue_version}", uid=wl.uid)
        message = (
            f"gangpreempt plan {request.plan_id} preempts victims to make room for this {kind}"
        )
        await self.recorder.record(involved, "PreemptionActuated", message, request.plan_id)


__all__ = ["KubeSink"]
