"""The nodes' room by priority (``simulation.podroom``): the bounds the replay parks pods
and reserved gangs on are optimistic (a terminating pod counts as gone)."""

from __future__ import annotations

import msgspec
import pytest

from gangpreempt.model.pods import Pod
from gangpreempt.simulation.podroom import PodRoom

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"


def _pod(name: str, node: str, gpus: int, priority: int) -> Pod:
    return Pod(
        namespace="t",
        name=name,
        requests={GPU: gpus},
        node_name=node,
        priority=priority,
    )


def test_room_by_priority_and_placement_bounds() -> None:
    room = PodRoom({"n1": 8, "n2": 8}, GPU)
    a = _pod("a", "n1", 6, 100)
    b = _pod("b", "n2", 4, 1000)
    room.changed(None, a)
    room.changed(None, b)
    assert room.most_free() == 4  # n2: 8 - 4
    assert room.most_free(1000) == 8  # a (100) could be preempted
    assert room.most_free(100) == 4
    assert room.cannot_place([5])
    assert not room.cannot_place([4])
    assert room.cannot_place([4, 4])  # 2 + 4 free in all
    room.changed(a, msgspec.structs.replace(a, terminating=True))  # counts as gone
    assert room.most_free() == 8
    assert not room.cannot_place([4, 4])
    room.changed(msgspec.structs.replace(a, terminating=True), None)
    assert room.free_total() == 12
