"""Reading YAML (and JSON) files and folders into documents.

Two readers of the same text: ``documents`` remembers the line of every key and item
(PyYAML, YAML 1.1, slow: ~1 ms per object), ``fast_documents`` does not (JSON through
msgspec; YAML through yaml-rs, a YAML 1.2 parser in Rust: 20-30 times faster). The
loader reads with the fast one and, when anything is wrong with the input, reads it
again with the lined one, so every error still names its line."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import msgspec
import yaml
import yaml_rs

from gangpreempt.errors import ManifestError
from gangpreempt.model.quantity import MAX_DIGITS

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LinedDict(dict[Any, Any]):
    """A mapping that knows the line of each key (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]


class LinedList(list[Any]):
    """A sequence that knows the line of each item (1-based)."""

    line: int = 0
    item_lines: list[int]


class _Loader(_Base):  # type: ignore[misc]
    pass


def _mapping(loader: Any, node: yaml.MappingNode) -> LinedDict:
    loader.flatten_mapping(node)
    out = LinedDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable mapping key", key_node.start_mark
            ) from None
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _sequence(loader: Any, node: yaml.SequenceNode) -> LinedList:
    out = LinedList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


def _integer(loader: Any, node: yaml.ScalarNode) -> Any:
    """An integer, or its text when it is longer than any number gangpreempt reads (Python
    refuses to convert 4,300 digits and more): the field that reads it then says it is
    out of range, with its line, instead of the conversion failing."""
    text = loader.construct_scalar(node)
    if isinstance(text, str) and len(text) > MAX_DIGITS:
        return text
    return loader.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _sequence)
_Loader.add_constructor("tag:yaml.org,2002:int", _integer)


STDIN = "<stdin>"  # what ``-`` reads, and how errors name it
_stdin: tuple[object, bytes] | None = None  # (the stream it came from, its bytes)


def read_bytes(file: str) -> bytes:
    """A file's bytes; ``STDIN``'s are read once per stream (the lined reader may read
    the input a second time)."""
    global _stdin
    if file != STDIN:
        with open(file, "rb") as fh:
            return fh.read()
    stream = sys.stdin
    if _stdin is None or _stdin[0] is not stream:
        _stdin = (stream, stream.buffer.read())
    return _stdin[1]


def yaml_files(path: str) -> list[str]:
    """The YAML files under ``path`` (a file, or a folder searched recursively), sorted;
    ``-`` is standard input."""
    if path == "-":
        return [STDIN]
    p = Path(path)
    if p.is_file():
        return [path]
    if p.is_dir():
        found = [
            os.path.join(root, name)
            for root, _dirs, names in os.walk(path)
            for name in names
            if name.endswith((".yaml", ".yml", ".json"))
        ]
        return sorted(found)
    raise ManifestError(path, "no such file or folder")


def documents(file: str) -> Iterator[tuple[int, Any]]:
    """``(document number, parsed document)`` for each YAML document in ``file``."""
    try:
        text = read_bytes(file).decode("utf-8")
    except OSError as exc:
        raise ManifestError(file, f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ManifestError(file, f"not UTF-8 text (byte {exc.start})") from exc
    number = 0
    try:
        for doc in yaml.load_all(text, Loader=_Loader):
            number += 1
            yield number, doc
    except RecursionError:
        raise ManifestError(
            file, "invalid YAML: nested too deeply to read", document=number + 1
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(
            file, f"invalid YAML: {problem}", document=number + 1, line=line
        ) from exc


class NotFast(Exception):
    """The fast reader cannot read this file as the lined one would: read it lined."""


_DOCUMENT_START = re.compile(r"^---", re.M)


def fast_documents(file: str) -> Iterator[tuple[int, Any]]:
    """``documents`` without line numbers: JSON (a file that starts with ``{`` or
    ``[``) decoded by msgspec, YAML by yaml-rs. Raises ``NotFast`` (or ``ManifestError``
    for a file that cannot be read at all) when the text is not valid, or when its
    documents cannot be told apart for sure."""
    try:
        data = read_bytes(file)
    except OSError as exc:
        raise ManifestError(file, f"cannot read: {exc.strerror or exc}") from exc
    space = _LEADING_SPACE.match(data)
    at = space.end() if space else 0
    if data[at : at + 1] in (b"{", b"["):
        try:
            yield 1, _json_document(data)
        except msgspec.DecodeError:
            pass  # YAML that looks like JSON (flow style): read below
        else:
            return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(file, f"not UTF-8 text (byte {exc.start})") from exc
    try:
        parsed = yaml_rs.loads(text, duplicate_key_policy=yaml_rs.DuplicateKeyPolicy.LastWins)
    except Exception as exc:  # a syntax error: the lined reader says where
        raise NotFast(str(exc)) from exc
    # One document comes back as itself, several as a list: a list is taken as documents
    # only when the text has as many, else the lined reader decides.
    if isinstance(parsed, list) and _DOCUMENT_START.search(text):
        starts = len(_DOCUMENT_START.findall(text))
        before = text[: _DOCUMENT_START.search(text).start()]  # type: ignore[union-attr]
        expected = starts + (1 if _has_content(before) else 0)
        if len(parsed) != expected:
            raise NotFast("documents cannot be told apart")
        yield from enumerate(parsed, 1)
        return
    if isinstance(parsed, list):
        raise NotFast("a document that is a list")
    yield 1, parsed


_LEADING_SPACE = re.compile(rb"\s*")


class LazyItems(Sequence[Any]):
    """A List's items, each decoded when it is read and not kept: a cluster's List of
    200,000 objects is never all decoded at once (as Python objects it is several times
    the size of its text)."""

    def __init__(self, raw: list[msgspec.Raw]) -> None:
        self._raw = raw

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [_DECODER.decode(r) for r in self._raw[index]]
        return _DECODER.decode(self._raw[index])

    def __iter__(self) -> Iterator[Any]:
        decode = _DECODER.decode  # not ``Sequence.__iter__``: index by index
        for raw in self._raw:
            yield decode(raw)


_DECODER = msgspec.json.Decoder()


def _json_document(data: bytes) -> Any:
    """A JSON document; a List's ``items`` as ``LazyItems`` (the rest is decoded as it
    is). The text is scanned once whole, the items once more to split them."""
    try:
        fields = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        return msgspec.json.decode(data)  # not a mapping: decoded as it is
    doc: dict[str, Any] = {k: msgspec.json.decode(v) for k, v in fields.items() if k != "items"}
    raw = fields.get("items")
    if raw is not None:
        kind = doc.get("kind")
        items: list[msgspec.Raw] | None = None
        if isinstance(kind, str) and kind.endswith("List"):
            with contextlib.suppress(msgspec.ValidationError):  # items that are not a list
                items = msgspec.json.decode(raw, type=list[msgspec.Raw])
        doc["items"] = LazyItems(items) if items is not None else msgspec.json.decode(raw)
    return doc


def _has_content(text: str) -> bool:
    return any(
        line.strip() and not line.lstrip().startswith(("#", "%")) for line in text.splitlines()
    )


def line_of(container: Any, key: Any) -> int | None:
    """Line of ``container[key]`` when the container came from ``documents``."""
    if isinstance(container, LinedDict):
        return container.key_lines.get(key, container.line)
    if isinstance(container, LinedList) and isinstance(key, int):
        if 0 <= key < len(container.item_lines):
            return container.item_lines[key]
        return container.line
    return None


__all__ = [
    "STDIN",
    "LazyItems",
    "LinedDict",
    "LinedList",
    "NotFast",
    "documents",
    "fast_documents",
    "line_of",
    "read_bytes",
    "yaml_files",
]
