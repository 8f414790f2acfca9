"""Kubernetes resource quantities, parsed exactly and kept as integers.

A quantity string (``"500m"``, ``"1.5Gi"``, ``"2e3"``) is parsed as an exact rational
number, then stored in the unit Kueue accounts in: milli-units for ``cpu``, whole units
(bytes, GPUs, pods, ...) for every other resource, rounding up as Kubernetes'
``MilliValue`` / ``Value`` do. All arithmetic after parsing is on Python integers.

**The one bound: ``MAX_AMOUNT`` = 2**53.** Every amount a reader takes from an object
(a container's, and a pod's total, request; a node's allocatable; a ClusterQueue's
nominal quota, borrowing and lending limits; an ElasticQuota's min, max and weight) is
at most ``MAX_AMOUNT`` in the model's unit: 8 PiB of memory or storage, 9 * 10**12
cores (in milli-CPU), 9 * 10**15 GPUs or pods. Beyond it a reader reports an error
naming the object, the field and (from files) the line; nothing beyond it reaches the
model. Why this number:

- The model encodes int64 (msgspec; ``model.bounds`` is what the services decode), and
  so do its peers: Kubernetes keeps a quantity's value within int64 (``Value`` and
  ``MilliValue`` return int64) and Kueue sums its quotas and usage as int64. What the
  model sums and encodes stays within int64 as long as it adds up at most 1023 amounts
  (1023 * 2**53 < 2**63): the node-level search's int64 arrays (a node's pods), the
  usage quota admits (it never exceeds the quota of the admitting ClusterQueue's
  cohort tree, a sum of quotas), a pod set's recorded usage.
- 2**53 is the largest range of integers a float64 holds exactly: JSON readers that
  parse numbers as doubles (JavaScript, ``jq``) read every amount, and the fair-sharing
  shares computed from them, without rounding.
- Real clusters sit far below it (a 10,000-node cluster with 2 TiB per node has
  20 PiB in all: one ClusterQueue holding half of it is within the bound).

A recorded usage (``status.admission.podSetAssignments[].resourceUsage``: a pod set's
pods summed) is bounded by ``MAX_USAGE``, the int64 the model encodes, rather than by
``MAX_AMOUNT``: admitted while borrowing in a cohort, it may exceed any one quota.

Texts are checked before any conversion: a number of more than ``MAX_DIGITS`` digits
(Python refuses to convert 4,300 and more, and no quantity within int64 at nano scale
needs more than 28) or an exponent beyond ``MAX_EXPONENT`` is a ``QuantityError``,
as is an integer (a YAML or JSON number) of more than ``MAX_DIGITS`` digits.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from fractions import Fraction

from gangpreempt.model.bounds import INT64_MAX

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
# Digits of the number of a quantity (its integer and fractional parts together): an
# int64 at nano scale has 28; a longer text is refused before it is converted.
MAX_DIGITS = 64
# The largest amount of one resource one object states (see the module docstring).
MAX_AMOUNT = 2**53
# The largest sum of amounts the model records and encodes (int64, ``model.bounds``).
MAX_USAGE = INT64_MAX
_MAX_INT = 10**MAX_DIGITS  # an integer at or past this has more than MAX_DIGITS digits


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse_exact(text: object) -> Fraction:
    """Parse a Kubernetes quantity (a string, or a YAML int / float) to an exact rational."""
    if isinstance(text, bool):
        raise QuantityError(f"expected a quantity, got {text!r}")
    if isinstance(text, int):
        _check_integer(text)
        return Fraction(text)
    if isinstance(text, float):
        if math.isinf(text):  # a number the YAML or JSON reader could not hold
            raise QuantityError("a number too large for any quantity")
        text = repr(text)
    if not isinstance(text, str):
        raise QuantityError(f"expected a quantity, got {type(text).__name__}")
    s = text.strip()
    m = _QUANTITY.match(s)
    if m is None:
        raise QuantityError(f"{shorten(text)} is not a Kubernetes quantity")
    num = m.group("num")
    digits = len(num) - ("." in num)
    if digits > MAX_DIGITS:
        raise QuantityError(
            f"a number of {digits} digits is out of range (a quantity has at most {MAX_DIGITS})"
        )
    value = Fraction(num)
    if m.group("bin"):
        value *= _BINARY[m.group("bin")]
    elif m.group("exp"):
        exponent_text = m.group("exp")[1:]
        if len(exponent_text.lstrip("+-")) > MAX_DIGITS:
            raise QuantityError(f"{shorten(text)} is out of range (exponent too long)")
        exponent = int(exponent_text)
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(
                f"{shorten(text)} is out of range (exponent beyond ±{MAX_EXPONENT})"
            )
        value *= Fraction(10) ** exponent
    else:
        value *= _DECIMAL[m.group("dec") or ""]
    if m.group("sign") == "-":
        value = -value
    return value


def _check_integer(value: int) -> None:
    if not -_MAX_INT < value < _MAX_INT:
        raise QuantityError(
            f"an integer of more than {MAX_DIGITS} digits is out of range "
            f"(about 10**{int(value.bit_length() * 0.30103)})"
        )


def shorten(text: str, limit: int = 40) -> str:
    """``repr(text)``, its middle left out when it is long (an error quotes it)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[: limit // 2]!r}...{text[-8:]!r} ({len(text)} characters)"


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def to_amount(resource: str, text: object) -> int:
    """The integer Kueue accounts for ``text`` of ``resource`` (milli for cpu, else units).
    Amounts beyond ``MAX_AMOUNT`` are refused by the caller (``beyond``)."""
    if isinstance(text, int) and not isinstance(text, bool):
        _check_integer(text)
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


def beyond(resource: str, amount: int, limit: int = MAX_AMOUNT) -> str | None:
    """Why ``amount`` of ``resource`` cannot be taken (negative, or past ``limit``), or
    None when it can."""
    if amount < 0:
        return "expected a non-negative quantity"
    if amount > limit:
        if resource in MILLI_RESOURCES:
            largest = f"{limit / 1000:.3g} cores"
        else:
            largest = format_amount(resource, limit)
        return f"beyond the largest quantity gangpreempt computes with ({largest})"
    return None


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


__all__ = [
    "MAX_AMOUNT",
    "MAX_DIGITS",
    "MAX_USAGE",
    "QuantityError",
    "add_into",
    "beyond",
    "format_amount",
    "parse_exact",
    "shorten",
    "to_amount",
]
