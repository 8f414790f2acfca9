from __future__ import annotations

from fractions import Fraction

import pytest

from gangpreempt.model.quantity import QuantityError, format_amount, parse_exact, to_amount

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "exact"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("2Ki", Fraction(2048)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("3M", Fraction(3_000_000)),
        ("1e3", Fraction(1000)),
        ("1E", Fraction(10**18)),
        ("2E3", Fraction(2000)),
        ("25n", Fraction(25, 10**9)),
        (".5", Fraction(1, 2)),
        (7, Fraction(7)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse_exact(text: object, exact: Fraction) -> None:
    assert parse_exact(text) == exact


@pytest.mark.parametrize("bad", ["", "1.2.3", "Gi", "1 Gi", "1gi", "one", True, None, [1]])
def test_parse_rejects(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_exact(bad)


@pytest.mark.parametrize(
    ("resource", "text", "amount"),
    [
        ("cpu", "1", 1000),
        ("cpu", "250m", 250),
        ("cpu", "0.1", 100),
        ("cpu", "1n", 1),  # rounded up to a milli, as MilliValue does
        ("memory", "1Gi", 2**30),
        ("memory", "1.5", 2),  # rounded up to a byte, as Value does
        ("nvidia.com/gpu", 8, 8),
        ("cpu", 3, 3000),
    ],
)
def test_to_amount_units(resource: str, text: object, amount: int) -> None:
    assert to_amount(resource, text) == amount


def test_arithmetic_is_exact_on_large_sums() -> None:
    # 0.1 CPU a thousand times is exactly 100 CPUs: no float drift anywhere.
    assert sum(to_amount("cpu", "0.1") for _ in range(1000)) == to_amount("cpu", "100")


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("cpu", 1500, "1500m"),
        ("cpu", 2000, "2"),
        ("memory", 2**31, "2Gi"),
        ("memory", 1000, "1000"),
        ("pods", 0, "0"),
    ],
)
def test_format_round_trips(resource: str, amount: int, text: str) -> None:
    assert format_amount(resource, amount) == text
    assert to_amount(resource, text) == amount
