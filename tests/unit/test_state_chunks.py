"""STATE chunks: how changes are cut into chunks, and which chunks the ledger lets go
(never one holding an object's newest stored version; every other one when told in
stream order)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from gangpreempt import events
from gangpreempt.bus.statechunks import ChunkLedger, change_size, group_changes
from gangpreempt.bus.topology import Topology
from gangpreempt.model import kinds

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def upserted(key: str, body: bytes = b"x") -> events.ObjectUpserted:
    return events.ObjectUpserted(
        id=f"{key}@1", occurred_at=NOW, kind="Workload", key=key, body=body
    )


def test_groups_keep_order_and_bounds() -> None:
    changes = [upserted(f"ns/w{i}", b"x" * (10 if i % 3 else 900)) for i in range(50)]
    budget = 3000
    groups = list(group_changes(changes, 7, budget))
    assert [c for g in groups for c in g] == changes
    for group in groups:
        assert len(group) <= 7
        if len(group) > 1:
            assert sum(change_size(c) for c in group) <= budget
    assert len(groups) > len(changes) // 7  # the budget cut some groups short


def test_a_change_larger_than_the_budget_goes_alone() -> None:
    big = upserted("ns/big", b"x" * 5000)
    groups = list(group_changes([upserted("ns/a"), big, upserted("ns/b")], 10, 1000))
    assert [len(g) for g in groups] == [1, 1, 1]


def test_chunk_subject_is_its_own() -> None:
    topology = Topology("gp")
    chunk = events.StateChunk(id="c", occurred_at=NOW, epoch="17-ab", n=3, changes=())
    assert topology.subject_of(chunk) == "gp.state.chunk.17-ab.3"
    assert topology.stream_for(topology.subject_of(chunk)) == topology.state_stream
    # no object's subject can be a chunk's (or the complete marker's)
    assert not {kind.lower() for kind in kinds.KINDS} & {"chunk", "complete"}


# A stream: each message is (is a chunk, the objects it carries); sequences 1, 2, ...
messages = st.lists(
    st.tuples(st.booleans(), st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True)),
    min_size=1,
    max_size=25,
)


def newest(stream: list[tuple[bool, list[int]]], told: set[int]) -> dict[int, int]:
    """Each object's newest sequence among the messages told."""
    out: dict[int, int] = {}
    for seq, (_, objs) in enumerate(stream, start=1):
        if seq in told:
            for obj in objs:
                out[obj] = seq
    return out


@settings(max_examples=200, deadline=None)
@given(messages, st.randoms(use_true_random=False))
def test_never_lets_go_of_a_chunk_holding_a_newest_version(
    stream: list[tuple[bool, list[int]]], rng: random.Random
) -> None:
    emptied: list[int] = []
    ledger = ChunkLedger(emptied.append)
    order = list(range(1, len(stream) + 1))
    rng.shuffle(order)  # acks may be heard out of order
    told: set[int] = set()
    for seq in order:
        chunk, objs = stream[seq - 1]
        ledger.note(seq, [("Workload", str(o)) for o in objs], chunk)
        told.add(seq)
        latest = newest(stream, told)
        for gone in emptied:
            assert stream[gone - 1][0], "only chunks are let go"
            assert all(latest[o] > gone for o in stream[gone - 1][1]), (gone, latest)
    assert len(emptied) == len(set(emptied))


@settings(max_examples=200, deadline=None)
@given(messages)
def test_in_order_it_lets_go_of_every_spent_chunk(stream: list[tuple[bool, list[int]]]) -> None:
    emptied: list[int] = []
    ledger = ChunkLedger(emptied.append)
    for seq, (chunk, objs) in enumerate(stream, start=1):
        ledger.note(seq, [("Workload", str(o)) for o in objs], chunk)
    latest = newest(stream, set(range(1, len(stream) + 1)))
    needed = {seq for seq in latest.values() if stream[seq - 1][0]}
    chunks = {seq for seq, (chunk, _) in enumerate(stream, start=1) if chunk}
    assert set(emptied) == chunks - needed
    assert ledger.chunks == len(needed)
    # told again (a second read of the same stream): nothing changes
    for seq, (chunk, objs) in enumerate(stream, start=1):
        ledger.note(seq, [("Workload", str(o)) for o in objs], chunk)
    assert ledger.chunks == len(needed)
    assert set(emptied) == chunks - needed


def deleted(key: str) -> events.ObjectDeleted:
    return events.ObjectDeleted(id=f"{key}@deleted", occurred_at=NOW, kind="Workload", key=key)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=40), st.integers(1, 6))
def test_a_deletion_is_never_in_a_chunk(
    kinds_and_keys: list[tuple[bool, int]], per_chunk: int
) -> None:
    changes = [deleted(f"ns/w{k}") if gone else upserted(f"ns/w{k}") for gone, k in kinds_and_keys]
    groups = list(group_changes(changes, per_chunk, 10_000))
    assert [c for g in groups for c in g] == changes  # the order kept
    for group in groups:
        assert len(group) <= per_chunk
        if any(isinstance(c, events.ObjectDeleted) for c in group):
            assert len(group) == 1  # sent on its own subject
