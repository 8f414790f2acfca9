"""A replayed job's objects in each of its states, as the Kubernetes objects would say
them: read once from ``world.job_objects`` by the manifest reader (so the replay's
objects are the ones ``plan`` reads), then moved from state to state:

- **pending**: the Workload without an admission, its pods unbound;
- **admitted**: the Workload admitted (``QuotaReserved`` and ``Admitted``), its pods
  bound to their nodes (or, under ``gang-unconfirmed``, still unbound: quota reserved
  while the pods wait for room);
- **evicting**: the Workload's ``Evicted`` and ``Preempted`` conditions set, its pods
  terminating (still on their nodes, still holding quota, for the termination delay);
- back to pending once the pods are gone: new pods (new uids) are created.

Each move gives the objects a new resourceVersion, as the API server would."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

import msgspec

from gangpreempt.manifests import load
from gangpreempt.manifests.fields import parse_time
from gangpreempt.model.pods import Pod
from gangpreempt.model.workloads import (
    ADMITTED,
    EVICTED,
    PREEMPTED,
    QUOTA_RESERVED,
    Admission,
    Condition,
    PodSetAssignment,
    Workload,
)
from gangpreempt.simulation.trace import Job
from gangpreempt.simulation.world import FLAVOR, GPU, job_objects


class JobObjects:
    """One job's Workload (``None`` without Kueue) and pods, in their current state."""

    __slots__ = ("incarnation", "pods", "version", "workload")

    def __init__(
        self, job: Job, arrived: datetime, kueue: bool, checkpoint_interval_s: int | None = None
    ) -> None:
        wl, pods = _read(job, arrived, checkpoint_interval_s)
        self.version = 1
        self.incarnation = 0
        self.workload: Workload | None = self._v(wl) if kueue else None
        self.pods: list[Pod] = [
            p if kueue else msgspec.structs.replace(p, kueue_workload="") for p in pods
        ]

    def _v(self, wl: Workload) -> Workload:
        self.version += 1
        return msgspec.structs.replace(wl, resource_version=str(self.version))

    # -- the Workload ------------------------------------------------------------------------
    def admitted(
        self,
        at: datetime,
        cluster_queue: str = "",
        flavors: Mapping[str, Mapping[str, str]] | None = None,
    ) -> Workload:
        """Admitted to ``cluster_queue`` (default: the LocalQueue's name) with the flavors
        Kueue assigned (pod set -> resource -> flavor; default: the replay's one flavor)."""
        wl = self.workload
        assert wl is not None
        chosen = flavors or {}
        admission = Admission(
            cluster_queue=cluster_queue or wl.queue_name,
            pod_set_assignments=tuple(
                PodSetAssignment(
                    name=ps.name,
                    flavors=dict(chosen.get(ps.name) or {GPU: FLAVOR}),
                    resource_usage={GPU: ps.requests[GPU] * ps.count},
                    count=ps.count,
                )
                for ps in wl.pod_sets
            ),
        )
        conditions = (
            *_preempted(wl),
            *(Condition(t, "True", t, at) for t in (QUOTA_RESERVED, ADMITTED)),
        )
        self.workload = self._v(
            msgspec.structs.replace(wl, admission=admission, conditions=conditions)
        )
        return self.workload

    def evicting(self, at: datetime) -> Workload:
        wl = self.workload
        assert wl is not None
        kept = tuple(c for c in wl.conditions if c.type != PREEMPTED)
        marks = (Condition(EVICTED, "True", PREEMPTED, at), Condition(PREEMPTED, "True", "", at))
        self.workload = self._v(msgspec.structs.replace(wl, conditions=(*kept, *marks)))
        return self.workload

    def requeued(self) -> Workload:
        wl = self.workload
        assert wl is not None
        self.workload = self._v(
            msgspec.structs.replace(wl, admission=None, conditions=_preempted(wl))
        )
        return self.workload

    # -- the pods ----------------------------------------------------------------------------
    def bound(self, index: int, node: str, at: datetime) -> Pod:
        pod = self.pods[index]
        self.pods[index] = msgspec.structs.replace(
            pod, node_name=node, nominated_node="", start_time=at, resource_version=self._rv()
        )
        return self.pods[index]

    def nominated(self, index: int, node: str) -> Pod:
        pod = self.pods[index]
        self.pods[index] = msgspec.structs.replace(
            pod, nominated_node=node, resource_version=self._rv()
        )
        return self.pods[index]

    def terminating(self, index: int) -> Pod:
        pod = self.pods[index]
        self.pods[index] = msgspec.structs.replace(
            pod, terminating=True, resource_version=self._rv()
        )
        return self.pods[index]

    def recreated(self, index: int) -> Pod:
        """The pod after its predecessor terminated: a new one, unbound."""
        pod = self.pods[index]
        self.incarnation += 1
        self.pods[index] = msgspec.structs.replace(
            pod,
            uid=f"{pod.name}~{self.incarnation}",
            node_name="",
            nominated_node="",
            start_time=None,
            terminating=False,
            resource_version=self._rv(),
        )
        return self.pods[index]

    def _rv(self) -> str:
        self.version += 1
        return str(self.version)


def read_job(
    job: Job, arrived: datetime, checkpoint_interval_s: int | None = None
) -> tuple[Workload, list[Pod]]:
    """The job's pending Workload and pods (index order), as the manifest reader reads
    ``world.job_objects``."""
    objects = job_objects(job, arrived, checkpoint_interval_s=checkpoint_interval_s)
    state = load([], objects, "replay", references=False).state
    wl = next(iter(state.workloads.values()))
    pods = sorted(state.pods.values(), key=lambda p: int(p.name.rsplit("-", 1)[1]))
    return wl, pods


# A job read once per kind (queue, priority, pods, checkpoint interval) under a stand-in
# name and time; a job of that kind is that one with its name and time put in.
_STAND_IN = "gangpreempt-stand-in-job"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a name read as it is written
_STAND_IN_AT = datetime(2000, 1, 1, tzinfo=UTC)
_Kind = tuple[str, int, tuple[int, ...], int | None]
_read_kinds: dict[_Kind, tuple[Workload, list[Pod]] | None] = {}


def _read(
    job: Job, arrived: datetime, checkpoint_interval_s: int | None
) -> tuple[Workload, list[Pod]]:
    """``read_job``, from the job's kind read once: the name is in the Workload's name
    and uid and in the pods' names, uids and Workload annotation only, the arrival time
    in the Workload's creation time only (checked when the kind is read; a kind where
    they show anywhere else is read job by job, as is a job whose name is not plain)."""
    if not _PLAIN_NAME.fullmatch(job.job_id):
        return read_job(job, arrived, checkpoint_interval_s)
    kind = (job.queue, job.priority, job.pods, checkpoint_interval_s)
    if kind not in _read_kinds:
        stand_in = msgspec.structs.replace(job, job_id=_STAND_IN)
        _read_kinds[kind] = _stand_in(*read_job(stand_in, _STAND_IN_AT, checkpoint_interval_s))
    read = _read_kinds[kind]
    if read is None:
        return read_job(job, arrived, checkpoint_interval_s)
    wl, pods = read
    name = job.job_id
    return (
        msgspec.structs.replace(
            wl, name=name, uid=name, creation_timestamp=parse_time(_stamp(arrived))
        ),
        [
            msgspec.structs.replace(
                p,
                name=p.name.replace(_STAND_IN, name),
                uid=p.uid.replace(_STAND_IN, name),
                kueue_workload=p.kueue_workload.replace(_STAND_IN, name),
            )
            for p in pods
        ],
    )


def _stamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _stand_in(wl: Workload, pods: list[Pod]) -> tuple[Workload, list[Pod]] | None:
    """The stand-in job's objects, or None when its name or time shows anywhere but
    where ``_read`` puts the job's."""
    ns = wl.namespace
    ok = (
        wl.name == wl.uid == _STAND_IN
        and wl.creation_timestamp == parse_time(_stamp(_STAND_IN_AT))
        and all(
            p.name == p.uid == f"{_STAND_IN}-{i}" and p.kueue_workload == f"{ns}/{_STAND_IN}"
            for i, p in enumerate(pods)
        )
    )
    blanked = [
        msgspec.structs.replace(wl, name="", uid="", creation_timestamp=None),
        *(msgspec.structs.replace(p, name="", uid="", kueue_workload="") for p in pods),
    ]
    text = msgspec.json.encode(blanked)
    if not ok or any(m in text for m in (_STAND_IN.encode(), b"2000-01-01", b"946684800")):
        return None
    return wl, pods


def _preempted(wl: Workload) -> tuple[Condition, ...]:
    """The workload's ``Preempted`` condition, if it has one: kept when it is requeued
    and admitted again (the re-preemption guard reads its time)."""
    return tuple(c for c in wl.conditions if c.type == PREEMPTED)


def index_of(pod_ref: str) -> int:
    """``Pod/trace/<job>-<i>`` -> ``i``."""
    return int(pod_ref.rsplit("-", 1)[1])


def job_of(ref: str) -> str:
    """The job of a Workload ref (``Workload/trace/<job>``) or pod ref (``Pod/trace/<job>-<i>``)."""
    name = ref.rsplit("/", 1)[1]
    return name if ref.startswith("Workload/") else name.rsplit("-", 1)[0]


def placement_of(placement: Mapping[str, str]) -> dict[int, str]:
    """A decision's placement (pod ref -> node) by pod index."""
    return {index_of(ref): node for ref, node in placement.items()}


__all__ = ["JobObjects", "index_of", "job_of", "placement_of", "read_job"]
