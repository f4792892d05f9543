"""Where the final answer is read: last box wins, think regions, nesting, hostile text."""

import random

import pytest

from nemo_lead.verify import extract_answer
from nemo_lead.verify.extract import answer_region, split_choice_label


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{5}.", "5"),
        (r"first \boxed{3}, then \boxed{4}", "4"),  # several boxes: the last wins
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces do not count
        (r"\boxed{ \sqrt{2} }", r"\sqrt{2}"),
        (r"\fbox{7}", "7"),
        (r"answer: \boxed 5.", "5"),  # no braces
        (r"$\boxed 12$", "12"),
        (r"\boxed 5</think> more", "5"),  # a bare answer stops at a think tag
        (r"\boxed 5<think>", "5"),
        (r"\boxed{3} and \fbox{9}", "9"),
        (r"\boxed {42}", "42"),
        ("no box here, the answer is 5", None),
        ("", None),
        (r"\boxed{}", None),  # empty
        (r"\boxed{3", None),  # unbalanced: never closes
        (r"\boxed{2} then \boxed{3", None),  # the last box decides, even when broken
        (r"\boxedanswer{3}", None),  # another macro, not a box
        ("the answer is \\boxed{π² ≈ 9.87} ✓", "π² ≈ 9.87"),  # unicode
        ("\\boxed", None),
    ],
)
def test_extract_answer_cases(text, expected):
    assert extract_answer(text, region="all") == expected


def test_regions_after_before_all():
    text = r"<think>maybe \boxed{1}</think> final \boxed{2}"
    assert extract_answer(text, "after_think") == "2"
    assert extract_answer(text, "before_think") == "1"  # the authors' code
    assert extract_answer(text, "all") == "2"


def test_box_inside_think_only():
    text = r"<think>it is \boxed{7}</think> so the answer is seven."
    assert extract_answer(text) is None
    assert extract_answer(text, "before_think") == "7"


def test_unclosed_think_has_no_answer_after_it():
    # still thinking when it stopped: no final answer, even if a box appeared in the thoughts
    assert extract_answer(r"<think>try \boxed{7} ...") is None
    assert extract_answer(r"<think>try \boxed{7} ...", "before_think") is None
    assert extract_answer(r"<think>try \boxed{7} ...", "all") == "7"
    # no think tags at all (a non-reasoning model): the whole text is read
    assert extract_answer(r"plain \boxed{7}") == "7"


def test_after_think_reads_after_the_last_close():
    text = r"<think>a</think> \boxed{1} <think>b</think> \boxed{2}"
    assert answer_region(text, "after_think") == r" \boxed{2}"
    assert extract_answer(text) == "2"


def test_bad_region_and_type():
    with pytest.raises(ValueError, match="answer_region"):
        extract_answer("x", region="middle")
    with pytest.raises(TypeError):
        extract_answer(None)


def test_hostile_texts_are_handled_quickly():
    rng = random.Random(0)
    junk = "".join(rng.choice("ab{}\\ $^()x1 ") for _ in range(1_000_000))
    extract_answer(junk, "all")  # must not raise
    braces = r"\boxed" + "{" * 1_000_000
    assert extract_answer(braces) is None
    deep = r"\boxed{" + "(" * 2000 + "1" + ")" * 2000 + "}"
    assert extract_answer(deep) == "(" * 2000 + "1" + ")" * 2000


@pytest.mark.parametrize(
    "answer, expected",
    [
        (r"\textbf{(C)}\ 70", ("C", "70")),
        ("(D) 31", ("D", "31")),
        (r"\text{(B)}\ 2", ("B", "2")),
        (r"\text{(B) 2}", ("B", "2")),
        (r"\mathrm{(E)}\quad \frac{1}{2}", ("E", r"\frac{1}{2}")),
        (r"\text{(C)}", ("C", "")),
        ("(A)", ("A", "")),
        ("70", (None, "70")),
        ("(1,2)", (None, "(1,2)")),
        ("C", (None, "C")),
    ],
)
def test_split_choice_label(answer, expected):
    assert split_choice_label(answer) == expected
