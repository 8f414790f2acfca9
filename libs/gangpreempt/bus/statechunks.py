"""STATE changes many at a time: how a large publish is cut into ``StateChunk`` messages,
and which chunks STATE no longer needs.

STATE keeps one message per subject: an object's subject holds its last version. A
starting state of 200,000 objects is then 200,000 stored messages (each written with an
fsync) and as many handled by every replica. A publish of at least ``per_chunk`` changes
goes instead in chunks of ``per_chunk`` (fewer if they would pass ``budget`` bytes), one
message each on a subject of its own. A reader applies STATE in stream order, so an
object's later message (on its own subject or in a later chunk) overrides the chunk's
copy; a chunk whose every object has a newer version stored holds nothing a reader
needs, and is deleted (``ChunkLedger`` says which).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from gangpreempt import events

Change = events.ObjectUpserted | events.ObjectDeleted
Ref = tuple[str, str]  # (kind, key)

OVERHEAD = 160  # bytes of a change in a chunk besides its body and key (id, time, fields)


def change_size(change: Change) -> int:
    """About the bytes ``change`` takes in a chunk."""
    body = change.body if isinstance(change, events.ObjectUpserted) else b""
    return OVERHEAD + len(body) + 2 * len(change.key) + len(change.id)


def group_changes(changes: Iterable[Change], per_chunk: int, budget: int) -> Iterator[list[Change]]:
    """``changes`` in order, cut into groups of at most ``per_chunk`` changes and about
    ``budget`` bytes (a change larger than the budget is a group of its own). A deletion
    is always a group of its own (sent on its object's subject, see ``in_chunks``)."""
    group: list[Change] = []
    size = 0
    for change in changes:
        if not in_chunks(change):
            if group:
                yield group
                group, size = [], 0
            yield [change]
            continue
        cost = change_size(change)
        if group and (len(group) >= per_chunk or size + cost > budget):
            yield group
            group, size = [], 0
        group.append(change)
        size += cost
    if group:
        yield group


def in_chunks(change: Change) -> bool:
    """Whether ``change`` may go in a chunk: an upsert may; a deletion goes on its
    object's own subject. In a chunk, a deletion would be its object's newest version
    until the object came back, and keep the whole chunk (every other change in it
    spent) on STATE that long, perhaps for good; on its own subject it replaces the
    object's older message there, as before chunks."""
    return isinstance(change, events.ObjectUpserted)


def ref_of(change: Change) -> Ref:
    return (change.kind, change.key)


class ChunkLedger:
    """Which chunk holds the newest stored version of each object, and how many objects'
    newest versions each chunk holds. Told of every stored STATE message (``note``: its
    stream sequence and the objects it carries), in stream order; a message told out of
    order never makes a chunk look emptier than it is (a chunk may then be kept longer,
    never deleted early). ``on_empty(seq)`` hears each chunk whose objects all have newer
    versions stored."""

    def __init__(self, on_empty: Callable[[int], None]) -> None:
        self.on_empty = on_empty
        self._home: dict[Ref, int] = {}  # object -> the chunk holding its newest version
        self._live: dict[int, int] = {}  # chunk sequence -> objects it is the home of

    def note(self, seq: int, refs: Iterable[Ref], chunk: bool) -> None:
        for ref in refs:
            home = self._home.get(ref)
            if home is not None:
                if home >= seq:
                    continue  # a newer chunk (or this one, told again) holds it
                del self._home[ref]
                self._left(home)
            if chunk:
                self._home[ref] = seq
                self._live[seq] = self._live.get(seq, 0) + 1
        if chunk and seq not in self._live:
            self.on_empty(seq)  # every object in it was already newer elsewhere

    def _left(self, seq: int) -> None:
        count = self._live[seq] - 1
        if count:
            self._live[seq] = count
        else:
            del self._live[seq]
            self.on_empty(seq)

    @property
    def chunks(self) -> int:
        """Chunks holding the newest version of some object."""
        return len(self._live)

    def holding(self, seq: int) -> int:
        """How many objects' newest versions the chunk at ``seq`` holds."""
        return self._live.get(seq, 0)


__all__ = [
    "OVERHEAD",
    "Change",
    "ChunkLedger",
    "change_size",
    "group_changes",
    "in_chunks",
    "ref_of",
]
