"""Garbage collection and the services' decisions. Once the starting state is in, what is alive is taken out of the garbage collector's
full collections (``services.heap``): a full collection that falls in a
decision then scans what was made since, not the whole state. Each collection is timed
(``telemetry.gcpauses``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from gangpreempt.telemetry.gcpauses import watch_gc_pauses
from services.heap import LoadFreezer, freeze_heap


class Thing:
    pass


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the suite's objects go back to the collector


def tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


@pytest.mark.usefixtures("unfrozen")
def test_what_lives_at_the_freeze_is_out_of_the_collections_and_later_objects_are_in() -> None:
    before = Thing()
    assert tracked(before)
    freeze_heap()
    after = Thing()
    assert not tracked(before)
    assert tracked(after)
    assert gc.get_freeze_count() > 0


@pytest.mark.usefixtures("unfrozen")
def test_garbage_is_collected_before_the_freeze() -> None:
    cycle = Thing()
    cycle.self = cycle  # type: ignore[attr-defined]
    ident = id(cycle)
    del cycle
    freeze_heap()
    assert not any(id(o) == ident and isinstance(o, Thing) for o in gc.get_objects())
    gc.unfreeze()
    assert not any(id(o) == ident and isinstance(o, Thing) for o in gc.get_objects())


def full_collections() -> tuple[float, float]:
    """How many full collections were timed, and their seconds in all."""
    labels = {"generation": "2"}
    count = REGISTRY.get_sample_value("gangpreempt_gc_pause_seconds_count", labels)
    total = REGISTRY.get_sample_value("gangpreempt_gc_pause_seconds_sum", labels)
    return count or 0.0, total or 0.0


def test_each_collection_is_timed_by_generation() -> None:
    watch = watch_gc_pauses()
    try:
        assert watch_gc_pauses() is watch  # installed once
        before = full_collections()
        gc.collect()
        after = full_collections()
        assert after[0] == before[0] + 1
        assert after[1] > before[1]
    finally:
        gc.callbacks.remove(watch)


@pytest.mark.usefixtures("unfrozen")
def test_a_loading_replica_is_frozen_as_it_grows_and_once_more_when_complete() -> None:
    freezer = LoadFreezer(every=3)
    first = Thing()
    freezer("Pod", None, first)
    freezer("Pod", None, Thing())
    assert tracked(first)  # two changes: not yet
    freezer("Pod", None, Thing())
    assert not tracked(first)
    fourth = Thing()
    freezer("Pod", None, fourth)
    assert tracked(fourth)
    freezer("StateComplete", None, None)
    assert not tracked(fourth)
    assert not freezer.loading
    later = Thing()
    for _ in range(6):  # complete: changes no longer freeze anything
        freezer("Pod", None, later)
    assert tracked(later)
