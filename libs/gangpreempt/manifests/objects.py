"""API objects (mappings, as JSON decodes them) into a ``ClusterState``, read the same
way as manifests, incrementally: ``ObjectCache`` decodes an object again only when its
resourceVersion changed, and rebuilds the state from the cached pieces and the joins
between objects (gang membership) each time."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, NamedTuple

import msgspec

from gangpreempt.errors import ManifestError
from gangpreempt.manifests.fields import Where
from gangpreempt.manifests.loading import Loaded, _Reader
from gangpreempt.model.cluster import ClusterState

TABLES = tuple(f.name for f in msgspec.structs.fields(ClusterState))


class _Piece(NamedTuple):
    """What reading one object adds: its table entries and its part of the joins."""

    obj: str
    puts: tuple[tuple[str, str, Any], ...]
    templates: dict[Any, Any]
    workload_refs: dict[Any, Any]
    template_refs: dict[Any, Any]
    skipped: dict[Any, Any]
    warnings: tuple[str, ...]  # what was read as "not set" (e.g. a bad toleration policy)


def _read_one(origin: str, obj: Mapping[str, Any]) -> _Piece | str:
    reader = _Reader()
    where = Where(origin, None)
    try:
        reader._object(obj, where, None, "")
    except ManifestError as exc:
        return str(exc)
    puts = tuple((t, k, v) for t in TABLES for k, v in getattr(reader.state, t).items())
    return _Piece(
        where.obj or "",
        puts,
        reader._templates,
        reader._workload_refs,
        reader._template_refs,
        reader._skipped,
        tuple(reader.warnings),
    )


def _merge(reader: _Reader, origin: str, piece: _Piece) -> None:
    where = Where(origin, None, piece.obj)
    for table, key, value in piece.puts:
        reader._put(getattr(reader.state, table), key, value, where)
    reader._templates.update(piece.templates)
    reader._workload_refs.update(piece.workload_refs)
    reader._template_refs.update(piece.template_refs)
    reader.warnings.extend(piece.warnings)
    for kind, (count, first) in piece.skipped.items():
        entry = reader._skipped.setdefault(kind, [0, first])
        entry[0] += count


class ObjectCache:
    """``load`` reads objects given as (key, resourceVersion, mapping); an object whose
    key and resourceVersion were seen at the previous ``load`` is not decoded again (an
    empty resourceVersion always is). An invalid object is left out and reported in
    ``Loaded.rejected``, naming the object and the field; the others are read."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self._pieces: dict[Hashable, tuple[str, _Piece | str]] = {}
        self.decoded = 0  # objects decoded by the last load (the rest came from the cache)

    def load(self, objects: Iterable[tuple[Hashable, str, Mapping[str, Any]]]) -> Loaded:
        reader = _Reader()
        rejected: list[str] = []
        pieces: dict[Hashable, tuple[str, _Piece | str]] = {}
        self.decoded = 0
        for key, version, obj in objects:
            cached = self._pieces.get(key)
            if version and cached is not None and cached[0] == version:
                piece = cached[1]
            else:
                piece = _read_one(self.origin, obj)
                self.decoded += 1
            pieces[key] = (version, piece)
            if isinstance(piece, str):
                rejected.append(piece)
            else:
                _merge(reader, self.origin, piece)
        self._pieces = pieces
        return reader.finish_objects(self.origin, rejected)


def load_objects(origin: str, objects: Iterable[Mapping[str, Any]]) -> Loaded:
    """Read API objects once (no cache). ``origin`` names where they came from in
    errors."""
    return ObjectCache(origin).load((i, "", obj) for i, obj in enumerate(objects))


__all__ = ["ObjectCache", "load_objects"]
