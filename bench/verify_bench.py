"""Grading throughput: naive math-verify vs `MathVerifier` with 1 and 2 workers, on rollout-like responses.

A fixed, seeded set of 2,000 responses in R1 format (`<think>` ~4,000 characters of chain of thought
`</think>` then a boxed answer): integers, fractions, radicals and intervals, about 60% correct (often in
another form than the gold: 0.5 vs \\frac{1}{2}, \\sqrt{8} vs 2\\sqrt{2}), plus 2% hostile inputs (a 1 MB
random string, 2,000 nested parentheses, 9^{9^{9^{9^9}}}, 100000000!, a megabyte of braces, unbalanced
braces, an empty string, unicode, a huge binomial and an integral that sympy works on until the deadline).

Figures (all in one run, same machine, same responses):
- (a) naive: `verify(parse("\\boxed{gold}"), parse(response))` on the whole text, one process (math-verify's
  own 5 s alarms bound it on these hostile inputs; on code stuck in C it would hang);
- (b) `MathVerifier(workers=1)` and `MathVerifier(workers=2)`: responses/s on the 1,960 realistic and on all
  2,000 (each against (a) on the same responses), and the slowest single response (goal: <= timeout_s + 1 s).
  Pool start-up is excluded (`wait_ready`) and reported; torch (for `Outcome`) is imported beforehand, as
  it is in any training process.

    OMP_NUM_THREADS=1 .venv/bin/python bench/verify_bench.py [--record] [--n 2000] [--timeout 5]
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import random
import time
from fractions import Fraction

from results_md import machine_line
from results_md import record as record_md

record = functools.partial(record_md, "verify")

_SENTENCES = [
    "Let me denote the unknown by $x$ and write down what we know.",
    "We have $x^2 - {a}x + {b} = 0$, so by Vieta's formulas the roots sum to ${a}$.",
    "Substituting $y = {a}$ gives $3y + {b} = {c}$, which we can check directly.",
    "Wait, let me double-check the previous step: ${a} \\cdot {b} = {c}$.",
    "The area of the triangle is $\\frac{{1}}{{2}} \\cdot {a} \\cdot {b} = {c}$.",
    "Hmm, so the sequence goes {a}, {b}, {c}, and the differences are constant.",
    "By the Pythagorean theorem, $\\sqrt{{{a}^2 + {b}^2}}$ is the hypotenuse.",
    "Now consider the interval $({a}, {b}]$ and check the endpoints separately.",
    "Alternatively, we could count the complement: ${c} - {a} = {b}$ cases.",
    "So $f({a}) = {b}$ and $f({b}) = {c}$; the function is increasing here.",
    "Let's verify with a small case: when $n = {a}$, the formula gives ${c}$.",
    "Therefore $\\dfrac{{{a}}}{{{b}}}$ cannot be simplified further since they are coprime.",
]


def _chain_of_thought(rng: random.Random, chars: int = 4000) -> str:
    parts, size = [], 0
    while size < chars:
        s = rng.choice(_SENTENCES).format(a=rng.randint(2, 99), b=rng.randint(2, 999), c=rng.randint(2, 9999))
        parts.append(s)
        size += len(s) + 1
    return " ".join(parts)


def _answer_pair(rng: random.Random) -> tuple[str, str]:
    """(answer as the response writes it, gold as the dataset writes it); about 60% equal in value."""
    correct = rng.random() < 0.6
    kind = rng.choice(["integer", "integer", "fraction", "radical", "interval"])
    if kind == "integer":
        n = rng.randint(0, 999)
        shown = n if correct else n + rng.choice([-1, 1, 10])
        return rng.choice([str(shown), f"{shown:03d}", f"x = {shown}"]), str(n)
    if kind == "fraction":
        p, q = rng.randint(1, 50), rng.choice([2, 3, 4, 5, 7, 8, 16, 25])
        value = Fraction(p, q) if correct else Fraction(p + 1, q)
        forms = [f"\\frac{{{value.numerator}}}{{{value.denominator}}}", f"\\dfrac{{{value.numerator}}}{{{value.denominator}}}"]
        if (value * 10**6).denominator == 1:
            forms.append(f"{float(value):g}")
        g = Fraction(p, q)
        return rng.choice(forms), f"\\frac{{{g.numerator}}}{{{g.denominator}}}"
    if kind == "radical":
        a, b = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
        shown_a = a if correct else a + 1
        return rng.choice([f"{shown_a}\\sqrt{{{b}}}", f"\\sqrt{{{shown_a * shown_a * b}}}"]), f"{a}\\sqrt{{{b}}}"
    lo, hi = sorted(rng.sample(range(-20, 21), 2))
    left, right = rng.choice([("(", "]"), ("[", ")"), ("(", ")")])
    shown_left = left if correct else ("[" if left == "(" else "(")
    return rng.choice([f"{shown_left}{lo}, {hi}{right}", f"\\left{shown_left}{lo},{hi}\\right{right}"]), f"{left}{lo},{hi}{right}"


def hostile_inputs(rng: random.Random) -> list[tuple[str, str]]:
    junk = "".join(rng.choice("abcxyz0123456789{}()\\^ $") for _ in range(1_000_000))
    return [
        ("1 MB random string", junk),
        ("2,000 nested parentheses", "\\boxed{" + "(" * 2000 + "1" + ")" * 2000 + "}"),
        ("9^{9^{9^{9^9}}}", "</think> \\boxed{9^{9^{9^{9^9}}}}"),
        ("100000000!", "</think> \\boxed{100000000!}"),
        ("megabyte of braces", "\\boxed{" + "{" * 1_000_000),
        ("unbalanced braces", "</think> \\boxed{\\frac{1}{2}"),
        ("empty", ""),
        ("unicode", "</think> 答案是 \\boxed{√2 ≈ 1.41} 🎉"),
        ("huge binomial", "</think> \\boxed{\\binom{1000000000}{500000000}}"),
        ("hard integral", "</think> \\boxed{\\int_0^1 x^{1000} e^{x} dx}"),
    ]


def build(n: int, seed: int = 0) -> tuple[list[str], list[str], list[bool]]:
    """n responses, golds, and which are hostile (2%, spread evenly)."""
    rng = random.Random(seed)
    hostile = hostile_inputs(rng)
    n_hostile = round(0.02 * n)
    every = n // n_hostile if n_hostile else n + 1
    responses, golds, is_hostile = [], [], []
    for i in range(n):
        if n_hostile and i % every == every - 1 and sum(is_hostile) < n_hostile:
            text = hostile[sum(is_hostile) % len(hostile)][1]
            responses.append(text)
            golds.append("5")
            is_hostile.append(True)
            continue
        answer, gold = _answer_pair(rng)
        responses.append(f"<think>\n{_chain_of_thought(rng)}\n</think>\n\nSo the final answer is $\\boxed{{{answer}}}$.")
        golds.append(gold)
        is_hostile.append(False)
    return responses, golds, is_hostile


def naive(responses: list[str], golds: list[str]) -> tuple[list[bool], list[float]]:
    """The baseline: math-verify on the whole response, in this process (its own 5 s alarms apply)."""
    from math_verify import parse, verify

    correct, seconds = [], []
    for r, g in zip(responses, golds):
        t = time.perf_counter()
        correct.append(bool(verify(parse("\\boxed{" + g + "}"), parse(r))))
        seconds.append(time.perf_counter() - t)
    return correct, seconds


def ours(workers: int, timeout_s: float, responses: list[str], golds: list[str]):
    from nemo_lead.verify import MathVerifier

    t = time.perf_counter()
    with MathVerifier(workers=workers, timeout_s=timeout_s) as v:
        v.wait_ready()
        start_s = time.perf_counter() - t
        t = time.perf_counter()
        grades = v.grade(responses, golds)
        seconds = time.perf_counter() - t
    return grades, seconds, start_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md")
    args = ap.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import nemo_lead.algorithms  # noqa: F401  (torch, for Outcome: loaded in any training process already)

    load_before = os.getloadavg()

    responses, golds, is_hostile = build(args.n)
    real = [i for i, h in enumerate(is_hostile) if not h]
    real_r, real_g = [responses[i] for i in real], [golds[i] for i in real]
    chars = sum(map(len, real_r)) / len(real_r)
    print(f"{len(responses)} responses ({len(real)} realistic, mean {chars:.0f} chars; {sum(is_hostile)} hostile)")

    naive_ok, naive_secs = naive(responses, golds)
    naive_real_rate = len(real) / sum(naive_secs[i] for i in real)
    naive_all_rate = len(responses) / sum(naive_secs)
    print(f"(a) naive math-verify, whole text, 1 process: {naive_real_rate:8.1f} responses/s realistic, "
          f"{naive_all_rate:8.1f} with hostile; slowest {max(naive_secs):.2f} s")
    hostile_names = [name for name, _ in hostile_inputs(random.Random(0))]
    hostile_secs: dict[str, float] = {}
    for k, i in enumerate(i for i, h in enumerate(is_hostile) if h):
        name = hostile_names[k % len(hostile_names)]
        hostile_secs[name] = max(hostile_secs.get(name, 0.0), naive_secs[i])

    lines = []
    for workers in (1, 2):
        g_real, s_real, start_s = ours(workers, args.timeout, real_r, real_g)
        g_all, s_all, _ = ours(workers, args.timeout, responses, golds)
        agree = sum(g.correct == naive_ok[i] for g, i in zip(g_real, real))
        slowest = max(g.seconds for g in g_all)
        timeouts = sum(g.status == "timeout" for g in g_all)
        rate_real, rate_all = len(real) / s_real, len(responses) / s_all
        lines.append((workers, rate_real, rate_real / naive_real_rate, rate_all, rate_all / naive_all_rate, slowest,
                      timeouts, start_s, agree))
        print(f"(b) MathVerifier(workers={workers}): {rate_real:8.1f} responses/s realistic "
              f"({rate_real / naive_real_rate:.2f}x naive), {rate_all:8.1f} with hostile "
              f"({rate_all / naive_all_rate:.2f}x); slowest {slowest:.2f} s (timeout_s {args.timeout}); "
              f"{timeouts} timeouts; start-up {start_s:.2f} s; agrees with naive on {agree}/{len(real)}")
    for name, took in hostile_secs.items():
        print(f"    naive, slowest {name}: {took:.2f} s")
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")

    if args.record:
        body = [
            f"Command: `OMP_NUM_THREADS=1 .venv/bin/python bench/verify_bench.py --record` "
            f"(n {args.n}, timeout_s {args.timeout}); {machine_line()}; load average at the start "
            f"{load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}.",
            "",
            f"{len(responses)} seeded responses ({len(real)} realistic, mean {chars:.0f} characters, "
            f"{sum(is_hostile)} hostile). Baseline (a): naive math-verify on the whole text, one process: "
            f"**{naive_real_rate:.1f} responses/s** on the realistic ones, **{naive_all_rate:.1f}** on all "
            f"(slowest {max(naive_secs):.2f} s).",
            "",
            "| grader | realistic: resp/s | vs (a) | all incl. hostile: resp/s | vs (a) | slowest response | "
            "timeouts | start-up | agrees with (a) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for w, rr, xr, ra, xa, slow, to, st, agree in lines:
            body.append(f"| MathVerifier(workers={w}) | {rr:.1f} | {xr:.2f}x | {ra:.1f} | {xa:.2f}x | {slow:.2f} s | "
                        f"{to} | {st:.2f} s | {agree}/{len(real)} |")
        two = lines[-1]
        body += [
            "",
            f"Goals: MathVerifier(workers=2) >= 3x (a): {two[2]:.2f}x realistic, {two[4]:.2f}x with hostile "
            f"({'met' if min(two[2], two[4]) >= 3 else 'NOT met'}); slowest response <= timeout_s + 1 s: "
            f"{two[5]:.2f} s ({'met' if two[5] <= args.timeout + 1 else 'NOT met'}). The timeouts are the huge "
            "binomial and the integral, which sympy works on until the deadline; the other hostile inputs are "
            "stopped at once by the grader's guards (size, nesting, digit count), where (a) waits for its own "
            "5 s alarms. The load at the end is the benchmark's own processes.",
        ]
        body += ["", "Naive math-verify, slowest instance of each hostile input:", ""]
        body += [f"- {name}: {took:.2f} s" for name, took in hostile_secs.items()]
        record("bench", "Grading throughput (bench/verify_bench.py)", body)


if __name__ == "__main__":
    main()
