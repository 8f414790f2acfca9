"""Kueue's admission checks as gangpreempt takes part in them (Kueue KEP-993's
protocol, as Kueue's code has it): an ``AdmissionCheck`` names the controller that
decides it; a ClusterQueue lists the checks its workloads must pass; a Workload that
holds a quota reservation carries each check's state, and Kueue admits it only once
every one is ``Ready``.

A ClusterQueue that lists an AdmissionCheck whose ``controllerName`` is
``CONTROLLER_NAME`` is *managed*: gangpreempt, not Kueue, is the preemption authority
for its workloads, and a workload of it that Kueue reserved quota for starts only when
gangpreempt says its whole placement is confirmed."""

from __future__ import annotations

import msgspec

CONTROLLER_NAME = "gangpreempt.io/placement"
# The annotation on a managed ClusterQueue that holds the preemption policy gangpreempt
# applies (Kueue's own stanza says Never, so that Kueue stays out).
PREEMPTION_ANNOTATION = "gangpreempt.io/preemption"

# Put on a managed Workload's pods by the check's podSetUpdates (Kueue copies them into
# the pod templates): links the pods to their Workload, and marks them for the gate.
WORKLOAD_LABEL = "gangpreempt.io/workload"

# The scheduling gate gangpreempt's pods carry from creation (a MutatingAdmissionPolicy
# in deploy/k8s adds it): kube-scheduler neither places them nor preempts for them until
# gangpreempt narrows each to its planned node and removes it.
GATE = "gangpreempt.io/placement"
# A pod that stands, in gangpreempt's view of the nodes, for a pod of a managed Workload
# whose check said Ready but which is not bound yet (Kueue creates the pods once it
# admits, and they wait gated for their node): it holds the planned node meanwhile, so
# that nothing else is placed there. Never a real object: the loader makes it.
PLACEHOLDER_LABEL = "gangpreempt.io/placeholder"
POD_SET_LABEL = "kueue.x-k8s.io/podset"  # Kueue's label on a pod set's pods
# On a managed Kueue Workload's pods (from the check's podSetUpdates): the nodes planned
# for their pod set, comma-separated, one per pod.
PLANNED_NODES_ANNOTATION = "gangpreempt.io/planned-nodes"
# How the message of a preemption mark gangpreempt's actuator writes names its plan
# (``<mark><plan id>``): shadow mode tells gangpreempt's marks from the peers' by it.
GANGPREEMPT_MARK = "gangpreempt plan "

PENDING = "Pending"
READY = "Ready"
RETRY = "Retry"
REJECTED = "Rejected"
CHECK_STATES = (PENDING, READY, RETRY, REJECTED)
ACTIVE = "Active"  # the AdmissionCheck's condition its controller sets


class AdmissionCheck(msgspec.Struct, frozen=True):
    name: str
    controller_name: str
    active: bool = False  # its ``Active`` condition is True

    @property
    def ours(self) -> bool:
        return self.controller_name == CONTROLLER_NAME


class CheckState(msgspec.Struct, frozen=True):
    """One entry of a Workload's ``status.admissionChecks``."""

    name: str
    state: str = PENDING
    retry_count: int = 0
    # gangpreempt's check: each pod set's planned nodes, from its podSetUpdates'
    # PLANNED_NODES_ANNOTATION (one node per pod)
    planned: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)


__all__ = [
    "ACTIVE",
    "CHECK_STATES",
    "CONTROLLER_NAME",
    "GANGPREEMPT_MARK",
    "GATE",
    "PENDING",
    "PLACEHOLDER_LABEL",
    "PLANNED_NODES_ANNOTATION",
    "POD_SET_LABEL",
    "PREEMPTION_ANNOTATION",
    "READY",
    "REJECTED",
    "RETRY",
    "WORKLOAD_LABEL",
    "AdmissionCheck",
    "CheckState",
]
