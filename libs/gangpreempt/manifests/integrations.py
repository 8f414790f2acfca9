"""What users submit to Kueue, read as Kueue's integrations read it: a ``batch/v1`` Job,
a JobSet, a Kubeflow PyTorchJob, a plain Pod or a pod group, each with the
``kueue.x-k8s.io/queue-name`` label. Each becomes a ``Submitted``: the pod sets of the
Workload Kueue would create for it (``derive`` in ``manifests.deriving`` makes the
Workload once every object is read)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gangpreempt.manifests.fields import Fields
from gangpreempt.manifests.podspec import constraints, pod_requests
from gangpreempt.model.workloads import (
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    PodSet,
    PriorityClassRef,
)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"

JOB = ("batch/v1", "Job")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
PYTORCH_JOB = ("kubeflow.org/v1", "PyTorchJob")
INTEGRATIONS = (JOB, JOBSET, PYTORCH_JOB)
KINDS = tuple(kind for _, kind in INTEGRATIONS)
# Kubeflow's replica order: the pod sets of a PyTorchJob, master first.
PYTORCH_REPLICAS = ("Master", "Worker")


@dataclass(frozen=True)
class Submitted:
    """An object a Kueue integration manages, with the pod sets of its Workload."""

    kind: str
    namespace: str
    name: str
    queue: str
    pod_sets: tuple[PodSet, ...]
    priority_class: PriorityClassRef | None
    # Where the priority class came from (an object that names a missing class is left
    # out, as Kueue creates no Workload for it): "metadata.labels[...]" or the template's.
    priority_field: str
    created: datetime | None
    pending: bool  # not started: suspended, or no status yet
    location: str  # file, document and line, for messages

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def workload_name(self) -> str:
        """The derived Workload's name: Kueue's ``<kind>-<name>`` prefix (Kueue appends
        a hash of the object's uid, which a file does not have)."""
        return f"{self.kind.lower()}-{self.name}"


def queue_name(meta: Fields) -> str | None:
    """The LocalQueue an object is submitted to: the label, else the older annotation."""
    for key in ("labels", "annotations"):
        value = meta.text_map(key).get(QUEUE_LABEL)
        if value:
            return value
    return None


def priority(meta: Fields, specs: list[Fields]) -> tuple[PriorityClassRef | None, str]:
    """As Kueue resolves it: the WorkloadPriorityClass label, else the first pod
    template's ``priorityClassName`` (a PriorityClass), else none (the global default)."""
    label = meta.text_map("labels").get(PRIORITY_LABEL)
    if label:
        return PriorityClassRef(WORKLOAD_PRIORITY_CLASS, label), f"metadata.labels.{PRIORITY_LABEL}"
    for spec in specs:
        name = spec.opt_text("priorityClassName")
        if name:
            return PriorityClassRef(PRIORITY_CLASS, name), f"{spec.path}.priorityClassName"
    return None, ""


def _template_spec(template: Fields) -> Fields:
    spec = template.map("spec", required=True)
    assert spec is not None
    return spec


# A pod set with the template spec it was read from (its priorityClassName counts).
PodSets = list[tuple[PodSet, Fields]]


def _pod_set(
    name: str, count: int, spec: Fields, min_count: int | None = None
) -> tuple[PodSet, Fields]:
    pod_set = PodSet(
        name=name,
        count=count,
        min_count=min_count if min_count is not None and min_count < count else None,
        requests=pod_requests(spec),
        scheduling=constraints(spec),
    )
    return pod_set, spec


def _job_pods(spec: Fields) -> int:
    """Kueue's pod count of a Job: parallelism (default 1), at most completions."""
    parallelism = spec.integer("parallelism", minimum=0)
    count = 1 if parallelism is None else parallelism
    completions = spec.integer("completions", minimum=0)
    if completions is not None and completions < count:
        count = completions
    return count


def _started(kind: str, status: Fields) -> bool:
    """Has it run (a Job or PyTorchJob has a start time, a JobSet a status of its jobs)?"""
    if kind == "JobSet":
        return bool(status.raw("replicatedJobsStatus"))
    return status.has("startTime") or bool(status.integer("active", minimum=0))


def job(meta: Fields, spec: Fields) -> PodSets:
    """A ``batch/v1`` Job's one pod set, ``main``: parallelism pods (at most completions);
    ``kueue.x-k8s.io/job-min-parallelism`` is its minimum count (partial admission)."""
    template = spec.map("template", required=True)
    assert template is not None
    minimum = meta.map_or_empty("annotations").integer(MIN_PARALLELISM, minimum=1)
    return [_pod_set("main", _job_pods(spec), _template_spec(template), minimum)]


def jobset(spec: Fields) -> PodSets:
    """A JobSet: a pod set per replicated job, replicas times the job's pod count."""
    out = []
    for rj in spec.maps("replicatedJobs", required=True):
        replicas = rj.integer("replicas", minimum=0)
        job_template = rj.map("template", required=True)
        assert job_template is not None
        job_spec = job_template.map("spec", required=True)
        assert job_spec is not None
        template = job_spec.map("template", required=True)
        assert template is not None
        count = (1 if replicas is None else replicas) * _job_pods(job_spec)
        if count >= 2**31:  # each factor is an int32; their product need not be
            rj.fail("replicas", f"replicas times the job's pods is {count}, beyond an int32")
        out.append(_pod_set(rj.text("name", required=True), count, _template_spec(template)))
    if not out:
        spec.fail("replicatedJobs", "expected at least one replicated job")
    return out


def pytorch_job(spec: Fields) -> PodSets:
    """A PyTorchJob: a pod set per replica type (``master``, ``worker``), replicas pods."""
    replica_specs = spec.map("pytorchReplicaSpecs", required=True)
    assert replica_specs is not None
    out = []
    for rtype in sorted(replica_specs.data, key=_replica_order):
        rs = replica_specs.map(str(rtype), required=True)
        assert rs is not None
        replicas = rs.integer("replicas", minimum=0)
        template = rs.map("template", required=True)
        assert template is not None
        count = 1 if replicas is None else replicas
        out.append(_pod_set(str(rtype).lower(), count, _template_spec(template)))
    if not out:
        spec.fail("pytorchReplicaSpecs", "expected at least one replica type")
    return out


def _replica_order(rtype: object) -> tuple[int, str]:
    text = str(rtype)
    return (PYTORCH_REPLICAS.index(text) if text in PYTORCH_REPLICAS else 2, text)


def submitted(
    kind: str,
    meta: Fields,
    namespace: str,
    name: str,
    spec: Fields,
    status: Fields,
    queue: str,
    location: str,
) -> Submitted:
    """The ``Submitted`` of a Job, JobSet or PyTorchJob with a queue name."""
    if kind == "Job":
        read = job(meta, spec)
        suspended = spec.flag("suspend", False)
    elif kind == "JobSet":
        read = jobset(spec)
        suspended = spec.flag("suspend", False)
    else:
        read = pytorch_job(spec)
        suspended = spec.map_or_empty("runPolicy").flag("suspend", False)
    pod_sets = tuple(pod_set for pod_set, _spec in read)
    ref, field = priority(meta, [template for _pod_set, template in read])
    return Submitted(
        kind=kind,
        namespace=namespace,
        name=name,
        queue=queue,
        pod_sets=pod_sets,
        priority_class=ref,
        priority_field=field,
        created=meta.time("creationTimestamp"),
        pending=suspended or not _started(kind, status),
        location=location,
    )


__all__ = [
    "INTEGRATIONS",
    "KINDS",
    "MIN_PARALLELISM",
    "POD_GROUP_LABEL",
    "POD_GROUP_TOTAL",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "Submitted",
    "priority",
    "queue_name",
    "submitted",
]
