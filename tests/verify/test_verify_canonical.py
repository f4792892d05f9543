"""Voting keys: equal keys for the same answer, different keys for different answers."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemo_lead.verify import canonical_answer


@pytest.mark.parametrize(
    "a, b",
    [
        ("025", "25"),
        ("25.0", "25"),
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac12", "1/2"),
        (r"-\frac{3}{4}", "-0.75"),
        ("1,000", "1000"),
        (r"10,\!080", "10080"),
        (r"90^\circ", "90"),
        (r"90^{\circ}", "90"),
        ("x = 2", "2"),
        (r"\{3,2,1\}", r"\{1,2,3\}"),
        (r"\text{Monday}", "Monday"),
        (r"\textbf{(C)}\ 70", "70"),
        (r"\text{(B)}", "B"),
        ("$5$", "5"),
        ("5.", "5"),
        (r"\boxed{7}", "7"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        ("\u22123", "-3"),  # unicode minus sign
        ("+4", "4"),
        (r"10\%", "10"),
        (r"\$32,\!348", "32348"),
    ],
)
def test_same_answer_same_key(a, b):
    assert canonical_answer(a) == canonical_answer(b) is not None


@pytest.mark.parametrize(
    "a, b",
    [
        ("3.14159", r"\pi"),
        ("(0,1]", "[0,1]"),
        ("(1,2)", "(2,1)"),  # tuples keep their order
        ("0.33", r"\frac{1}{3}"),
        ("12", "21"),
        ("x=2", "y=3"),
    ],
)
def test_different_answers_different_keys(a, b):
    assert canonical_answer(a) != canonical_answer(b)


def test_exact_forms():
    assert canonical_answer(r"\frac{1}{2}") == "1/2"
    assert canonical_answer("007") == "7"
    assert canonical_answer("-0") == "0"
    assert canonical_answer(r"\frac{4}{2}") == "2"


def test_integer_kind_for_aime():
    assert canonical_answer("025", kind="integer") == "25"
    assert canonical_answer(r"\boxed{204}", kind="integer") == "204"
    assert canonical_answer("33.0", kind="integer") == "33"
    assert canonical_answer(r"\frac{1}{2}", kind="integer") is None
    assert canonical_answer(r"\sqrt{2}", kind="integer") is None


def test_cannot_vote():
    assert canonical_answer(None) is None
    assert canonical_answer("") is None
    assert canonical_answer("  $ $ ") is None
    with pytest.raises(ValueError, match="kind"):
        canonical_answer("1", kind="float")


def test_huge_numbers_do_not_raise():
    big = "9" * 100_000
    assert canonical_answer(big) == big  # too long for int(): kept as text
    assert canonical_answer("1" * 50 + "/" + "3") is not None


@given(st.integers(min_value=0, max_value=999), st.integers(min_value=0, max_value=3))
def test_zero_padding_never_changes_the_integer(n, pad):
    padded = "0" * pad + str(n)
    assert canonical_answer(padded, kind="integer") == str(n) == canonical_answer(padded)


@given(st.integers(min_value=-50, max_value=50), st.integers(min_value=1, max_value=50))
def test_fraction_and_decimal_agree_when_exact(p, q):
    from fractions import Fraction

    value = Fraction(p, q)
    latex = rf"\frac{{{abs(p)}}}{{{q}}}" if p >= 0 else rf"-\frac{{{-p}}}{{{q}}}"
    assert canonical_answer(latex) == canonical_answer(f"{value.numerator}/{value.denominator}")
    if (10**6 * value).denominator == 1:  # a terminating decimal
        assert canonical_answer(latex) == canonical_answer(f"{float(value):.6f}")
