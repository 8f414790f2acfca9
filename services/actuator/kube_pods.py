"""Victim pods, one write each: deleted with the pod's own grace period after the
``DisruptionTarget`` condition is set (as kube-scheduler's preemption does), evicted
through the Eviction API (a 429 from a PodDisruptionBudget is retried, not a failure), or
labelled for soft eviction. In ``delete`` mode, when the victim's pods are all the
running pods of one batch/v1 Job, the Job is suspended instead, so its controller removes
the pods and does not re-create them.

Every pod is checked to be the one the plan chose before the first write, so a gang is
not half-evicted when one of its pods turns out replaced.

A victim's pods are written concurrently, at most ``concurrency`` at a time for the
whole sink (``GANGPREEMPT_EVICTION_CONCURRENCY``): a gang of 64 pods goes in a few round
trips, not 64. Each pod's write is still checked, fenced (the lease is checked before
each one) and retried on its own (409, 429 with the server's Retry-After, 5xx) within the
victim's one budget; the first failure that is not retried (stale, fenced, refused)
stops the victim's other writes not yet sent. The fencing window (a write checked just
before the lease was lost still lands) is as wide as the writes in flight: at most
``concurrency``; every write is idempotent and carries its preconditions, so a new
holder acting on the same plan meanwhile writes nothing twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from gangpreempt.errors import Fenced
from gangpreempt.model.pods import SOFT_EVICTION_LABEL
from services import simwire
from services.kube.access import JOBS, POD_EVICTIONS, POD_STATUS, PODS
from services.kube.client import JSON, MERGE_PATCH, ApiError, KubeApi, path_of
from services.kube.recording import Recorder, involved_object
from services.kube.writing import RETRY_FOR, check_uid, now_rfc3339, preconditions, retrying

JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
DEFAULT_GRACE = 30

PodRef = tuple[str, str]  # ("ns/name", the uid the plan was made for, or "")
JobRef = tuple[str, str]  # ("ns/name", uid)
# kube-scheduler's reason on the DisruptionTarget condition of a pod it preempts.
PREEMPTED_BY_SCHEDULER = "PreemptionByScheduler"


def victim_message(request: simwire.EvictRequest, what: str) -> str:
    because = f" ({request.why})" if request.why else ""
    return (
        f"{what} by gangpreempt plan {request.plan_id} to make room for "
        f"{request.preemptor}: {request.reason}{because}"
    )


def victim_pods(request: simwire.EvictRequest) -> list[PodRef]:
    """The pods a victim is made of, with the uid of each the plan saw."""
    if not request.pods and request.ref.startswith("Pod/"):
        return [(request.ref.removeprefix("Pod/"), request.uid)]
    uids = list(request.pod_uids) + [""] * len(request.pods)
    return [(r.removeprefix("Pod/"), uid) for r, uid in zip(request.pods, uids, strict=False)]


def _job_controller(pod: JSON) -> dict[str, Any] | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            owner.get("controller")
            and owner.get("kind") == "Job"
            and str(owner.get("apiVersion", "")).startswith("batch/")
        ):
            return dict(owner)
    return None


DEFAULT_CONCURRENCY = 16  # pod writes in flight at once (GANGPREEMPT_EVICTION_CONCURRENCY)

T = TypeVar("T")


async def each(
    items: Iterable[T], gate: asyncio.Semaphore, fn: Callable[[T], Awaitable[bool]]
) -> bool:
    """``fn`` on every item, as many at once as ``gate`` lets through; True if any did
    write (each answers whether it did).
    The first exception cancels the writes not yet done and is raised as it is."""

    async def one(item: T) -> bool:
        async with gate:
            return await fn(item)

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    try:
        return any(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class PodEvictor:
    def __init__(
        self,
        api: KubeApi,
        recorder: Recorder,
        mode: str,
        fenced: Callable[[], bool] = lambda: False,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        self.api = api
        self.recorder = recorder
        self.mode = mode  # GANGPREEMPT_POD_EVICTION: delete | eviction | soft-eviction
        self.fenced = fenced
        self.gate = asyncio.Semaphore(max(1, concurrency))  # pod writes in flight, sink-wide

    async def evict(self, request: simwire.EvictRequest) -> bool:
        """True if anything was written, False if it was all done already. One retry
        budget for the whole victim, however many pods it has."""
        pods = victim_pods(request)
        mode = request.mode or self.mode
        deadline = time.monotonic() + RETRY_FOR
        live = await retrying(request.ref, lambda: self.check_pods(pods), deadline=deadline)
        if mode == "delete":
            job = await retrying(request.ref, lambda: self.whole_job(pods, live), deadline=deadline)
            if job is not None:
                suspended = await retrying(
                    f"Job {job[0]}", lambda: self.suspend_job(request, job), deadline=deadline
                )
                if suspended is not None:
                    return suspended
                # The Job is gone (orphaned pods): the pods go one by one.

        async def pod(ref: PodRef) -> bool:
            key, uid = ref
            return await retrying(
                f"Pod {key}", lambda: self.evict_pod(request, mode, key, uid), deadline=deadline
            )

        return await each(pods, self.gate, pod)

    async def check_pods(self, pods: list[PodRef]) -> dict[str, JSON | None]:
        """Each pod as it is now (None: gone); raise ``Stale`` if any pod that still
        exists is not the one the plan chose."""
        live: dict[str, JSON | None] = {}

        async def read(ref: PodRef) -> bool:
            key, uid = ref
            obj = live[key] = await self.get_pod(key)
            if obj is not None:
                check_uid(f"Pod {key}", obj, uid)
            return False

        await each(pods, self.gate, read)  # read concurrently too, within the same bound
        return live

    async def get_pod(self, key: str) -> JSON | None:
        namespace, _, name = key.partition("/")
        try:
            return await self.api.request("GET", PODS, "get", path_of(PODS, "v1", namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def whole_job(self, pods: list[PodRef], live: dict[str, JSON | None]) -> JobRef | None:
        """(``ns/name``, uid) of the batch/v1 Job whose running pods are exactly the
        victim's (``live``: the pods as just read), or None."""
        owners: set[tuple[str, str, str]] = set()
        for key, _ in pods:
            obj = live.get(key)
            controller = _job_controller(obj) if obj is not None else None
            if controller is None:
                return None
            owners.add((key.split("/", 1)[0], controller["name"], controller.get("uid", "")))
        if len(owners) != 1:
            return None
        namespace, name, uid = owners.pop()
        listed = await self.api.request("GET", PODS, "list", path_of(PODS, "v1", namespace))
        victims = {k for k, _ in pods}
        for item in listed.get("items") or []:
            meta = item.get("metadata") or {}
            labels = meta.get("labels") or {}
            mine = any(labels.get(label) == uid for label in JOB_UID_LABELS) or any(
                o.get("uid") == uid for o in meta.get("ownerReferences") or []
            )
            running = (item.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            if mine and running and f"{namespace}/{meta.get('name')}" not in victims:
                return None  # the Job runs pods the plan does not take: evict pods only
        return f"{namespace}/{name}", uid

    async def suspend_job(self, request: simwire.EvictRequest, job: JobRef) -> bool | None:
        """Suspend the Job (the one the pods name: same uid); None if it is gone."""
        key, uid = job
        namespace, _, name = key.partition("/")
        try:
            obj = await self.api.request("GET", JOBS, "get", path_of(JOBS, "v1", namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        check_uid(f"Job {key}", obj, uid)
        if (obj.get("spec") or {}).get("suspend"):
            return False
        await self.api.request(
            "PATCH",
            JOBS,
            "patch",
            path_of(JOBS, "v1", namespace, name),
            body={"metadata": preconditions(obj), "spec": {"suspend": True}},
            content_type=MERGE_PATCH,
        )
        await self.recorder.record(
            involved_object("batch/v1", "Job", namespace, name, uid),
            "Preempted",
            victim_message(request, "Suspended"),
            request.plan_id,
        )
        return True

    async def mark_disruption(self, request: simwire.EvictRequest, obj: JSON) -> JSON:
        """The pod with ``DisruptionTarget`` (reason PreemptionByScheduler) on its status,
        as kube-scheduler sets it before deleting a victim: Job pod failure policies and
        backoff limits then see a disruption, not a failure."""
        status = obj.get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        if any(c.get("type") == "DisruptionTarget" for c in conditions):
            return obj
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": PREEMPTED_BY_SCHEDULER,
                "message": victim_message(request, "Preempting"),
                "lastTransitionTime": now_rfc3339(),
            }
        )
        meta = obj.get("metadata") or {}
        path = path_of(POD_STATUS, "v1", str(meta.get("namespace", "")), str(meta.get("name", "")))
        body = {"metadata": preconditions(obj), "status": {"conditions": conditions}}
        return await self.api.request(
            "PATCH", POD_STATUS, "patch", path, body=body, content_type=MERGE_PATCH
        )

    async def evict_pod(self, request: simwire.EvictRequest, mode: str, key: str, uid: str) -> bool:
        """One attempt (re-read, check, write) for one pod."""
        if self.fenced():  # the lease went while a gang's pods were being written
            raise Fenced(f"Pod {key} not written: the lease is lost")
        obj = await self.get_pod(key)
        if obj is None:
            return False  # gone already
        check_uid(f"Pod {key}", obj, uid)
        meta = obj.get("metadata") or {}
        namespace, _, name = key.partition("/")
        involved = involved_object("v1", "Pod", namespace, name, str(meta.get("uid", "")))
        path = path_of(PODS, "v1", namespace, name)
        if mode == "soft-eviction":
            if SOFT_EVICTION_LABEL in (meta.get("labels") or {}):
                return False
            label = {SOFT_EVICTION_LABEL: f"plan-{request.plan_id}"}
            body: JSON = {"metadata": {**preconditions(obj), "labels": label}}
            await self.api.request(
                "PATCH", PODS, "patch", path, body=body, content_type=MERGE_PATCH
            )
            message = victim_message(request, "Marked for eviction")
            await self.recorder.record(involved, "SoftEvicted", message, request.plan_id)
            return True
        if meta.get("deletionTimestamp"):
            return False  # terminating already
        grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        options: JSON = {"gracePeriodSeconds": grace, "preconditions": preconditions(obj)}
        try:
            if mode == "eviction":
                eviction = {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": name, "namespace": namespace},
                    "deleteOptions": options,
                }
                subresource = path_of(POD_EVICTIONS, "v1", namespace, name)
                await self.api.request("POST", POD_EVICTIONS, "create", subresource, body=eviction)
            else:
                marked = await self.mark_disruption(request, obj)
                options["preconditions"] = preconditions(marked)
                delete = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
                await self.api.request("DELETE", PODS, "delete", path, body=delete)
        except ApiError as exc:
            if exc.status == 404:
                return False  # went away in between
            raise
        await self.recorder.record(
            involved, "Preempted", victim_message(request, "Preempted"), request.plan_id
        )
        return True


__all__ = ["PodEvictor", "victim_message", "victim_pods"]
