"""Curriculum filters: difficulty and pass-rate thresholds, the authors' answer filter."""

from __future__ import annotations

import pytest

from nemo_lead.data import (
    STAGE1_DIFFICULTY,
    STAGE1_REFERENCE_DIFFICULTY,
    STAGE2_PASS_RATE,
    DataError,
    Problem,
    answer_allows_eval,
    filter_by_bound,
    filter_evaluable_answers,
    load_problems,
)


def P(i, answer="1", **meta):
    return Problem(id=str(i), problem=f"problem {i}", answer=answer, meta=meta)


def test_difficulty_threshold_is_inclusive():
    problems = [P(0, difficulty=2.0), P(1, difficulty=2.5), P(2, difficulty=7), P(3, difficulty=3.4)]
    assert [p.id for p in filter_by_bound(problems, "difficulty", STAGE1_DIFFICULTY)] == ["1", "2", "3"]
    assert [p.id for p in filter_by_bound(problems, "difficulty", STAGE1_REFERENCE_DIFFICULTY)] == ["2"]
    assert [p.id for p in filter_by_bound([P(0, rating=9)], "rating", "> 5")] == ["0"]
    assert [p.id for p in filter_by_bound(problems, "difficulty", "< 2.5")] == ["0"]


def test_pass_rate_bounds_are_inclusive():
    problems = [P(i, pass_rate=r) for i, r in enumerate([0.0, 0.0625, 0.75, 0.8125, 1.0])]
    assert [p.id for p in filter_by_bound(problems, "pass_rate", STAGE2_PASS_RATE)] == ["0", "1", "2"]
    assert [p.id for p in filter_by_bound(problems, "pass_rate", "== 1")] == ["4"]
    with pytest.raises(ValueError, match="pass_rate='about 0.7' must be a comparison"):
        filter_by_bound(problems, "pass_rate", "about 0.7")


@pytest.mark.parametrize(
    "problem, message",
    [(P("x"), "problem 'x': field 'difficulty' is missing"),
     (P("y", difficulty="hard"), "problem 'y': field 'difficulty' is not a number"),
     (P("z", difficulty=True), "problem 'z': field 'difficulty' is not a number")],
)
def test_filters_reject_problems_without_the_field(problem, message):
    with pytest.raises(DataError, match=message):
        filter_by_bound([problem], "difficulty", STAGE1_DIFFICULTY)


def test_stage2_filter_on_the_shipped_set():
    problems = load_problems("lead_stage2")
    kept = filter_by_bound(problems, "pass_rate", STAGE2_PASS_RATE)
    assert len(kept) == 1720  # the count SOURCES.md states
    kept_ids = {p.id for p in kept}
    assert all((p.meta["pass_rate"] <= 0.75) == (p.id in kept_ids) for p in problems)


@pytest.mark.parametrize(
    "answer, allowed",
    [
        ("204", True),
        ("\\frac{1}{2}", True),
        ("\\dfrac{\\pi^2}{8}", True),  # -> (pi^2)/(8): two letters, small exponent
        ("2\\sqrt{2}", True),  # sqrt does not count as letters
        ("x^{2}+y", True),
        ("90^\\circ", True),
        ("10 \\text{ degrees}", True),  # units are dropped
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),  # environment names are not letters
        ("\\text{Evelyn}", False),  # text answers
        ("5x - 7y + 11z + 4 = 0", False),  # three unknowns
        ("(2,\\infty)", False),  # infinity reads as "inf": three letters, as in the authors' code
        ("2^{10}", False),  # exponent of two or more digits: sympy may hang
        ("2^3^4", False),  # exponent tower
        ("\\alpha+\\beta+\\gamma", False),  # Greek letters count
        ("320000 \\mbox{ acres}", False),
    ],
)
def test_answer_allows_eval_cases(answer, allowed):
    assert answer_allows_eval(answer) is allowed


def test_evaluable_answer_filter_keeps_order():
    problems = [P(0, "3"), P(1, "\\text{Evelyn}"), P(2, "\\frac{1}{2}")]
    assert [p.id for p in filter_evaluable_answers(problems)] == ["0", "2"]
