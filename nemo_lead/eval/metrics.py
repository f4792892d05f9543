"""The paper's evaluation metrics, as plain functions over per-problem lists of samples.

Inputs are nested lists, one inner list per problem, one entry per sample. Problems may have different
sample counts (a resumed or partly failed run); every function checks its input and raises ValueError
naming the problem index rather than averaging over something malformed. Empty input (no problems, or
a problem with no samples) is an error, not 0: a score over nothing is undefined, and a silent 0 would
hide a broken generation step.

    pass_at_k            the unbiased estimator of Chen et al. (2021): for a problem with n samples of
                         which c are correct, 1 - C(n-c, k) / C(n, k), averaged over problems. Pass@1 is
                         the mean correctness. k must not exceed any problem's n.
    cons_at_k            majority vote over canonical answers (see `cons_at_k`).
    mean_length          mean response tokens over all samples (the paper's Len_avg; with ragged sample
                         counts a problem with more samples weighs more, as in a flat mean).
    accuracy_vs_budget   Pass@1 when a sample counts as correct only if it is correct AND its length is
                         <= b. `lengths` are total response tokens, counted the way `max_tokens` counts
                         them (EOS included if the engine counts it). Sampling is autoregressive, so the
                         same run with `max_tokens=b` and the same random draws would have produced the
                         first b tokens of each response: a response longer than b would have been cut
                         before its end and graded wrong (truncated), even if a \\boxed{} answer came
                         earlier. The curve is therefore the accuracy these samples would have scored at
                         each budget; it is non-decreasing in b and equals Pass@1 once b >= the longest
                         response.
"""

from __future__ import annotations

import logging
import math
import operator
import signal
import threading
import time
from collections.abc import Sequence
from itertools import combinations

import numpy as np

from nemo_lead.verify import canonical_answer
from nemo_lead.verify.match import TimeUp, answers_match, time_limit

# The names of the three scores wherever they are stored (eval summary.json, rl val.jsonl, the pipeline's
# summary.json) and shown in TensorBoard (rl: val/pass@1, ...): one spelling.
PASS_AT_1, CONS_AT_K, MEAN_LENGTH = "pass@1", "cons@k", "mean_length"
# Spellings of eval summary.json files written before 2026-12-01, read back as the names above.
OLD_SCORE_NAMES = {"pass_at_1": PASS_AT_1, "cons_at_k": CONS_AT_K, "len_avg": MEAN_LENGTH}

# cons_at_k with k < n averages the vote over all C(n, k) subsets when there are at most this many,
# else over CONS_SAMPLED_SUBSETS subsets drawn with a fixed seed per problem (so a score never changes
# between runs, and one problem's estimate does not depend on the others).
CONS_EXACT_MAX_SUBSETS = 20_000
CONS_SAMPLED_SUBSETS = 10_000
CONS_SEED = 0
CONS_MATCH_TIMEOUT_S = 5.0  # per voted answer checked against its gold


# ----------------------------------------------------------------------------- input checks
def _check_problems(name: str, values: Sequence) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a list with one list of samples per problem")
    if len(values) == 0:
        raise ValueError(f"{name} is empty: no problems to score")
    for i, samples in enumerate(values):
        if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence):
            raise ValueError(f"{name}[{i}] must be a list of samples, got {type(samples).__name__}")
        if len(samples) == 0:
            raise ValueError(f"{name}[{i}] has no samples")


def _check_bools(name: str, correct: Sequence[Sequence[bool]]) -> list[list[bool]]:
    _check_problems(name, correct)
    out = []
    for i, samples in enumerate(correct):
        for j, x in enumerate(samples):
            if not (isinstance(x, (bool, np.bool_)) or (isinstance(x, (int, float)) and x in (0, 1))):
                raise ValueError(f"{name}[{i}][{j}] must be a bool, got {x!r}")
        out.append([bool(x) for x in samples])
    return out


def _token_count(where: str, x: object) -> int:
    try:
        if isinstance(x, bool):
            raise TypeError
        n = operator.index(x)  # int and numpy integers; not floats
    except TypeError:
        raise ValueError(f"{where} must be an integer token count, got {x!r}") from None
    if n < 0:
        raise ValueError(f"{where} is negative ({n})")
    return n


def _check_lengths(name: str, lengths: Sequence[Sequence[int]]) -> list[list[int]]:
    _check_problems(name, lengths)
    return [[_token_count(f"{name}[{i}][{j}]", x) for j, x in enumerate(row)] for i, row in enumerate(lengths)]


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return k


def _check_k_fits(k: int, counts: Sequence[int], what: str) -> None:
    for i, n in enumerate(counts):
        if k > n:
            raise ValueError(f"k={k} exceeds the {n} samples of problem {i} ({what} needs k <= n)")


# ----------------------------------------------------------------------------- Pass@k and length
def _pass_at_k_one(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)  # exact integers; one correctly-rounded division


def pass_at_k(correct: Sequence[Sequence[bool]], k: int = 1) -> float:
    """Unbiased Pass@k, averaged over problems (see the module docstring)."""
    rows = _check_bools("correct", correct)
    k = _check_k(k)
    _check_k_fits(k, [len(r) for r in rows], "pass@k")
    return sum(_pass_at_k_one(len(r), sum(r), k) for r in rows) / len(rows)


def mean_length(lengths: Sequence[Sequence[int]]) -> float:
    """Mean tokens over all samples of all problems."""
    rows = _check_lengths("lengths", lengths)
    return sum(map(sum, rows)) / sum(map(len, rows))


def accuracy_vs_budget(
    correct: Sequence[Sequence[bool]], lengths: Sequence[Sequence[int]], budgets: Sequence[int]
) -> dict[int, float]:
    """{b: Pass@1 counting a sample correct only if correct and length <= b}, ascending in b."""
    rows = _check_bools("correct", correct)
    lens = _check_lengths("lengths", lengths)
    if len(rows) != len(lens):
        raise ValueError(f"correct has {len(rows)} problems but lengths has {len(lens)}")
    for i, (r, ln) in enumerate(zip(rows, lens)):
        if len(r) != len(ln):
            raise ValueError(f"problem {i}: {len(r)} correctness values but {len(ln)} lengths")
    if isinstance(budgets, (str, bytes)) or not isinstance(budgets, Sequence) or not budgets:
        raise ValueError(f"budgets must be a non-empty list of token counts, got {budgets!r}")
    budget_list = [_token_count(f"budgets[{j}]", b) for j, b in enumerate(budgets)]
    return {
        b: sum(sum(c and n <= b for c, n in zip(r, ln)) / len(r) for r, ln in zip(rows, lens)) / len(rows)
        for b in sorted(set(budget_list))
    }


# ----------------------------------------------------------------------------- Cons@k
def _subsets(n: int, k: int, seed: tuple[int, int]) -> np.ndarray:
    """int[S, k]: sample indices of each subset, each row ascending (sample order, for the tie rule)."""
    if k == n:
        return np.arange(n)[None, :]
    if math.comb(n, k) <= CONS_EXACT_MAX_SUBSETS:
        return np.array(list(combinations(range(n), k)), dtype=np.int64)
    rng = np.random.default_rng(seed)
    picks = np.argsort(rng.random((CONS_SAMPLED_SUBSETS, n)), axis=1)[:, :k]
    return np.sort(picks, axis=1)


def _winners(classes: np.ndarray, subsets: np.ndarray, n_classes: int) -> np.ndarray:
    """int[S]: the voted class of each subset (most votes, ties to the first seen); -1 if none voted."""
    votes = classes[subsets]  # [S, k], -1 = no vote
    S, k = votes.shape
    counts = np.zeros((S, n_classes + 1), dtype=np.int64)  # column 0 counts the non-votes
    np.add.at(counts, (np.repeat(np.arange(S), k), votes.ravel() + 1), 1)
    best = counts[:, 1:].max(axis=1) if n_classes else np.zeros(S, dtype=np.int64)
    leading = (votes >= 0) & (np.take_along_axis(counts, votes + 1, axis=1) == best[:, None])
    first = leading.argmax(axis=1)  # first position holding a class with the top count
    return np.where(best > 0, votes[np.arange(S), first], -1)


def _voted_answer_correct(answer: str, gold: str) -> bool:
    """`nemo_lead.verify.match.answers_match` (canonical equality, then math-verify), in this process.

    Only the few answers that win a vote are checked, so no worker pool: in the main thread the check
    runs under the verify layer's `time_limit` (CONS_MATCH_TIMEOUT_S; a timeout counts as wrong), and a
    real-time timer the caller had set (pytest-timeout, for one) is re-armed afterwards. Elsewhere it
    runs without a deadline, relying on `answers_match`'s guards against huge or deeply nested answers.
    """
    # math-verify warns on every call that its own timeouts are off (answers_match turns them off: they
    # would cancel time_limit's timer); the verify layer's workers silence it the same way
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    if threading.current_thread() is not threading.main_thread():
        return answers_match(answer, gold)
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    start = time.monotonic()
    try:
        with time_limit(CONS_MATCH_TIMEOUT_S):
            return answers_match(answer, gold)
    except TimeUp:
        return False
    finally:
        if outer_left > 0:  # time_limit cleared the process's one real-time timer
            left = max(outer_left - (time.monotonic() - start), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


def cons_at_k(answers: Sequence[Sequence[str | None]], golds: Sequence[str], k: int | None = None) -> float:
    """Cons@k: the share of problems whose majority-voted answer is correct.

    Each extracted answer is canonicalised with `nemo_lead.verify.canonical_answer` ("025" and "25" vote
    together); None, and answers that do not canonicalise, do not vote. The most frequent canonical
    answer wins; a tie goes to the answer seen first (in sample order); a problem where nobody voted
    counts as wrong. The winner (its first raw answer) is checked against the gold as the grader does
    (`_voted_answer_correct`).
    k=None votes over all of each problem's samples. With k < n the score is the expected vote
    correctness over a random size-k subset of the n samples: exact (every subset, kept in sample order
    for the tie rule) when C(n, k) <= CONS_EXACT_MAX_SUBSETS, else the mean over CONS_SAMPLED_SUBSETS
    subsets drawn by `numpy.random.default_rng((CONS_SEED, problem index))`.
    """
    _check_problems("answers", answers)
    if isinstance(golds, (str, bytes)) or len(golds) != len(answers):
        raise ValueError(f"golds must be a list with one gold answer per problem ({len(answers)})")
    for i, samples in enumerate(answers):
        for j, a in enumerate(samples):
            if a is not None and not isinstance(a, str):
                raise ValueError(f"answers[{i}][{j}] must be a string or None, got {a!r}")
    for i, g in enumerate(golds):
        if not isinstance(g, str) or not g.strip():
            raise ValueError(f"golds[{i}] must be a non-empty string, got {g!r}")
    if k is not None:
        _check_k_fits(_check_k(k), [len(a) for a in answers], "cons@k")
    total = 0.0
    for i, (samples, gold) in enumerate(zip(answers, golds)):
        ids: dict[str, int] = {}
        first_raw: list[str] = []  # the first raw answer of each class: the one checked against the gold
        classes = np.full(len(samples), -1, dtype=np.int64)
        for j, a in enumerate(samples):
            key = canonical_answer(a) if a is not None else None
            if key is None:
                continue
            if key not in ids:
                ids[key] = len(ids)
                first_raw.append(a)
            classes[j] = ids[key]
        subsets = _subsets(len(samples), len(samples) if k is None else k, (CONS_SEED, i))
        winners = _winners(classes, subsets, len(ids))
        won, times = np.unique(winners, return_counts=True)  # only classes that win need checking
        hits = sum(t for c, t in zip(won.tolist(), times.tolist()) if c >= 0 and _voted_answer_correct(first_raw[c], gold))
        total += hits / len(winners)
    return total / len(answers)
