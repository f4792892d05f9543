"""Is an extracted answer equal to the gold answer? Runs inside the grading worker processes.

What counts as correct (in this order; the first that says "equal" wins):
1. exact canonical match (`canonical_answer`): same number, same text up to LaTeX decoration. It is cheap
   and cannot hang, so it goes first; it is also the fallback when math-verify cannot parse a side.
2. math-verify: `parse` of `\\boxed{answer}` (only the extracted answer, never the whole response: parse
   cost grows with the text) against `parse` of `\\boxed{gold}`, then `verify(gold, answer)` -- numeric
   equality to 6 decimals, symbolic equality, sets, intervals, equations, matrices. Both sides are read
   first (`for_parse`, the rules of `notation.py`): constants spelled `\\mathrm{e}` become e, units,
   currency signs and trailing punctuation go, thousands separators and mixed numbers become numbers,
   and an answer with two digits apart across a space (`1 2`, which math-verify reads as 3) is left to
   the canonical comparison alone. Sets and relations compare both ways (`allow_set_relation_comp`):
   gold `[-2,7]` accepts `-2 \\le x \\le 7` as the reverse always did, and rejects `-2 < x \\le 7`.
A multiple-choice answer (`\\textbf{(C)}\\ 70`) is tried as its value ("70") and as its letter ("C"), so it is
correct against gold "70" or "C"; a bare letter is never equal to a number.

Guards, because a model in training writes anything and sympy evaluates exactly:
- an answer longer than `MAX_PARSE_CHARS` or nested deeper than `MAX_NESTING` brackets is compared only
  canonically (the LaTeX parser's time grows steeply with nesting; bench/RESULTS.md, "Design measurements");
- a parsed answer whose exact value would have more than `MAX_DIGITS` digits (`9^{9^{9^{9^9}}}`,
  `100000000!`, `2^{100000000}`) is dropped before `verify`, unless the gold is as large;
- everything runs under `time_limit`, one `setitimer` budget per response. math-verify's own timeouts are
  switched off: they use `signal.alarm` too (whole seconds, one per call) and would cancel ours.
The parent process still enforces a hard deadline by killing the worker, for code stuck in C.

Only math-verify (sympy) and the standard library are imported here: worker start-up stays light.
"""

from __future__ import annotations

import logging
import math
import signal
from contextlib import contextmanager
from functools import lru_cache

from nemo_lead.verify.canonical import canonical_answer, latex_from_unicode
from nemo_lead.verify.extract import split_choice_label
from nemo_lead.verify.notation import (
    has_digit_gap,
    is_plain_number,
    join_digit_groups,
    mixed_number,
    read_constants,
    spaces_as_blanks,
    strip_units,
)
from nemo_lead.verify.repetition import find_repetition

MAX_PARSE_CHARS = 1000
MAX_NESTING = 12
MAX_DIGITS = 100_000
_MAX_TREE_DEPTH = 200


class TimeUp(BaseException):
    """Raised by `time_limit`. A BaseException so that math-verify's `except Exception` does not eat it."""


_REFIRE_S = 0.05


@contextmanager
def time_limit(seconds: float):
    """Raise TimeUp in the calling (main) thread after `seconds` of wall time.

    The alarm fires again every 50 ms until the block exits: Python drops exceptions raised while a
    garbage-collector callback or a `__del__` runs, so one alarm can be lost."""
    active = [True]

    def _expire(signum, frame):
        if active[0]:
            raise TimeUp(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, _REFIRE_S)
    try:
        yield
    finally:
        while True:  # an alarm landing here, before `active` is cleared, must not skip the disarming
            try:
                active[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                break
            except TimeUp:
                continue
        signal.signal(signal.SIGALRM, previous)


def _nesting(s: str) -> int:
    depth = deepest = 0
    for ch in s:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


@lru_cache(maxsize=4096)
def _parse_boxed(answer: str) -> tuple:
    """math-verify's parse of `\\boxed{answer}` (sympy objects, then string fallbacks), cached: a group's
    gold answer is parsed once per worker."""
    from math_verify import parse

    boxed = answer if "\\boxed" in answer else "\\boxed{" + answer + "}"
    return tuple(parse(boxed, parsing_timeout=None))


def _int_log10(n: int) -> float:
    n = abs(n)
    return math.log10(n) if 0 < n.bit_length() < 1000 else 0.30103 * n.bit_length()


def _log10_size(expr, depth: int = 0) -> float:
    """Upper estimate of log10 |value| of a sympy expression built from number literals (symbols count as
    size 0). Cheap: never evaluates anything."""
    if depth > _MAX_TREE_DEPTH:
        return math.inf
    if getattr(expr, "is_Rational", False):
        return max(_int_log10(int(expr.p)), _int_log10(int(expr.q)))
    if getattr(expr, "is_Float", False):
        _, _, exponent, bits = expr._mpf_  # value = mantissa * 2**exponent, mantissa of `bits` bits
        return 0.30103 * abs(exponent + bits)
    args = getattr(expr, "args", ())
    if not args:
        return 0.0
    sizes = [_log10_size(a, depth + 1) for a in args]
    name = type(expr).__name__
    if name == "Pow":
        base, exponent = sizes
        return math.inf if exponent > 9 else base * 10.0**exponent
    if name in ("factorial", "factorial2", "subfactorial", "RisingFactorial", "FallingFactorial"):
        n = max(sizes)
        return math.inf if n > 8 else 10.0**n * max(n, 1.0)
    if name == "Mul":
        return sum(sizes)
    return max(sizes) + 1.0


def _explosive(expr) -> bool:
    return _log10_size(expr) > MAX_DIGITS


def _parseable(answer: str) -> bool:
    return len(answer) <= MAX_PARSE_CHARS and _nesting(answer) <= MAX_NESTING


def _is_expr(x) -> bool:
    return not isinstance(x, str)


def for_parse(answer: str, bare_units: bool = False) -> str | None:
    """`answer` as math-verify is given it (the module docstring, point 2), or None when it is not to be
    parsed (two digits apart across a space). `bare_units`: strip `m^2`-style units too (the gold is a
    plain number)."""
    s = strip_units(read_constants(spaces_as_blanks(answer)), bare=bare_units)
    s = join_digit_groups(s)
    value = mixed_number(s)
    if value is not None:
        return f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator != 1 else str(value)
    return None if has_digit_gap(s) else s


def _math_verify_equal(candidate: str, gold: str) -> bool:
    """math-verify's verdict on the two answers as `for_parse` reads them."""
    from math_verify import verify

    gold_read = for_parse(gold)
    answer = for_parse(candidate, bare_units=gold_read is not None and is_plain_number(gold_read))
    if gold_read is None or answer is None or not _parseable(answer):
        return False
    gold_parsed = [g for g in _parse_boxed(gold_read) if _is_expr(g)]
    if not gold_parsed:
        return False
    gold_big = any(_explosive(g) for g in gold_parsed)
    pred = [p for p in _parse_boxed(answer) if _is_expr(p) and (gold_big or not _explosive(p))]
    return bool(pred) and verify(gold_parsed, pred, timeout_seconds=None, allow_set_relation_comp=True)


def answers_match(answer: str, gold: str) -> bool:
    """True when `answer` (an extracted final answer) equals `gold` (see the module docstring).
    Call it under `time_limit` in a process's main thread: sympy can run for a very long time."""
    answer = latex_from_unicode(answer)
    label, value = split_choice_label(answer)
    candidates = [value, label] if label and value else [answer]
    gold_key = canonical_answer(gold)
    for candidate in candidates:
        key = canonical_answer(candidate)
        if key is not None and key == gold_key:
            return True
    return any(_math_verify_equal(c, gold) for c in candidates)


def grade_task(task: tuple) -> tuple[str, bool, str | None]:
    """One worker job. task = (answer or None, gold, text to check for repetition or None, seconds[, grid]).

    Returns (status, correct, repetition): status "ok" or "timeout" (the budget ran out: correct False,
    repetition None). Repetition is looked for only in responses that are not correct (which responses
    reach here with a text is the verifier's rule); `grid`: on the authors' chunk grid (`find_repetition`)."""
    answer, gold, text, seconds, *rest = task
    grid = bool(rest[0]) if rest else False
    try:
        with time_limit(seconds):
            correct = answer is not None and answers_match(answer, gold)
            repetition = find_repetition(text, grid=grid) if text is not None and not correct else None
    except TimeUp:
        return "timeout", False, None
    return "ok", correct, repetition


# Pairs that touch the lazily imported parts of sympy and latex2sympy (fractions, radicals, intervals,
# sets, equations, decimals), so a worker pays those imports before it reports ready.
_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("(0,1]", "[0,1)"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("x=3", "3"),
    ("\\pi", "3.14"),
)


def warm_up() -> None:
    """Worker start-up: quiet math-verify's per-call warnings and pay sympy's lazy imports now."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    for answer, gold in _WARM_UP:
        _math_verify_equal(answer, gold)
    _parse_boxed.cache_clear()
