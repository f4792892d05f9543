"""What counts as correct: math-verify on the extracted answer, canonical fallback, choice labels, guards.

These call the worker-side functions in this (main) thread, where SIGALRM time limits work."""

import time

import pytest

from nemo_lead.verify.match import TimeUp, _log10_size, answers_match, grade_task, time_limit, warm_up


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_up()


def _match(answer, gold, seconds=3.0):
    with time_limit(seconds):
        return answers_match(answer, gold)


@pytest.mark.parametrize(
    "answer, gold",
    [
        ("0.5", r"\frac{1}{2}"),
        (r"\frac{1}{2}", "0.5"),
        (r"\sqrt{8}", r"2\sqrt{2}"),
        ("1,000", "1000"),
        (r"90^\circ", "90"),
        ("x=2", "2"),
        (r"\{3,2,1\}", r"\{1,2,3\}"),
        ("(0,1]", "(0,1]"),
        (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty,2)\cup(3,\infty)"),
        ("[-2, 7]", r"x \in [-2,7]"),
        ("Monday", r"\text{Monday}"),
        (r"\text{even}", r"\text{even}"),
        ("025", "25"),
        ("3.", "3"),  # math-verify cannot parse "3.": canonical fallback
        (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"),
        ("x^2+1", "1+x^2"),
        ("-2, 1", "1,-2"),
        ("\u221e", r"\infty"),  # unicode
        (r"\textbf{(C)}\ 70", "70"),  # multiple-choice decorations
        ("(D) 31", "31"),
        (r"\text{(B)}\ 2", "2"),
        (r"\textbf{(C)}\ 70", r"\text{(C)}"),  # ... and the letter against a letter gold
    ],
)
def test_equivalent_forms_are_correct(answer, gold):
    assert _match(answer, gold)


@pytest.mark.parametrize(
    "answer, gold",
    [
        ("3.14159", r"\pi"),  # close is not equal
        ("[0,1]", "(0,1]"),
        ("C", "70"),  # a bare letter is not a number
        (r"\text{(C)}", "70"),
        ("0.33", r"\frac{1}{3}"),
        ("(1,2)", "(2,1)"),
        ("", "3"),
        ("x", "3"),
        ("Tuesday", r"\text{Monday}"),
    ],
)
def test_wrong_answers_are_wrong(answer, gold):
    assert not _match(answer, gold)


@pytest.mark.parametrize(
    "answer",
    [
        "9^{9^{9^{9^9}}}",
        "100000000!",
        "2^{100000000}",
        "(" * 2000 + "1" + ")" * 2000,
        "{" * 500 + "}" * 500,
        "x" * 100_000,
    ],
)
def test_hostile_answers_are_wrong_and_fast(answer):
    t = time.perf_counter()
    assert grade_task((answer, "5", None, 2.0)) == ("ok", False, None)
    assert time.perf_counter() - t < 1.0  # the guards answer at once, long before the 2 s limit


def test_explosive_answer_is_still_compared_against_an_equally_large_gold():
    assert _match("2^{1000000}", "2^{1000000}")  # canonical match
    import sympy  # the size estimate itself

    assert _log10_size(sympy.Integer(999)) < 3 < _log10_size(sympy.Integer(1000)) + 1e-9

    assert 300_000 < _log10_size(sympy.Pow(2, 10**6, evaluate=False)) < 302_000
    assert _log10_size(sympy.factorial(sympy.Integer(10**8), evaluate=False)) > 1e8


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # an alarm lost in a gc hook
def test_time_limit_turns_slow_grading_into_timeout():
    # the LaTeX parser is slow on nested parentheses (~0.6 s for 10 levels on these machines; 12 levels took
    # 0.6-1.3 s unlimited): the limit of 0.2 s must end it well before; 0.9 s leaves room for a loaded machine
    slow = "(" * 12 + "1" + ")" * 12
    t = time.perf_counter()
    assert grade_task((slow, "2", None, 0.2)) == ("timeout", False, None)
    assert time.perf_counter() - t < 0.9


def test_time_limit_fires_again_when_the_first_alarm_is_swallowed():
    t = time.perf_counter()
    with pytest.raises(TimeUp):
        with time_limit(0.1):
            try:
                time.sleep(5)
            except TimeUp:  # as Python does with an exception raised inside a gc callback or __del__
                pass
            time.sleep(5)
    assert time.perf_counter() - t < 0.5
    time.sleep(0.15)  # disarmed: no stray alarm after the block


def test_repetition_checked_only_when_not_correct():
    text = "wait, " * 40 + r"\boxed{5}"
    status, correct, found = grade_task(("5", "5", text, 2.0))
    assert (status, correct, found) == ("ok", True, None)
    status, correct, found = grade_task(("6", "5", text, 2.0))
    assert status == "ok" and not correct and "wait," in found
    assert grade_task((None, "5", text, 2.0))[2] is not None  # no answer: still checked
