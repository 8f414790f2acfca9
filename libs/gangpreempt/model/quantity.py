"""Kubernetes resource quantities, parsed exactly and kept as integers.

A quantity string (``"500m"``, ``"1.5Gi"``, ``"2e3"``) is parsed as an exact rational
number, then stored in the unit Kueue accounts in: milli-units for ``cpu``, whole units
(bytes, GPUs, pods, ...) for every other resource, rounding up as Kubernetes'
``MilliValue`` / ``Value`` do. All arithmetic after parsing is on Python integers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)

MILLI_RESOURCES = frozenset({"cpu"})
# Kubernetes keeps quantities within int64 at nano scale: an exponent past this is no
# quantity a cluster can hold (and an unbounded one would take forever to expand).
MAX_EXPONENT = 30


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse_exact(text: object) -> Fraction:
    """Parse a Kubernetes quantity (a string, or a YAML int / float) to an exact rational."""
    if isinstance(text, bool):
        raise QuantityError(f"expected a quantity, got {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        text = repr(text)
    if not isinstance(text, str):
        raise QuantityError(f"expected a quantity, got {type(text).__name__}")
    s = text.strip()
    m = _QUANTITY.match(s)
    if m is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    value = Fraction(m.group("num"))
    if m.group("bin"):
        value *= _BINARY[m.group("bin")]
    elif m.group("exp"):
        exponent = int(m.group("exp")[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"{text!r} is out of range (exponent beyond ±{MAX_EXPONENT})")
        value *= Fraction(10) ** exponent
    else:
        value *= _DECIMAL[m.group("dec") or ""]
    if m.group("sign") == "-":
        value = -value
    return value


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


# The largest amount a pod may ask for or a node hold: sums of a thousand of them stay
# within the int64 arrays of the node-level search (2**50 bytes is a PiB; 2**50
# milli-CPU, 10**12 cores). Quotas are not bounded (they are summed as Python ints).
MAX_AMOUNT = 2**50


def to_amount(resource: str, text: object) -> int:
    """The integer Kueue accounts for ``text`` of ``resource`` (milli for cpu, else units).
    Pod requests and node allocatable above ``MAX_AMOUNT`` are refused by the caller."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text * 1000 if resource in MILLI_RESOURCES else text
    if isinstance(text, str):
        return _text_amount(resource in MILLI_RESOURCES, text)
    exact = parse_exact(text)
    if resource in MILLI_RESOURCES:
        exact *= 1000
    return _ceil(exact)


@functools.lru_cache(maxsize=4096)
def _text_amount(milli: bool, text: str) -> int:
    """A cluster spells few distinct quantities ("2", "4Gi", ...) many times over."""
    exact = parse_exact(text)
    return _ceil(exact * 1000 if milli else exact)


def format_amount(resource: str, amount: int) -> str:
    """The shortest exact Kubernetes spelling of an integer amount of ``resource``."""
    if resource in MILLI_RESOURCES:
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if amount != 0 and amount % 1024 == 0:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _BINARY[suffix]
            if amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


def add_into(into: dict[str, int], more: Mapping[str, int], sign: int = 1) -> None:
    """``into += sign * more``, resource by resource (amounts as the model keeps them)."""
    for res, v in more.items():
        into[res] = into.get(res, 0) + sign * v


__all__ = ["MAX_AMOUNT", "QuantityError", "add_into", "format_amount", "parse_exact", "to_amount"]
