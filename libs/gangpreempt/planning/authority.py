"""Which pending workloads gangpreempt decides for (``GANGPREEMPT_AUTHORITY``): all of
them where it is the only scheduler (the sim, ``plan``), or, in a real cluster beside
Kueue and kube-scheduler, only the managed ones: a Kueue Workload whose ClusterQueue
lists gangpreempt's AdmissionCheck (``Workload.placement_check``), a pod or pod gang
outside Kueue in a namespace labelled ``gangpreempt.io/authority: enabled``. The others
are the peers' to decide; they still count, in quota and on the nodes."""

from __future__ import annotations

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.workloads import Workload

ALL = "all"
ADMISSION_CHECK = "admission-check"
AUTHORITIES = (ALL, ADMISSION_CHECK)
AUTHORITY_LABEL = "gangpreempt.io/authority"
ENABLED = "enabled"


def decides_workload(wl: Workload, authority: str) -> bool:
    return authority == ALL or bool(wl.placement_check)


def decides_namespace(state: ClusterState, namespace: str, authority: str) -> bool:
    """A pod or pod gang outside Kueue, by its namespace."""
    return authority == ALL or state.namespace_labels(namespace).get(AUTHORITY_LABEL) == ENABLED


__all__ = [
    "ADMISSION_CHECK",
    "ALL",
    "AUTHORITIES",
    "AUTHORITY_LABEL",
    "ENABLED",
    "decides_namespace",
    "decides_workload",
]
