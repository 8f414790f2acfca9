"""Proposals, and the actuator's validation of a confirmed one run alone in a test: a
Driver on a replica of ``state`` whose sink stops at the live read (``ReachedLiveRead``),
so that a test sees whether the plan was dropped before any read of the cluster."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from types import SimpleNamespace

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.planning.legitimacy import PROTECTED_NAMESPACES
from services.actuator.driving import Driver


class ReachedLiveRead(Exception):
    """The actuator's validation let the plan through to its live read."""


class _Replica:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.pods = PodIndex(state)

    async def wait_seq(self, seq: int) -> None:
        return None


class _Sink:
    async def read(self, refs: object) -> object:
        raise ReachedLiveRead


def proposal(
    preemptor: str,
    victims: Sequence[events.PlannedVictim],
    placement: Mapping[str, str],
    cluster_queue: str = "",
    pod_sets: tuple[str, ...] = (),
) -> events.PlanProposed:
    """A proposal as the victims service (or a forger) would publish it."""
    return events.PlanProposed(
        id="proposed-p",
        occurred_at=datetime.now(UTC),
        plan_id="p",
        request_id="r",
        preemptor=preemptor,
        preemptor_uid="",
        cluster_queue=cluster_queue,
        pod_sets=pod_sets,
        flavors={},
        victims=tuple(victims),
        placement=dict(placement),
    )


async def dropped_before_reading(
    state: ClusterState,
    proposal: events.PlanProposed,
    protected: Collection[str] = PROTECTED_NAMESPACES,
) -> str | None:
    """Why the actuator drops the confirmed ``proposal`` before reading the cluster, or
    None when it goes on to its live read."""
    driver = Driver(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        _Replica(state),  # type: ignore[arg-type]
        _Sink(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        lambda: datetime.now(UTC),
        "actuator/test",
        "eviction",
        10.0,
        protected,
    )
    record = SimpleNamespace(proposal=proposal, updated_at=datetime.now(UTC))
    try:
        reason = await driver.validate(record)  # type: ignore[arg-type]
    except ReachedLiveRead:
        return None
    assert reason is not None, "validate() returned nothing without reading"
    return reason


__all__ = ["ReachedLiveRead", "dropped_before_reading", "proposal"]
