from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangpreempt.model.bounds import INT64_MAX
from gangpreempt.model.quantity import (
    MAX_AMOUNT,
    MAX_DIGITS,
    QuantityError,
    beyond,
    format_amount,
    parse_exact,
    to_amount,
)

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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9" * 5000, "a number of 5000 digits is out of range"),
        ("1." + "0" * 5000, "a number of 5001 digits is out of range"),
        ("9" * 5000 + "Ki", "a number of 5000 digits is out of range"),
        ("1e" + "0" * 5000 + "1", "exponent too long"),
        ("1e31", "exponent beyond"),
        (10**5000, "an integer of more than 64 digits is out of range"),
        (float("inf"), "a number too large for any quantity"),
    ],
    ids=["digits", "fraction", "binary", "exponent-digits", "exponent", "integer", "inf"],
)
def test_absurdly_long_numbers_are_refused_before_conversion(text: object, message: str) -> None:
    """Python refuses to convert a text of 4,300 digits and more (ValueError): the
    parser says what is wrong first, and quotes the text shortened."""
    with pytest.raises(QuantityError, match=message) as caught:
        to_amount("memory", text)
    assert len(str(caught.value)) < 200


def test_the_longest_number_taken_is_parsed() -> None:
    assert parse_exact("1" * MAX_DIGITS) == int("1" * MAX_DIGITS)
    with pytest.raises(QuantityError):
        parse_exact("1" * (MAX_DIGITS + 1))


@pytest.mark.parametrize(
    ("resource", "text"),
    [("memory", "20Ei"), ("memory", "9e25"), ("memory", "9Ei"), ("cpu", "9007199254741")],
)
def test_amounts_past_the_bound_are_named(resource: str, text: str) -> None:
    """They parse (Kubernetes holds up to int64), and are past the one bound."""
    amount = to_amount(resource, text)
    problem = beyond(resource, amount)
    assert problem is not None
    assert problem.startswith("beyond the largest quantity gangpreempt computes with")
    assert beyond(resource, MAX_AMOUNT) is None
    assert beyond(resource, -1) == "expected a non-negative quantity"


def test_sums_of_a_thousand_bounded_amounts_stay_within_int64() -> None:
    """The choice of the bound (see the module): what the model sums and encodes."""
    assert 1023 * MAX_AMOUNT <= INT64_MAX
    assert float(MAX_AMOUNT) == MAX_AMOUNT  # exact in a float64 (JSON readers)
    assert to_amount("memory", "8Pi") == MAX_AMOUNT


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789.eE+-kMGTPEimnu ", max_size=12_000),
        st.integers(),
        st.floats(),
    )
)
def test_a_quantity_is_read_or_refused_with_a_quantity_error(text: object) -> None:
    """Never another exception (a ValueError from a conversion, an OverflowError)."""
    try:
        amount = to_amount("cpu", text)
    except QuantityError:
        return
    assert isinstance(amount, int)
