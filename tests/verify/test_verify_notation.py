"""How notation is read before comparing (`notation.py`), and the false positives it prevents: digits joined
across spaces, mixed numbers, constants read as units, units with punctuation, sets vs relations.

`answers_match` runs here in the main thread, as in a grading worker."""

from fractions import Fraction

import pytest

from nemo_lead.verify import canonical_answer
from nemo_lead.verify.extract import final_answer
from nemo_lead.verify.match import answers_match, for_parse, time_limit, warm_up
from nemo_lead.verify.notation import (
    answer_parts,
    has_digit_gap,
    join_digit_groups,
    mixed_number,
    read_constants,
    spaces_as_blanks,
    strip_units,
)


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_up()


def _match(answer, gold):
    with time_limit(5.0):
        return answers_match(answer, gold)


@pytest.mark.parametrize("s, expected", [
    ("1,000", "1000"), ("1,000,000", "1000000"), ("-12,345.5", "-12345.5"), ("1 000", "1000"),
    ("1 000 000", "1000000"),
    # not well-formed: kept as written
    ("32, 349", "32, 349"), ("1,00", "1,00"), ("1,0000", "1,0000"), ("1 2", "1 2"), ("1,000 000", "1,000 000"),
    ("0,111", "0,111"), ("1000,99", "1000,99"),
])
def test_digit_groups(s, expected):
    assert join_digit_groups(s) == expected


def test_spacing_commands():
    assert spaces_as_blanks(r"10,\!080") == "10,080"
    assert spaces_as_blanks(r"32,\! 349") == "32,349"  # `\!` takes the space after it back
    assert spaces_as_blanks(r"1{,}000") == "1,000"
    assert spaces_as_blanks(r"1\,000") == "1 000"
    assert spaces_as_blanks(r"1 & 2 \\ 3 & 4") == r"1 & 2 \\ 3 & 4"  # a line break is not `\ `


@pytest.mark.parametrize("s, value", [
    ("4 4/9", Fraction(40, 9)), (r"4\frac{4}{9}", Fraction(40, 9)), (r"-2\frac13", Fraction(-7, 3)),
    (r"6 \dfrac{1}{4}", Fraction(25, 4)),
    ("4 9/4", None), (r"4\frac{0}{9}", None), ("4/9", None), ("44/9", None), (r"4\frac{x}{9}", None),
])
def test_mixed_numbers(s, value):
    assert mixed_number(s) == value


def test_constants_and_units():
    assert read_constants(r"2\mathrm{e}") == "2{e}"
    assert read_constants(r"1-\frac{1}{\mathrm{e}}") == r"1-\frac{1}{{e}}"
    assert read_constants(r"3\mathrm{i} + {\rm e} + \text{\pi}") == r"3{i} + {e} + {\pi}"
    assert read_constants(r"5\mathrm{cm}") == r"5\mathrm{cm}"  # a word stays for the unit rule
    assert strip_units(r"5 \text{ cm}.") == "5"
    assert strip_units(r"15\mbox{ cm}^2") == "15"
    assert strip_units("1,000.99€") == "1,000.99"
    assert strip_units(r"\$1,000.99") == "1,000.99"
    assert strip_units(r"\text{Evelyn}") == r"\text{Evelyn}"  # nothing with a digit would be left
    assert strip_units("5 m^2") == "5 m^2" and strip_units("5 m^2", bare=True) == "5"
    assert strip_units("5x", bare=True) == "5x"


def test_answer_parts():
    assert [answer_parts(s) for s in ("5", "1,000", "(2, 2), (6, 2)", r"\{1,2,3\}", "{1,2,3}", "[-2,7]",
                                      r"x_1=1,\quad x_2=2", "32, 349", "{1}{2}")] == [1, 1, 2, 3, 3, 1, 2, 2, 1]


@pytest.mark.parametrize("answer, gold", [
    # digits apart across a space or a comma and a space: a list, not one number (math-verify reads `1 2` as 3)
    ("32, 349", "32349"), ("1 2", "12"), ("1 2", "3"), ("1,00", "100"),
    # a mixed number is its value, never the digits joined nor a product
    ("4 4/9", "44/9"), ("4 4/9", "8/9"), (r"4\frac{4}{9}", "16/9"), (r"4\frac{4}{9}", "44/9"),
    # a thousands group is not a product with zero
    ("1 000", "0"),
    # constants are not units
    ("2", r"2\mathrm{e}"), (r"1 + e^{-1}", r"1-\frac{1}{\mathrm{e}}"), ("2", r"2\mathrm{i}"), ("3", r"3\mathrm{\pi}"),
    # units go, the number stays
    (r"6 \text{ cm}.", "5"), ("1,000.98€", "1000.99"),
    # sets vs relations: the endpoints matter both ways
    (r"-2 < x \le 7", "[-2,7]"), (r"-2 < x \le 7", r"x \in [-2,7]"), ("(-2,7]", r"-2 \le x \le 7"),
    (r"x \ge 3", r"(3, \infty)"),
    # a list holding the gold is not the gold
    ("1,2", "2"), (r"\{2, 3, 5, 7, 13\}", "13"),
])
def test_false_positives_are_wrong(answer, gold):
    assert not _match(answer, gold)


@pytest.mark.parametrize("answer, gold", [
    ("1,000", "1000"), ("1,000,000", "1000000"), ("1 000", "1000"), (r"1\,000", "1000"), (r"10,\!080", "10080"),
    (r"32,\! 349", "32349"), ("7,425,000", "7425000"),
    ("4 4/9", "40/9"), (r"4\frac{4}{9}", r"\frac{40}{9}"), (r"4\frac{4}{9}", "4.444444"), ("40/9", r"4\frac{4}{9}"),
    (r"2e", r"2\mathrm{e}"), (r"1 - e^{-1}", r"1-\frac{1}{\mathrm{e}}"), (r"1-\frac{1}{\mathrm{e}}", r"1 - e^{-1}"),
    (r"2\mathrm{i}", "2i"), (r"\mathrm{\pi}", r"\pi"),
    (r"5 \text{ cm}.", "5"), (r"5 \text{ cm}", "5"), (r"5\mathrm{cm}", "5"), ("5 m^2", "5"), ("1,000.99€", "1000.99"),
    (r"\$1,000.99", "1000.99"), (r"28\%", "28"), (r"15\mbox{ cm}^2", r"15\mbox{ cm}^2"),
    (r"-2 \le x \le 7", "[-2,7]"), (r"-2 \le x \le 7", r"x \in [-2,7]"), ("[-2,7]", r"-2 \le x \le 7"),
    (r"-2 < x \le 7", "(-2,7]"), (r"x > 3", r"(3, \infty)"),
])
def test_equal_spellings_are_right(answer, gold):
    assert _match(answer, gold)


def test_voting_keys_keep_lists_apart():
    assert canonical_answer("32, 349") != canonical_answer("32349") == canonical_answer("32,349") == "32349"
    assert canonical_answer("1 2") == "1 2" and canonical_answer("4 4/9") == "40/9" == canonical_answer(r"4\frac49")
    assert canonical_answer("x = 1,000") == "1000" == canonical_answer(r"1\,000")
    assert canonical_answer("(1, 2)") == "(1,2)" and canonical_answer("1,000.99€") == "100099/100"


def test_what_math_verify_is_given():
    assert for_parse("1 2") is None and for_parse("1 000") == "1000" and for_parse("4 4/9") == r"\frac{40}{9}"
    assert for_parse(r"5 \text{ cm}.") == "5" and for_parse(r"2\mathrm{e}") == "2{e}"
    assert has_digit_gap("1 2") and not has_digit_gap("1, 2")


@pytest.mark.parametrize("text, gold, expected", [
    # k boxes, one answer each, against a gold of k answers: joined
    (r"\boxed{(2, 2)} \quad\text{and}\quad \boxed{(6, 2)}", "(2, 2), (6, 2)", "(2, 2), (6, 2)"),
    (r"\boxed{1}, \boxed{2}, \boxed{3}", r"\{1,2,3\}", "1, 2, 3"),
    (r"first \boxed{9} then \boxed{1} and \boxed{-2}", "1,-2", "1, -2"),  # the last k only
    # otherwise the last box
    (r"\boxed{(2, 2), (6, 2)}", "(2, 2), (6, 2)", "(2, 2), (6, 2)"),
    (r"\boxed{7} so \boxed{(6, 2)}", "(2, 2), (6, 2)", "7, (6, 2)"),  # joined: then graded wrong
    (r"\boxed{(6, 2)}", "(2, 2), (6, 2)", "(6, 2)"),  # one box for two answers
    (r"\boxed{3} and \boxed{1, 2}", "1, 2", "1, 2"),  # the last box holds both
    (r"\boxed{1} and \boxed{2}", "2", "2"),  # a single-answer gold: an earlier box never counts
    (r"\boxed{1} \boxed{}", "1, 2", None),  # the last box is empty: no answer
    (r"\boxed{\boxed{1}, 2}", "1, 2", "1"),  # the last box to start is the inner one; the outer is not joined
    (r"<think>\boxed{1}</think> \boxed{2}", "1, 2", "2"),  # only boxes of the answer region
])
def test_multi_box_rule(text, gold, expected):
    assert final_answer(text, gold) == expected


def test_multi_box_grades():
    assert _match(final_answer(r"\boxed{(2, 2)} and \boxed{(6, 2)}", "(2, 2), (6, 2)"), "(2, 2), (6, 2)")
    assert _match(final_answer(r"\boxed{(6, 2)} and \boxed{(2, 2)}", "(2, 2), (6, 2)"), "(2, 2), (6, 2)")
    assert not _match(final_answer(r"\boxed{7} and \boxed{(6, 2)}", "(2, 2), (6, 2)"), "(2, 2), (6, 2)")
    assert not _match(final_answer(r"\boxed{(6, 2)}", "(2, 2), (6, 2)"), "(2, 2), (6, 2)")
