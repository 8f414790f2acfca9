"""Typed reads from a parsed manifest, each failure naming file, document, object,
field path and line."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

from gangpreempt.errors import ManifestError
from gangpreempt.manifests.yamlio import line_of
from gangpreempt.model.quantity import (
    MAX_AMOUNT,
    MAX_DIGITS,
    QuantityError,
    beyond,
    shorten,
    to_amount,
)

_LONG_INT = 10**MAX_DIGITS  # an integer this large is described, not printed


class Where:
    """Which object of which document of which file is being read."""

    __slots__ = ("document", "file", "line", "obj", "prefix")

    def __init__(
        self, file: str, document: int | None, obj: str | None = None, prefix: str = ""
    ) -> None:
        self.file = file
        self.document = document
        self.obj = obj
        self.prefix = prefix
        self.line: int | None = None  # the object's first line, when known

    def error(
        self, path: str, message: str, container: Any = None, key: Any = None
    ) -> ManifestError:
        return ManifestError(
            self.file,
            message,
            document=self.document,
            obj=self.obj,
            field=path or None,
            line=line_of(container, key) if container is not None else None,
        )


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def describe(value: Any) -> str:
    if isinstance(value, str):
        return shorten(value)
    if isinstance(value, int) and not -_LONG_INT < value < _LONG_INT:
        # Python refuses to print an integer of 4,300 digits and more: never try
        return f"an integer of more than {MAX_DIGITS} digits"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


class Fields:
    """A mapping read at ``path`` with typed, located accessors."""

    __slots__ = ("data", "path", "where")

    def __init__(self, where: Where, data: Mapping[str, Any], path: str) -> None:
        self.where = where
        self.data = data
        self.path = path

    def fail(self, key: str | int, message: str) -> NoReturn:
        raise self.where.error(join(self.path, key), message, self.data, key)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        return self.data.get(key)

    def map(self, key: str, required: bool = False) -> Fields | None:
        value = self.data.get(key)
        if value is None:
            if required:
                self.fail(key, "required field is missing")
            return None
        if not isinstance(value, Mapping):
            self.fail(key, f"expected a mapping, got {describe(value)}")
        return Fields(self.where, value, join(self.path, key))

    def map_or_empty(self, key: str) -> Fields:
        return self.map(key) or Fields(self.where, {}, join(self.path, key))

    def items(self, key: str, required: bool = False) -> Iterator[tuple[int, Any, str]]:
        value = self.data.get(key)
        if value is None:
            if required:
                self.fail(key, "required field is missing")
            return
        if not isinstance(value, list):
            self.fail(key, f"expected a list, got {describe(value)}")
        base = join(self.path, key)
        for i, item in enumerate(value):
            yield i, item, join(base, i)

    def maps(self, key: str, required: bool = False) -> Iterator[Fields]:
        value = self.data.get(key)
        for i, item, path in self.items(key, required):
            if not isinstance(item, Mapping):
                raise self.where.error(path, f"expected a mapping, got {describe(item)}", value, i)
            yield Fields(self.where, item, path)

    def text(self, key: str, default: str | None = None, required: bool = False) -> str:
        value = self.data.get(key)
        if value is None:
            if required or default is None:
                self.fail(key, "required field is missing")
            return default
        if not isinstance(value, str):
            self.fail(key, f"expected a string, got {describe(value)}")
        if required and not value:
            self.fail(key, "must not be empty")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.fail(key, f"expected a string, got {describe(value)}")
        return value

    def texts(self, key: str, required: bool = False) -> tuple[str, ...]:
        out = []
        for i, item, path in self.items(key, required):
            if not isinstance(item, str):
                raise self.where.error(
                    path, f"expected a string, got {describe(item)}", self.data[key], i
                )
            out.append(item)
        return tuple(out)

    def text_map(self, key: str) -> dict[str, str]:
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(key, f"expected a mapping of strings, got {describe(value)}")
        out: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                raise self.where.error(
                    join(join(self.path, key), str(k)),
                    f"expected a string, got {describe(v)}",
                    value,
                    k,
                )
            if isinstance(v, int) and not -_LONG_INT < v < _LONG_INT:
                raise self.where.error(
                    join(join(self.path, key), str(k)),
                    f"expected a string, got {describe(v)}",
                    value,
                    k,
                )
            out[str(k)] = v if isinstance(v, str) else str(v)
        return out

    def integer(
        self, key: str, *, minimum: int | None = None, what: str | None = None, bits: int = 32
    ) -> int | None:
        """An integer (or a string of digits), at least ``minimum``, within int``bits``:
        Kubernetes' integer fields are int32 (the model decodes them so), a few int64
        (``bits=64``). Beyond that it is an error naming the field, never a number the
        model cannot encode."""
        value = self.data.get(key)
        if value is None:
            return None
        ok = isinstance(value, int) and not isinstance(value, bool)
        if (
            not ok
            and isinstance(value, str)
            and len(value) <= MAX_DIGITS
            and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value)
        ):
            value, ok = int(value), True
        expected = what or ("an integer" if minimum is None else f"an integer >= {minimum}")
        if not ok or (minimum is not None and value < minimum):
            self.fail(key, f"expected {expected}, got {describe(self.data.get(key))}")
        assert isinstance(value, int)
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            self.fail(key, f"expected {expected} within int{bits}, got {describe(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {describe(value)}")
        return value

    def enum(
        self,
        key: str,
        allowed: tuple[str, ...],
        default: str,
        aliases: Mapping[str, str] | None = None,
    ) -> str:
        value = self.data.get(key)
        if value is None or value == "":
            return default
        if aliases and isinstance(value, str) and value in aliases:
            return aliases[value]
        if value not in allowed:
            accepted = (*allowed, *(aliases or {}))
            self.fail(key, f"expected one of {', '.join(accepted)}, got {describe(value)}")
        assert isinstance(value, str)
        return value

    def amount(
        self, key: str, resource: str, required: bool = False, limit: int = MAX_AMOUNT
    ) -> int | None:
        """A quantity as an integer amount, at most ``limit``: ``MAX_AMOUNT`` (the one
        bound of every amount an object states, ``model.quantity``), or ``MAX_USAGE`` for
        a recorded usage (a sum)."""
        value = self.data.get(key)
        if value is None:
            if required:
                self.fail(key, "required field is missing")
            return None
        try:
            amount = to_amount(resource, value)
        except QuantityError as exc:
            self.fail(key, f"expected a Kubernetes quantity: {exc}")
        problem = beyond(resource, amount, limit)
        if problem is not None:
            self.fail(key, f"{problem}, got {describe(value)}")
        return amount

    def amounts(self, key: str, limit: int = MAX_AMOUNT) -> dict[str, int]:
        """A ResourceList: resource name -> integer amount (``limit``: see ``amount``)."""
        sub = self.map(key)
        if sub is None:
            return {}
        out: dict[str, int] = {}
        for res in sub.data:
            amount = sub.amount(str(res), str(res), required=True, limit=limit)
            assert amount is not None
            out[str(res)] = amount
        return out

    def time(self, key: str) -> datetime | None:
        value = self.data.get(key)
        if value is None or value == "":
            return None
        try:
            return parse_time(value)
        except ValueError:
            self.fail(key, f"expected an RFC 3339 time, got {describe(value)}")


def parse_time(value: Any) -> datetime:
    """An RFC 3339 time (string, or a datetime YAML already parsed), as aware UTC."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        dt = datetime.fromisoformat(text)
    else:
        raise ValueError(f"not a time: {value!r}")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


__all__ = ["Fields", "Where", "join", "parse_time"]
