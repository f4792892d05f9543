"""The paper's metrics against hand-computed values and brute-force enumeration."""

from __future__ import annotations

import math
import signal
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_lead.eval import accuracy_vs_budget, cons_at_k, mean_length, metrics, pass_at_k

T, F = True, False


# ----------------------------------------------------------------------------- pass@k
def test_pass_at_1_is_mean_correctness_averaged_over_problems():
    # problem 0: 1/4 correct, problem 1: 2/2 correct -> (0.25 + 1) / 2
    assert pass_at_k([[T, F, F, F], [T, T]], k=1) == pytest.approx(0.625)


def test_pass_at_k_accepts_numpy_bools_and_0_1():
    assert pass_at_k([[np.bool_(True), 0], [1, np.False_]], k=1) == pytest.approx(0.5)


def test_pass_at_k_hand_computed():
    # n=4, c=2, k=2: 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k([[T, F, T, F]], k=2) == pytest.approx(5 / 6)
    # n=5, c=1, k=3: 1 - C(4,3)/C(5,3) = 1 - 4/10
    assert pass_at_k([[F, F, T, F, F]], k=3) == pytest.approx(0.6)
    # k = n: 1 if any sample is correct
    assert pass_at_k([[F, F, T], [F, F, F]], k=3) == pytest.approx(0.5)


def test_pass_at_k_ragged_sample_counts():
    # k=2: problem 0 (n=2, c=1): 1 - C(1,2)/C(2,2) = 1; problem 1 (n=4, c=0): 0
    assert pass_at_k([[T, F], [F, F, F, F]], k=2) == pytest.approx(0.5)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_pass_at_k_matches_brute_force_enumeration(data):
    n = data.draw(st.integers(1, 9))
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k([samples], k=k) == pytest.approx(brute, abs=1e-12)


@pytest.mark.parametrize(
    "correct, k, match",
    [
        ([[T, F]], 3, "k=3 exceeds the 2 samples of problem 0"),
        ([[T, F, T], [T]], 2, "problem 1"),
        ([], 1, "empty"),
        ([[T], []], 1, r"correct\[1\] has no samples"),
        ([[T, 0.5]], 1, r"correct\[0\]\[1\] must be a bool"),
        ([[T, None]], 1, r"correct\[0\]\[1\] must be a bool"),
        ([[T]], 0, "k must be an integer >= 1"),
        ([[T]], True, "k must be an integer >= 1"),
        ("TF", 1, "one list of samples per problem"),
    ],
)
def test_pass_at_k_rejects_bad_input(correct, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(correct, k=k)


# ----------------------------------------------------------------------------- mean length
def test_mean_length_is_flat_mean_over_all_samples():
    assert mean_length([[10, 20], [30]]) == pytest.approx(20.0)  # not (15 + 30) / 2
    assert mean_length([[0, 0, 6]]) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "lengths, match",
    [([], "empty"), ([[]], "no samples"), ([[3, -1]], "negative"), ([[3, 2.5]], "integer"), ([[True]], "integer")],
)
def test_mean_length_rejects_bad_input(lengths, match):
    with pytest.raises(ValueError, match=match):
        mean_length(lengths)


# ----------------------------------------------------------------------------- accuracy vs budget
def test_accuracy_vs_budget_hand_computed():
    correct = [[T, T, F], [T, F]]
    lengths = [[100, 300, 50], [200, 10]]
    curve = accuracy_vs_budget(correct, lengths, [300, 50, 100, 250])
    assert list(curve) == [50, 100, 250, 300]  # ascending budgets
    # b=50: nothing correct fits; b=100: 1/3 + 0; b=250: 1/3 + 1/2; b=300: 2/3 + 1/2 (= pass@1)
    assert curve[50] == pytest.approx(0.0)
    assert curve[100] == pytest.approx((1 / 3) / 2)
    assert curve[250] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert curve[300] == pytest.approx(pass_at_k(correct, 1))


def test_length_equal_to_budget_counts():
    assert accuracy_vs_budget([[T]], [[128]], [127, 128]) == {127: 0.0, 128: 1.0}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.booleans(), st.integers(0, 500)), min_size=1, max_size=6), min_size=1, max_size=5
    ),
    st.lists(st.integers(0, 600), min_size=1, max_size=8),
)
def test_budget_curve_is_monotone_and_ends_at_pass_at_1(rows, budgets):
    correct = [[c for c, _ in r] for r in rows]
    lengths = [[n for _, n in r] for r in rows]
    curve = accuracy_vs_budget(correct, lengths, budgets + [max(map(max, lengths))])
    values = list(curve.values())
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))
    assert values[-1] == pytest.approx(pass_at_k(correct, 1))


@pytest.mark.parametrize(
    "correct, lengths, budgets, match",
    [
        ([[T, F]], [[1]], [5], "problem 0: 2 correctness values but 1 lengths"),
        ([[T], [F]], [[1]], [5], "correct has 2 problems but lengths has 1"),
        ([[T]], [[1]], [], "budgets must be a non-empty list"),
        ([[T]], [[1]], [5, -1], r"budgets\[1\] is negative"),
        ([[T]], [[1]], [2.5], r"budgets\[0\] must be an integer"),
        ([], [], [5], "empty"),
    ],
)
def test_accuracy_vs_budget_rejects_bad_input(correct, lengths, budgets, match):
    with pytest.raises(ValueError, match=match):
        accuracy_vs_budget(correct, lengths, budgets)


# ----------------------------------------------------------------------------- cons@k
def test_cons_majority_vote_hand_computed():
    answers = [
        ["1", "2", "2"],  # 2 wins -> right
        ["1", "2"],  # tie -> "1", seen first -> wrong
        ["2", "1", "1", "2"],  # tie -> "2", seen first -> right
        [None, None, "3"],  # None does not vote -> "3" -> right
        [None, None],  # nobody voted -> wrong
        ["025", "7", "25"],  # "025" and "25" vote together -> right
        ["7", "7", "025"],  # 7 wins -> wrong
    ]
    golds = ["2", "2", "2", "3", "3", "25", "25"]
    assert cons_at_k(answers, golds) == pytest.approx(4 / 7)


def test_cons_voted_answer_is_checked_with_the_verifier():
    # the voted class is right when its answer is mathematically the gold, not only string-equal
    assert cons_at_k([["\\frac{1}{2}", "\\frac{1}{2}", "3"]], ["0.5"]) == 1.0
    assert cons_at_k([["0.5", "3", "3"]], ["\\frac{1}{2}"]) == 0.0


def test_cons_symbolic_equality_needs_math_verify_and_keeps_the_callers_timer():
    # 2\sqrt{2} and \sqrt{8} are different voting keys; only math-verify sees that they are equal.
    # The check runs under a SIGALRM deadline: a timer the caller had set must survive it.
    previous_handler = signal.signal(signal.SIGALRM, lambda *_: None)
    previous_timer = signal.setitimer(signal.ITIMER_REAL, 50.0)
    try:
        assert cons_at_k([["2\\sqrt{2}", "2\\sqrt{2}", "3"]], ["\\sqrt{8}"]) == 1.0
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 30.0 < left < 50.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, *previous_timer)
        signal.signal(signal.SIGALRM, previous_handler)


def test_cons_k_less_than_n_averages_over_subsets_hand_computed():
    # subsets of size 2 of ["7", "5", "5"]: (7,5) tie -> 7; (7,5) -> 7; (5,5) -> 5
    assert cons_at_k([["7", "5", "5"]], ["7"], k=2) == pytest.approx(2 / 3)
    assert cons_at_k([["7", "5", "5"]], ["5"], k=2) == pytest.approx(1 / 3)
    # ["5", "5", "7"]: (5,5) -> 5; (5,7) tie -> 5; (5,7) tie -> 5
    assert cons_at_k([["5", "5", "7"]], ["7"], k=2) == pytest.approx(0.0)
    # k = 1: the share of samples whose own answer is right (None counts wrong)
    assert cons_at_k([["5", None, "7", "5"]], ["5"], k=1) == pytest.approx(0.5)


def _reference_cons(samples: list[str | None], gold: str, k: int) -> float:
    """Brute force: every size-k subset in sample order, first-seen tie rule, canonical integers."""

    def key(a):
        return None if a is None else str(int(a))

    hits = 0
    subsets = list(combinations(range(len(samples)), k))
    for s in subsets:
        keys = [key(samples[i]) for i in s if samples[i] is not None]
        if not keys:
            continue
        counts = Counter(keys)
        best = max(counts.values())
        winner = next(x for x in keys if counts[x] == best)
        hits += winner == key(gold)
    return hits / len(subsets)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_cons_exact_subsets_match_brute_force(data):
    samples = data.draw(
        st.lists(st.one_of(st.none(), st.sampled_from(["1", "01", "2", "3", "003"])), min_size=1, max_size=7)
    )
    k = data.draw(st.integers(1, len(samples)))
    gold = data.draw(st.sampled_from(["1", "2", "3"]))
    assert cons_at_k([samples], [gold], k=k) == pytest.approx(_reference_cons(samples, gold, k))


def test_cons_sampled_subsets_are_seeded_and_close_to_exact(monkeypatch):
    samples = ["1", "2", "2", "1", "3", "2", None, "1", "3", "2"]  # n=10, k=4: C(10,4)=210 subsets
    exact = cons_at_k([samples], ["2"], k=4)
    assert exact == pytest.approx(_reference_cons(samples, "2", 4))
    monkeypatch.setattr(metrics, "CONS_EXACT_MAX_SUBSETS", 100)  # force the sampled path
    sampled = cons_at_k([samples], ["2"], k=4)
    assert sampled != exact  # really sampled
    assert sampled == pytest.approx(exact, abs=0.02)  # 10,000 draws: sd < 0.005
    assert cons_at_k([samples], ["2"], k=4) == sampled  # fixed seed: same value every call


def test_cons_large_n_uses_sampling_quickly():
    n = 64  # C(64, 16) subsets: far too many to enumerate
    samples = ["5"] * 40 + ["6"] * 24
    assert math.comb(n, 16) > metrics.CONS_EXACT_MAX_SUBSETS
    value = cons_at_k([samples], ["5"], k=16)
    # "5" wins with >= 9 of the 16 draws (hypergeometric), and every 8-8 tie, since all the "5"
    # samples come before the "6" samples
    p_win = sum(math.comb(40, a) * math.comb(24, 16 - a) for a in range(8, 17)) / math.comb(n, 16)
    assert value == pytest.approx(p_win, abs=0.012)  # 10,000 draws: sd about 0.0025


@pytest.mark.parametrize(
    "answers, golds, k, match",
    [
        ([], [], None, "empty"),
        ([["1"], []], ["1", "1"], None, r"answers\[1\] has no samples"),
        ([["1"]], ["1", "2"], None, "one gold answer per problem"),
        ([["1", 2]], ["1"], None, r"answers\[0\]\[1\] must be a string or None"),
        ([["1"]], [""], None, r"golds\[0\] must be a non-empty string"),
        ([["1", "2"]], ["1"], 3, "k=3 exceeds the 2 samples of problem 0"),
        ([["1"]], ["1"], 0, "k must be an integer >= 1"),
    ],
)
def test_cons_rejects_bad_input(answers, golds, k, match):
    with pytest.raises(ValueError, match=match):
        cons_at_k(answers, golds, k=k)
